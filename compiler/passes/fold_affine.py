"""Pass: per-channel affine maps (BatchNormalization, Mul / Add by channel vectors) become
one ``Affine`` op, which is folded into the convolution or Gemm before it when that
producer has no other consumer."""

from __future__ import annotations

import numpy as np

from .. import ops
from ..ir import Graph, Node


def _channel_vector(value: np.ndarray | None, channels: int) -> np.ndarray | None:
    """``value`` as a length-``channels`` vector if it broadcasts per channel over NCHW / NC."""
    if value is None:
        return None
    v = np.asarray(value, np.float32)
    if v.size == 1:
        return np.full(channels, float(v.reshape(-1)[0]), np.float32)
    squeezed = v.reshape(-1) if v.size == channels else None
    if squeezed is None:
        return None
    shape = [d for d in v.shape]
    # allowed: [C], [C,1,1], [1,C,1,1], [1,C]
    nontrivial = [k for k, d in enumerate(shape) if d != 1]
    if len(nontrivial) != 1:
        return None
    axis_from_end = len(shape) - nontrivial[0]
    if axis_from_end not in (1, 3) and not (len(shape) in (2, 4) and nontrivial[0] == 1):
        return None
    return squeezed.astype(np.float32)


def _matrix_weight(g: Graph, n: Node) -> np.ndarray | None:
    """The constant [in, out] weight of a MatMul on a 2-D input, else ``None``."""
    w = g.const(n.inputs[1])
    x = g.tensor(n.inputs[0])
    if w is None or w.ndim != 2 or x.shape is None or len(x.shape) != 2:
        return None
    return w


def fold_affine(graph: Graph) -> Graph:
    g = graph.copy()
    # 1. BatchNormalization / Mul / Add by a channel vector -> Affine
    for n in g.nodes:
        x = g.tensor(n.inputs[0]) if n.inputs else None
        if x is None or x.shape is None or len(x.shape) < 2:
            continue
        c = x.shape[1]
        a = b = None
        if n.op == "BatchNormalization":
            scale, bias, mean, var = (g.const(i) for i in n.inputs[1:5])
            if any(v is None for v in (scale, bias, mean, var)):
                continue
            a, b = ops.bn_affine(scale, bias, mean, var, float(n.attrs.get("epsilon", 1e-5)))
        elif n.op in ("Mul", "Add") and len(n.inputs) == 2:
            const = g.const(n.inputs[1])
            vec = _channel_vector(const, c)
            if vec is None or g.tensor(n.inputs[0]).is_const:
                continue
            a, b = (vec, np.zeros(c, np.float32)) if n.op == "Mul" else (np.ones(c, np.float32), vec)
        else:
            continue
        n.op, n.attrs = "Affine", {}
        n.inputs = [n.inputs[0], g.add_const(n.name + "/a", a), g.add_const(n.name + "/b", b)]
    # 2. fold Affine into its producer (Conv, Gemm with transB, 2-D MatMul, or another Affine)
    changed = True
    while changed:
        changed = False
        prod, cons = g.producers(), g.consumers()
        for n in list(g.nodes):
            if n.op != "Affine":
                continue
            p = prod.get(n.inputs[0])
            if p is None or len(cons.get(n.inputs[0], [])) != 1 or n.inputs[0] in g.outputs:
                continue
            a, b = g.const(n.inputs[1]), g.const(n.inputs[2])
            if p.op == "Conv" and g.const(p.inputs[1]) is not None:
                w = g.const(p.inputs[1])
                bias = g.const(p.inputs[2]) if len(p.inputs) > 2 and p.inputs[2] else np.zeros(w.shape[0], np.float32)
                p.inputs = [p.inputs[0], g.add_const(p.name + "/w_folded", w * a.reshape(-1, 1, 1, 1)),
                            g.add_const(p.name + "/b_folded", bias * a + b)]
            elif p.op == "Gemm" and g.const(p.inputs[1]) is not None and p.attrs.get("transB", 0) \
                    and float(p.attrs.get("alpha", 1.0)) == 1.0 and float(p.attrs.get("beta", 1.0)) == 1.0:
                w = g.const(p.inputs[1])
                bias = g.const(p.inputs[2]) if len(p.inputs) > 2 and p.inputs[2] else np.zeros(w.shape[0], np.float32)
                p.inputs = [p.inputs[0], g.add_const(p.name + "/w_folded", w * a.reshape(-1, 1)),
                            g.add_const(p.name + "/b_folded", np.broadcast_to(bias, a.shape) * a + b)]
            elif p.op == "MatMul" and _matrix_weight(g, p) is not None:
                w = _matrix_weight(g, p).T  # [out, in], as Gemm with transB
                p.op, p.attrs = "Gemm", {"transB": 1}
                p.inputs = [p.inputs[0], g.add_const(p.name + "/w_folded", w * a.reshape(-1, 1)),
                            g.add_const(p.name + "/b_folded", b.astype(np.float32).copy())]
            elif p.op == "Affine":
                pa, pb = g.const(p.inputs[1]), g.const(p.inputs[2])
                p.inputs = [p.inputs[0], g.add_const(p.name + "/a2", pa * a), g.add_const(p.name + "/b2", pb * a + b)]
            else:
                continue
            p.outputs = [n.outputs[0]]
            g.nodes.remove(n)
            changed = True
            break
    g.remove_unused()
    return g
