"""The int8 reference: the quantised graph computed with integers, as the core computes it.

Core nodes use exactly the integers of ``node.meta["q"]`` and the numerics of
:mod:`snpu.verif.numerics` (int32 accumulation, ``requantize``).  Host subgraphs run on
onnxruntime exactly as the runtime runs them (:func:`.host.run_segment`): they read model
inputs and host-produced tensors as floats and core-produced tensors dequantised, and what
they produce is quantised where the core (or the int8 comparison) reads it.  Running a
compiled program on the golden model or the RTL must give these bytes exactly.
"""

from __future__ import annotations

import numpy as np

from snpu.errors import CompileError
from snpu.verif import index as ix
from snpu.verif import numerics

from . import ops
from .frontend import input_arrays
from .ir import Graph
from .passes.quantize import quantize_tensor


def _im2col(x: np.ndarray, node) -> tuple[np.ndarray, int, int]:
    """int8 NCHW (one image: x[0]) -> patches [oh*ow, kh*kw*C] in (ky, kx, c) order."""
    kh, kw, sh, sw, pads, _, _, oh, ow = node.meta["geometry"]
    xp = np.pad(x[0].astype(np.int16), ((0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    c = x.shape[1]
    cols = np.empty((oh, ow, kh, kw, c), np.int16)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw].transpose(1, 2, 0)
    return cols.reshape(oh * ow, -1), oh, ow


def neuron_mask(x: np.ndarray, settings: dict | None) -> np.ndarray:
    """The neurons a core layer's LD unit keeps (``node.meta["neurons"]``, set by
    :mod:`.passes.neurons`; ``None``: dense, all); groups run along the last axis."""
    if settings is None:
        return np.ones(x.shape, bool)
    group = tuple(settings["group"]) if settings.get("group") else None
    return ix.sparse_unit_mask(x, settings["threshold"], group)


def _requant_channels(acc: np.ndarray, q: dict) -> np.ndarray:
    return numerics.requantize(acc, q["bias"], q["mult"], q["shift"], q["relu"])


def _clipped_windows(x: np.ndarray, node, fill):
    kh, kw, sh, sw, pads, oh, ow = ops.pool_geometry(node, x.shape)
    return ops._windows(x.astype(np.float64), kh, kw, sh, sw, pads, oh, ow, fill)


#: columns per float32 product in :func:`_int_matmul`: 1024 products of int8 values sum
#: to at most 1024 * 128 * 127 < 2**24, so every partial sum is exact in float32
_EXACT_F32_COLUMNS = 1024


def _int_matmul(v: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``v @ w.T`` exactly, as int64, for int8-range ``v`` and ``w``: float32 products over
    blocks of at most :data:`_EXACT_F32_COLUMNS` columns (exact, see there), added in
    float64 (exact: far below 2**53); over row blocks of ``w`` (a fully connected layer's
    weights can be 100M values).  With int16 patches, vgg19's two reference runs take
    2.2 s instead of 4.9 s in float64."""
    n = v.shape[1]
    step = max(1, (1 << 21) // max(1, n))
    out = np.empty((v.shape[0], w.shape[0]), np.int64)
    for r0 in range(0, w.shape[0], step):
        wb = w[r0:r0 + step]
        acc = None
        for c0 in range(0, n, _EXACT_F32_COLUMNS):
            part = v[:, c0:c0 + _EXACT_F32_COLUMNS].astype(np.float32) @ \
                wb[:, c0:c0 + _EXACT_F32_COLUMNS].astype(np.float32).T
            acc = part.astype(np.float64) if acc is None else acc + part
        out[:, r0:r0 + step] = acc if acc is not None else 0
    return out


def run_node(g: Graph, n, args: list[np.ndarray]) -> np.ndarray:
    """One core node on int8 NCHW inputs -> int8 output."""
    q = n.meta["q"] if n.op not in ("Concat", "Flatten", "Reshape", "Copy") else None
    x = args[0]
    if n.op == "Conv":  # image by image, as the core runs a batch
        ys = []
        for b in range(x.shape[0]):
            cols, oh, ow = _im2col(x[b:b + 1], n)
            cols = cols * neuron_mask(cols, n.meta.get("neurons"))  # the patches the LD unit loads
            ys.append(_requant_channels(_int_matmul(cols, q["w"]), q).T.reshape(1, -1, oh, ow))
        return np.concatenate(ys)
    if n.op in ("Gemm", "MatMul"):  # a batch: one row per image
        v = x.reshape(x.shape[0], -1).astype(np.int64)
        if q["in_perm"] is not None:
            v = v[:, q["in_perm"]]
        v = v * neuron_mask(v, n.meta.get("neurons"))  # the vector as loaded (channels last)
        acc = _int_matmul(v, q["w"])
        return _requant_channels(acc, q).reshape(g.tensor(n.outputs[0]).shape)
    if n.op == "Copy":  # the memory plan's swaps
        return x
    if n.op == "Affine":
        shape = (1, -1) + (1,) * (x.ndim - 2)
        return numerics.requantize(x.astype(np.int64), q["bias"].reshape(shape),
                                   q["mult"].reshape(shape), q["shift"].reshape(shape), q["relu"])
    if n.op == "MaxPool":
        m = _clipped_windows(x, n, -np.inf).max(axis=(-2, -1)).astype(np.int64)
        return numerics.requantize(m, 0, 1, 0, q["relu"])
    if n.op in ("AveragePool", "GlobalAveragePool"):
        if n.op == "AveragePool":
            s = _clipped_windows(x, n, 0.0).sum(axis=(-2, -1)).astype(np.int64)
        else:
            s = x.astype(np.int64).sum(axis=(2, 3), keepdims=True)
        div = q["divisors"]
        mult = np.vectorize(lambda d: q["by_divisor"][int(d)][0])(div)
        shift = np.vectorize(lambda d: q["by_divisor"][int(d)][1])(div)
        return numerics.requantize(s, 0, mult, shift, q["relu"])
    if n.op in ("Add", "Sum"):
        acc = np.zeros(x.shape, np.int64)
        for a, m in zip(args, q["in_mult"]):
            acc = numerics.wrap32(acc + a.astype(np.int64) * int(m)).astype(np.int64)
        return numerics.requantize(acc, 0, 1, q["shift"], q["relu"])
    if n.op == "Concat":
        return np.concatenate(args, axis=int(n.attrs["axis"]))
    if n.op in ("Flatten", "Reshape"):
        return x.reshape(g.tensor(n.outputs[0]).shape)
    raise CompileError(f"{n.where()}: {n.op} is marked for the core but has no int8 reference "
                       "(add it here and in the partitioner's core_support together)")


def run(g: Graph, inputs, *, keep: bool = False) -> dict[str, np.ndarray]:
    """int8 values of the outputs (of every tensor with ``keep``); an output a host
    subgraph produces that is not a float tensor (e.g. ArgMax's indices) is given as is."""
    from .host import dequantize_boundary, host_segments, quantize_boundary, run_segment

    floats: dict[str, np.ndarray] = dict(input_arrays(g, inputs))  # host-side values
    ints: dict[str, np.ndarray] = {name: quantize_tensor(a, g.tensor(name).scale)
                                   for name, a in floats.items() if g.tensor(name).scale is not None}
    segments = host_segments(g)
    segment_of = {v: k for k, names in enumerate(segments) for v in names}
    done: set = set()

    def fetch(t):
        if t in floats:
            return floats[t]
        return dequantize_boundary(g, t, ints[t])

    def store(t, v):
        floats[t] = v
        ints[t] = quantize_boundary(g, t, v)

    for n in g.nodes:
        if n.device == "core":
            ints[n.outputs[0]] = run_node(g, n, [ints[i] for i in n.inputs
                                                 if i and not g.tensor(i).is_const])
            continue
        k = segment_of.get(n.name)
        if k in done:
            continue
        done.add(k)
        run_segment(g, segments[k] if k is not None else [n.name], fetch, store)
    if keep:
        return {**floats, **ints}
    return {o: ints[o] for o in g.outputs}


def dequantize(g: Graph, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v.astype(np.float32) * np.float32(g.tensor(k).scale) for k, v in values.items()}
