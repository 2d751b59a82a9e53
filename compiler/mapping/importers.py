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

**Channel blocks** (:func:`from_onnx_blocks`, ``--granularity channel-block``): the same
graph with the neurons of each block of channels x rows merged into one vertex, edge
weights the synapse counts between blocks, computed per layer without building the
neuron graph: how the zoo networks (up to 1.9e10 synapses) become mappable.

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


# ---------------------------------------------------------------------------------------------
# Channel-block granularity: networks too large for a neuron-level graph (the zoo)
# ---------------------------------------------------------------------------------------------


class _Blocks:
    """A tensor cut into vertices: channel blocks x row blocks (``ids[cb, rb]``)."""

    def __init__(self, ids: np.ndarray, ch: list[tuple[int, int]], rows: list[tuple[int, int]],
                 width: int):
        self.ids, self.ch, self.rows, self.width = ids, ch, rows, width

    def sizes(self) -> np.ndarray:
        c = np.array([b - a for a, b in self.ch])
        r = np.array([b - a for a, b in self.rows])
        return c[:, None] * r[None, :] * self.width

    def row_member(self, h: int) -> np.ndarray:
        """[rows blocks, h] 0/1: which rows each row block holds."""
        m = np.zeros((len(self.rows), h), np.int64)
        for k, (a, b) in enumerate(self.rows):
            m[k, a:b] = 1
        return m

    def ch_member(self, c: int) -> np.ndarray:
        m = np.zeros((len(self.ch), c), np.int64)
        for k, (a, b) in enumerate(self.ch):
            m[k, a:b] = 1
        return m


def _row_pairs(h_in, oh, k, s, pad, dil=1):
    """[oh, h_in]: kernel taps linking output row oy to input row iy."""
    m = np.zeros((oh, h_in), np.int64)
    oy = np.arange(oh)
    for t in range(k):
        iy = oy * s + t * dil - pad
        ok = (iy >= 0) & (iy < h_in)
        np.add.at(m, (oy[ok], iy[ok]), 1)
    return m


def _col_taps(w_in, ow, k, s, pad, dil=1) -> int:
    """Number of (output column, kernel column) pairs landing inside the input."""
    ox = np.arange(ow)
    return int(sum(((ox * s + t * dil - pad >= 0) & (ox * s + t * dil - pad < w_in)).sum()
                   for t in range(k)))


def from_onnx_blocks(model, *, channel_block: int = 8, vertex_limit: int = 1024,
                     name: str | None = None) -> Topology:
    """The model's layers as a graph of *channel blocks*: every activation tensor is cut
    into blocks of ``channel_block`` channels (fewer when a row is wide) by as many rows
    as keep a block within ``vertex_limit`` neurons; a vertex's size is its neuron count and
    an edge's weight the number of synapses between two blocks, exactly as the neuron-level
    graph would have them, summed (:func:`from_onnx` with the neurons of each block merged).
    Conv (strides, padding, dilation, groups), Gemm / MatMul, pooling, global pooling,
    Add / Sum, Concat and the per-position operators of :data:`SAME_NEURONS`."""
    from snpu.compiler import ops
    from snpu.compiler.frontend import load_onnx
    from snpu.compiler.passes.fold_constants import fold_constants
    from snpu.compiler.passes.remove_noops import remove_noops

    g = remove_noops(fold_constants(load_onnx(model, name=name)))
    count = 0
    sizes: list[np.ndarray] = []
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    wts: list[np.ndarray] = []
    blocks: dict[str, _Blocks] = {}

    def new(shape, where: str) -> _Blocks:
        nonlocal count
        c, h, w = (shape[1], shape[2], shape[3]) if len(shape) == 4 else (int(np.prod(shape[1:])), 1, 1)
        if w > vertex_limit:
            raise CompileError(f"{where}: a row of {w} neurons exceeds the vertex limit "
                               f"{vertex_limit}")
        cb = max(1, min(channel_block, vertex_limit // w, c))
        rb = max(1, min(h, vertex_limit // (cb * w)))
        ch = [(a, min(c, a + cb)) for a in range(0, c, cb)]
        rows = [(a, min(h, a + rb)) for a in range(0, h, rb)]
        ids = np.arange(count, count + len(ch) * len(rows), dtype=np.int64).reshape(len(ch), len(rows))
        count += ids.size
        b = _Blocks(ids, ch, rows, w)
        sizes.append(b.sizes().reshape(-1))
        return b

    def link(xb: _Blocks, yb: _Blocks, weight: np.ndarray) -> None:
        """``weight[cy, ry, cx, rx]`` synapses between blocks."""
        idx = np.nonzero(weight)
        src.append(xb.ids[idx[2], idx[3]])
        dst.append(yb.ids[idx[0], idx[1]])
        wts.append(weight[idx])

    for i in g.inputs:
        blocks[i] = new(g.tensor(i).shape, f"input {i}")
    for n in g.nodes:
        ins = [i for i in n.inputs if i and not g.tensor(i).is_const]
        if not ins:
            continue
        x = blocks[ins[0]]
        xs = g.tensor(ins[0]).shape
        ys = g.tensor(n.outputs[0]).shape
        if n.op in SAME_NEURONS:
            blocks[n.outputs[0]] = x
            continue
        if n.op == "Concat":
            parts = [blocks[i] for i in ins]
            if int(n.attrs.get("axis", 1)) % len(ys) != 1 or any(p.rows != parts[0].rows for p in parts):
                raise CompileError(f"{n.where()}: only channel concatenation has a block import")
            ch, off = [], 0
            for p, i in zip(parts, ins):
                ch += [(a + off, b + off) for a, b in p.ch]
                off += g.tensor(i).shape[1]
            blocks[n.outputs[0]] = _Blocks(np.concatenate([p.ids for p in parts]), ch,
                                           parts[0].rows, parts[0].width)
            continue
        y = new(ys, n.where())
        blocks[n.outputs[0]] = y
        if n.op == "Conv":
            kh, kw, sh, sw, pads, dil, groups, oh, ow = ops.conv_geometry(
                n, xs, g.const(n.inputs[1]).shape)
            rows = y.row_member(oh) @ _row_pairs(xs[2], oh, kh, sh, pads[0], dil[0]) @ x.row_member(xs[2]).T
            cols = _col_taps(xs[3], ow, kw, sw, pads[1], dil[1])
            ci, co = xs[1], ys[1]
            grp_in = np.arange(ci) // (ci // groups)
            grp_out = np.arange(co) // (co // groups)
            same = (grp_out[:, None] == grp_in[None, :]).astype(np.int64)
            chans = y.ch_member(co) @ same @ x.ch_member(ci).T
            link(x, y, chans[:, None, :, None] * rows[None, :, None, :] * cols)
        elif n.op in ("Gemm", "MatMul"):
            xsz, ysz = x.sizes(), y.sizes()
            link(x, y, ysz[:, :, None, None] * xsz[None, None, :, :])
        elif n.op in ("MaxPool", "AveragePool"):
            kh, kw, sh, sw, pads, oh, ow = ops.pool_geometry(n, xs)
            rows = y.row_member(oh) @ _row_pairs(xs[2], oh, kh, sh, pads[0]) @ x.row_member(xs[2]).T
            cols = _col_taps(xs[3], ow, kw, sw, pads[1])
            chans = y.ch_member(ys[1]) @ x.ch_member(xs[1]).T
            link(x, y, chans[:, None, :, None] * rows[None, :, None, :] * cols)
        elif n.op == "GlobalAveragePool":
            chans = y.ch_member(ys[1]) @ x.ch_member(xs[1]).T
            rows = np.array([[b - a for a, b in x.rows]]) * xs[3]
            link(x, y, chans[:, None, :, None] * rows[None, :, None, :])
        elif n.op in ("Add", "Sum"):
            for i in ins:
                b = blocks[i]
                if b.ch != y.ch or b.rows != y.rows:
                    raise CompileError(f"{n.where()}: inputs blocked differently")
                eye = np.zeros((len(y.ch), len(y.rows), len(b.ch), len(b.rows)), np.int64)
                sz = y.sizes()
                for c in range(len(y.ch)):
                    eye[c, :, c, :] = np.diag(sz[c])
                link(b, y, eye)
        else:
            raise CompileError(f"{n.where()}: operator {n.op} has no channel-block import")
    S = np.concatenate(src) if src else np.zeros(0, np.int64)
    D = np.concatenate(dst) if dst else np.zeros(0, np.int64)
    W = np.concatenate(wts) if wts else np.zeros(0, np.int64)
    return from_edges(count, S, D, W, np.concatenate(sizes).astype(np.int64), name=g.name)
