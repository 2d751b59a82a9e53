"""Pass: a Relu, or a Clip to ``[0, M]`` (ReLU6 and the like), whose input comes only from a
core arithmetic op becomes that op's ``relu`` flag (requantisation clamps at zero for
free); any other becomes an identity ``Affine`` with the flag, which the core runs as one
requantisation pass.

A clip's upper bound costs nothing either: the clipped tensor's scale is fixed at ``M /
127`` (``node.meta["clip_max"]``, used by :mod:`.quantize`), so the requantisation's
saturation at 127 *is* the clip.  A Clip whose bounds are not constant, whose lower bound
is not 0, or whose result feeds a concatenation (which shares one scale among its inputs)
stays an ONNX Clip and runs on the host.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node

FUSABLE = {"Conv", "Gemm", "Affine", "Add", "Sum", "AveragePool", "GlobalAveragePool", "MatMul"}


def clip_bounds(g: Graph, n: Node) -> tuple[float, float | None] | None:
    """(0, M or None) if ``n`` is a Relu or a Clip to [0, M] with constant bounds, else None."""
    if n.op == "Relu":
        return 0.0, None
    if n.op != "Clip":
        return None
    if "min" in n.attrs or "max" in n.attrs:  # opset < 11
        lo, hi = n.attrs.get("min"), n.attrs.get("max")
    else:
        def const(k):
            if len(n.inputs) <= k or not n.inputs[k]:
                return None
            v = g.const(n.inputs[k])
            return np.nan if v is None else float(np.asarray(v).reshape(-1)[0])
        lo, hi = const(1), const(2)
    if lo is None or np.isnan(lo) or float(lo) != 0.0 or (hi is not None and (np.isnan(hi) or hi <= 0)):
        return None
    return 0.0, None if hi is None or np.isinf(hi) else float(hi)


def fuse_relu(graph: Graph) -> Graph:
    g = graph.copy()
    prod, cons = g.producers(), g.consumers()
    for n in list(g.nodes):
        bounds = clip_bounds(g, n)
        if bounds is None:
            continue
        hi = bounds[1]
        if hi is not None and any(c.op == "Concat" for c in cons.get(n.outputs[0], [])):
            continue
        p = prod.get(n.inputs[0])
        x = g.tensor(n.inputs[0])
        if p is None or p.op not in FUSABLE or len(cons.get(n.inputs[0], [])) != 1 \
                or n.inputs[0] in g.outputs or p.meta.get("relu"):
            if x.shape is not None and len(x.shape) >= 2:
                c = x.shape[1]
                n.op, n.attrs, n.meta["relu"] = "Affine", {}, True
                if hi is not None:
                    n.meta["clip_max"] = hi
                n.inputs = [n.inputs[0], g.add_const(n.name + "/a", np.ones(c, np.float32)),
                            g.add_const(n.name + "/b", np.zeros(c, np.float32))]
            continue
        p.meta["relu"] = True
        if hi is not None:
            p.meta["clip_max"] = hi
        p.outputs = [n.outputs[0]]
        g.nodes.remove(n)
    g.remove_unused()
    return g


def activation(n: Node, y: np.ndarray) -> np.ndarray:
    """A fused activation applied to a node's float result (the float reference)."""
    if n.meta.get("relu"):
        y = np.maximum(y, 0)
        if n.meta.get("clip_max") is not None:
            y = np.minimum(y, n.meta["clip_max"])
    return y
