"""Importers: an ONNX model's layers, or an edge-list file, as a neuron topology.

**ONNX** (:func:`from_onnx`): every activation element is a neuron (vertex of size 1) and
every synapse a connection of weight 1 — Conv (strides, padding, groups) connects each
output neuron to its receptive field, Gemm / MatMul all-to-all, pooling to its window,
Add / Sum element-wise.  Operators that keep each neuron where it is (ReLU,
BatchNormalization, Softmax and other element-wise or per-position ops, Flatten / Reshape)
do not create neurons: their output *is* their input.  Concat gives each input's neurons a
place in the output.  The front end (:mod:`snpu.compiler.frontend`) reads the model and
folds its constants first.  ``max_connections`` guards against models whose neuron-level
graph would not fit in memory (the zoo networks have billions of synapses).

**Edge list** (:func:`from_edge_list`): one connection per line, ``src dst [weight]``
(whitespace separated, non-negative integers), ``#`` starts a comment.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from snpu.errors import CompileError

from .topology import Topology, TopologyError, from_edges

#: operators whose output neurons are their input neurons
SAME_NEURONS = {"Relu", "BatchNormalization", "Affine", "Dropout", "Identity", "Softmax", "LRN",
                "Flatten", "Reshape", "Clip", "Sigmoid", "Tanh", "Cast", "Squeeze", "Unsqueeze",
                "LeakyRelu", "Mul", "Div", "Sub"}


def _conv_edges(n, xid, yid, w_shape):
    from snpu.compiler import ops

    kh, kw, sh, sw, pads, dil, groups, oh, ow = ops.conv_geometry(n, xid.shape, w_shape)
    _, ci, h, wd = xid.shape
    co = yid.shape[1]
    cig, cog = ci // groups, co // groups
    src, dst = [], []
    oy, ox = np.meshgrid(np.arange(oh), np.arange(ow), indexing="ij")
    for ky in range(kh):
        for kx in range(kw):
            iy = oy * sh + ky * dil[0] - pads[0]
            ix = ox * sw + kx * dil[1] - pads[1]
            ok = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < wd)
            iy, ix, oyy, oxx = iy[ok], ix[ok], oy[ok], ox[ok]
            for g in range(groups):
                for c_out in range(g * cog, (g + 1) * cog):
                    cins = np.arange(g * cig, (g + 1) * cig)
                    src.append(xid[0][cins][:, iy, ix].reshape(-1))
                    dst.append(np.broadcast_to(yid[0, c_out, oyy, oxx], (cig, iy.size)).reshape(-1))
    return src, dst


def _pool_edges(n, xid, yid):
    from snpu.compiler import ops

    _, c, h, w = xid.shape
    if n.op == "GlobalAveragePool":
        return [xid[0].reshape(c, -1).reshape(-1)], [np.repeat(yid[0].reshape(c), h * w)]
    kh, kw, sh, sw, pads, oh, ow = ops.pool_geometry(n, xid.shape)
    src, dst = [], []
    oy, ox = np.meshgrid(np.arange(oh), np.arange(ow), indexing="ij")
    for ky in range(kh):
        for kx in range(kw):
            iy, ix = oy * sh + ky - pads[0], ox * sw + kx - pads[1]
            ok = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
            src.append(xid[0][:, iy[ok], ix[ok]].reshape(-1))
            dst.append(yid[0][:, oy[ok], ox[ok]].reshape(-1))
    return src, dst


def from_onnx(model, *, max_connections: int = 50_000_000, name: str | None = None) -> Topology:
    from snpu.compiler.frontend import load_onnx
    from snpu.compiler.passes.fold_constants import fold_constants
    from snpu.compiler.passes.remove_noops import remove_noops

    g = remove_noops(fold_constants(load_onnx(model, name=name)))
    ids: dict[str, np.ndarray] = {}
    count = 0

    def new(shape) -> np.ndarray:
        nonlocal count
        n = int(np.prod(shape))
        a = np.arange(count, count + n, dtype=np.int64).reshape(shape)
        count += n
        return a

    for i in g.inputs:
        ids[i] = new(g.tensor(i).shape)
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    total = 0
    for n in g.nodes:
        ins = [i for i in n.inputs if i and not g.tensor(i).is_const]
        if not ins:
            continue
        x = ids[ins[0]]
        yshape = g.tensor(n.outputs[0]).shape
        if n.op in SAME_NEURONS:
            ids[n.outputs[0]] = x.reshape(yshape) if x.size == int(np.prod(yshape)) else x
            if x.size != int(np.prod(yshape)):
                raise CompileError(f"{n.where()}: {n.op} changes the neuron count; cannot import")
            continue
        if n.op == "Concat":
            axis = int(n.attrs.get("axis", 0)) % len(yshape)
            ids[n.outputs[0]] = np.concatenate([ids[i] for i in ins], axis=axis)
            continue
        y = new(yshape)
        ids[n.outputs[0]] = y
        if n.op == "Conv":
            s, d = _conv_edges(n, x, y, g.const(n.inputs[1]).shape)
        elif n.op in ("Gemm", "MatMul"):
            xf, yf = x.reshape(-1), y.reshape(-1)
            s, d = [np.repeat(xf, yf.size)], [np.tile(yf, xf.size)]
            if xf.size * yf.size > max_connections:
                raise CompileError(f"{n.where()}: {xf.size * yf.size} synapses exceed max_connections")
        elif n.op in ("MaxPool", "AveragePool", "GlobalAveragePool"):
            s, d = _pool_edges(n, x, y)
        elif n.op in ("Add", "Sum"):
            s = [ids[i].reshape(-1) for i in ins]
            d = [y.reshape(-1)] * len(ins)
        else:
            raise CompileError(f"{n.where()}: operator {n.op} has no neuron-level import")
        total += sum(a.size for a in s)
        if total > max_connections:
            raise CompileError(f"{g.name}: more than {max_connections} synapses at neuron level "
                               f"(at {n.where()}); raise max_connections or map a smaller model")
        src += s
        dst += d
    S = np.concatenate(src) if src else np.zeros(0, np.int64)
    D = np.concatenate(dst) if dst else np.zeros(0, np.int64)
    return from_edges(count, S, D, name=g.name)


def from_edge_list(path: str | Path, *, n_vertices: int | None = None) -> Topology:
    path = Path(path)
    if not path.exists():
        raise TopologyError(f"{path}: no such edge-list file")
    src, dst, wts = [], [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            body = line.split("#", 1)[0].split()
            if not body:
                continue
            if len(body) not in (2, 3):
                raise TopologyError(f"{path}:{lineno}: expected 'src dst [weight]', got {line.strip()!r}")
            try:
                vals = [int(v) for v in body]
            except ValueError:
                raise TopologyError(f"{path}:{lineno}: not an integer in {line.strip()!r}") from None
            if min(vals) < 0 or (len(vals) == 3 and vals[2] < 1):
                raise TopologyError(f"{path}:{lineno}: vertices must be >= 0 and weights >= 1")
            src.append(vals[0])
            dst.append(vals[1])
            wts.append(vals[2] if len(vals) == 3 else 1)
    V = (max(max(src), max(dst)) + 1 if src else 0) if n_vertices is None else n_vertices
    return from_edges(V, np.array(src, np.int64), np.array(dst, np.int64), np.array(wts, np.int64),
                      name=path.stem)
