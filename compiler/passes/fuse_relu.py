"""Pass: a Relu whose input comes only from a core arithmetic op becomes that op's ``relu``
flag (requantisation clamps at zero for free); any other Relu becomes an identity
``Affine`` with the flag, which the core runs as one requantisation pass."""

from __future__ import annotations

import numpy as np

from ..ir import Graph

FUSABLE = {"Conv", "Gemm", "Affine", "Add", "Sum", "AveragePool", "GlobalAveragePool", "MatMul"}


def fuse_relu(graph: Graph) -> Graph:
    g = graph.copy()
    prod, cons = g.producers(), g.consumers()
    for n in list(g.nodes):
        if n.op != "Relu":
            continue
        p = prod.get(n.inputs[0])
        x = g.tensor(n.inputs[0])
        if p is None or p.op not in FUSABLE or len(cons.get(n.inputs[0], [])) != 1 \
                or n.inputs[0] in g.outputs or p.meta.get("relu"):
            if x.shape is not None and len(x.shape) >= 2:
                c = x.shape[1]
                n.op, n.meta["relu"] = "Affine", True
                n.inputs = [n.inputs[0], g.add_const(n.name + "/a", np.ones(c, np.float32)),
                            g.add_const(n.name + "/b", np.zeros(c, np.float32))]
            continue
        p.meta["relu"] = True
        p.outputs = [n.outputs[0]]
        g.nodes.remove(n)
    g.remove_unused()
    return g
