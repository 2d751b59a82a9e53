"""Pass: post-training int8 quantisation with calibration.

* **Activations**: symmetric int8, one scale per tensor: ``scale = max|x| / 127`` over the
  calibration inputs (run through the float reference).  Tensors that must share a scale
  do: a core Concat's inputs and output (they share memory), a view (Flatten / Reshape) and
  its input, a MaxPool's input and output (max commutes with scaling).
* **Weights**: symmetric int8 per output channel; biases int32 in the accumulator's units.
* **Requantisation**: every core op gets, per output channel, ``mult`` / ``shift`` (and an
  accumulator-unit ``bias``) such that ``req`` (``verif/numerics.py``) maps its int32 result
  to the output's int8; element-wise adds get int16 input multipliers.

Results: ``tensor.scale`` for every activation, ``node.meta["q"]`` for every core node (the
exact integers the code generator emits and the int8 reference computes with).
"""

from __future__ import annotations

import numpy as np

from snpu.errors import CompileError
from snpu.verif import numerics

from .. import float_ref, ops
from ..ir import Graph

QMAX = 127.0


def quantize_tensor(x: np.ndarray, scale: float) -> np.ndarray:
    """float -> int8 with ``scale`` (round half away from zero, saturate)."""
    q = np.trunc(np.asarray(x, np.float64) / scale + np.copysign(0.5, x))
    return np.clip(q, -128, 127).astype(np.int8)


def _multipliers(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mult, shift = np.zeros(scales.size, np.int64), np.zeros(scales.size, np.int64)
    for k, s in enumerate(np.asarray(scales, np.float64).reshape(-1)):
        if abs(s) < 2.0 ** -40:  # the channel is (numerically) constant zero
            continue
        try:
            mult[k], shift[k] = numerics.quantize_multiplier(float(s))
        except ValueError:
            mult[k], shift[k] = (numerics.MULT_MAX if s > 0 else numerics.MULT_MIN), 0
    return mult, shift


class _Groups:
    def __init__(self):
        self.parent: dict[str, str] = {}

    def find(self, a):
        self.parent.setdefault(a, a)
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a, b):
        self.parent[self.find(a)] = self.find(b)


def flatten_permutation(g: Graph, name: str) -> np.ndarray | None:
    """If ``name`` is a core view flattening a [1, C, H, W] tensor, the permutation taking
    the logical (C, H, W) order to the memory's (H, W, C) order."""
    prod = g.producers().get(name)
    if prod is None or prod.op not in ("Flatten", "Reshape") or prod.device != "core":
        return None
    src = g.tensor(prod.inputs[0]).shape
    if src is None or len(src) != 4 or (src[2] == 1 and src[3] == 1):
        return None
    c, h, w = src[1:]
    return np.arange(c * h * w).reshape(c, h, w).transpose(1, 2, 0).reshape(-1)


def quantize(graph: Graph, calibration: list) -> Graph:
    if not calibration:
        raise CompileError("quantisation needs at least one calibration input")
    g = graph.copy()
    ranges: dict[str, float] = {}
    for x in calibration:
        values = float_ref.run(g, x, keep=True)
        for name, v in values.items():
            t = g.tensors.get(name)
            if t is None or t.is_const or not np.issubdtype(np.asarray(v).dtype, np.floating):
                continue
            m = float(np.nanmax(np.abs(v))) if np.asarray(v).size else 0.0
            if not np.isfinite(m):
                raise CompileError(f"tensor {name!r} is not finite on the calibration inputs")
            ranges[name] = max(ranges.get(name, 0.0), m)

    # a fused clip to [0, M]: the scale M / 127 makes the requantisation's saturation the clip
    clipped = {n.outputs[0]: float(n.meta["clip_max"]) for n in g.nodes
               if n.meta.get("clip_max") is not None}
    for name, m in clipped.items():
        ranges[name] = m
    groups = _Groups()
    for n in g.nodes:
        if n.device != "core":
            continue
        if n.op == "Concat":
            for i in n.inputs:
                groups.union(i, n.outputs[0])
        elif n.op in ("Flatten", "Reshape", "MaxPool"):
            groups.union(n.inputs[0], n.outputs[0])
    gmax: dict[str, float] = {}
    for name, r in ranges.items():
        root = groups.find(name)
        gmax[root] = max(gmax.get(root, 0.0), r)
    for name in ranges:
        r = gmax[groups.find(name)]
        g.tensors[name].scale = (r / QMAX) if r > 0 else 1.0
    for name, m in clipped.items():
        if gmax[groups.find(name)] != m:
            raise CompileError(f"tensor {name!r} is clipped to [0, {m}] but shares its scale "
                               f"with a wider tensor (range {gmax[groups.find(name)]:.4g}); "
                               "the clip would not be exact")

    for n in g.nodes:
        if n.device != "core":
            continue
        x = g.tensor(n.inputs[0])
        y = g.tensor(n.outputs[0])
        sx, sy = x.scale, y.scale
        relu = bool(n.meta.get("relu"))
        if n.op in ("Conv", "Gemm", "MatMul"):
            n.meta["q"] = _matrix_params(g, n, sx, sy, relu)
            if n.op == "Conv":
                n.meta["geometry"] = ops.conv_geometry(n, x.shape, g.const(n.inputs[1]).shape)
        elif n.op == "Affine":
            a, b = g.const(n.inputs[1]).astype(np.float64), g.const(n.inputs[2]).astype(np.float64)
            m = sx * a / sy
            mult, shift = _multipliers(m)
            with np.errstate(divide="ignore", invalid="ignore"):
                bias = np.where(mult != 0, np.round(b / (sx * a)), 0)
            bias = np.clip(np.nan_to_num(bias), -2**31, 2**31 - 1).astype(np.int64)
            n.meta["q"] = {"bias": bias, "mult": mult, "shift": shift, "relu": relu}
        elif n.op == "MaxPool":
            c = x.shape[1]
            n.meta["q"] = {"mult": np.ones(c, np.int64), "shift": np.zeros(c, np.int64),
                           "bias": np.zeros(c, np.int64), "relu": relu,
                           "halo": ops.pool_halo(g, n)}
        elif n.op in ("AveragePool", "GlobalAveragePool"):
            if n.op == "AveragePool":
                div = ops.avgpool_divisors(n, x.shape[2], x.shape[3])
            else:
                div = np.full((1, 1), x.shape[2] * x.shape[3], np.float64)
            table = {}
            for d in np.unique(div):
                table[int(d)] = tuple(int(v[0]) for v in _multipliers(np.array([sx / (d * sy)])))
            n.meta["q"] = {"divisors": div.astype(np.int64), "by_divisor": table, "relu": relu,
                           "halo": ops.pool_halo(g, n)}
        elif n.op in ("Add", "Sum"):
            ratios = np.array([g.tensor(i).scale / sy for i in n.inputs])
            k = int(np.floor(np.log2(32767.0 / ratios.max())))
            k = max(0, min(k, 24))
            mults = np.clip(np.round(ratios * 2.0 ** k), 1, 32767).astype(np.int64)
            n.meta["q"] = {"in_mult": mults, "shift": k, "relu": relu}
    g.meta["scales"] = {k: t.scale for k, t in g.tensors.items() if t.scale is not None}
    return g


def _matrix_params(g: Graph, n, sx: float, sy: float, relu: bool) -> dict:
    """Per-channel int8 weights [out, in] in the core's order, int32 bias, requantisation."""
    w = g.const(n.inputs[1])
    if n.op == "Conv":
        full = ops.ungrouped_weights(w, int(n.attrs.get("group", 1)))
        rows = full.transpose(0, 2, 3, 1).reshape(full.shape[0], -1)  # (ky, kx, c) patches
    elif n.op == "Gemm" and n.attrs.get("transB", 0):
        rows = w
    else:
        rows = w.T
    perm = flatten_permutation(g, n.inputs[0])
    # row blocks in float64 (a fully connected layer's weights can be 100M values: no
    # float64 copy of all of them at once)
    sw = np.empty(rows.shape[0])
    wq = np.empty(rows.shape, np.int8)
    step = max(1, (1 << 22) // max(1, rows.shape[1]))
    for r0 in range(0, rows.shape[0], step):
        blk = rows[r0:r0 + step].astype(np.float64)
        s = np.abs(blk).max(axis=1) / QMAX
        s[s == 0] = 1.0
        sw[r0:r0 + step] = s
        wq[r0:r0 + step] = np.clip(np.round(blk / s[:, None]), -127, 127).astype(np.int8)
    if perm is not None:  # per-row scales: permuting the int8 columns is the same, and smaller
        wq = wq[:, perm]
    if len(n.inputs) > 2 and n.inputs[2]:
        b = np.broadcast_to(g.const(n.inputs[2]).astype(np.float64).reshape(-1), (rows.shape[0],))
    else:
        b = np.zeros(rows.shape[0])
    bias = np.clip(np.round(b / (sx * sw)), -2**31, 2**31 - 1).astype(np.int64)
    mult, shift = _multipliers(sx * sw / sy)
    return {"w": wq, "bias": bias, "mult": mult, "shift": shift, "relu": relu, "in_perm": perm}
