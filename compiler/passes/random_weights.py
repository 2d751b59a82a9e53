"""Pass (option): substitute seeded random weights, to study sparsity and numerics on
architectures whose shipped weights are placeholders.

The "light" model-zoo networks inside the onnx wheel build every weight tensor with
``ConstantOfShape`` (one value, e.g. 0.02, everywhere): they test structure and op coverage
but every class gets the same score.  With this option every Conv / Gemm weight becomes
Kaiming-normal (``std = sqrt(2 / fan_in)``), biases become 0, and BatchNormalization
becomes the identity (scale 1, bias 0, mean 0, variance 1), all drawn from ``seed``.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph


def random_weights(graph: Graph, seed: int = 0) -> Graph:
    g = graph.copy()
    rng = np.random.default_rng(seed)
    for n in g.nodes:
        if n.op in ("Conv", "Gemm", "MatMul") and g.const(n.inputs[1]) is not None:
            w = g.const(n.inputs[1])
            if n.op == "Conv":
                fan_in = int(np.prod(w.shape[1:]))
            elif n.op == "Gemm" and n.attrs.get("transB", 0):
                fan_in = w.shape[1]
            else:
                fan_in = w.shape[0]
            new = (rng.standard_normal(w.shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
            n.inputs[1] = g.add_const(n.inputs[1] + "/kaiming", new)
            if len(n.inputs) > 2 and n.inputs[2] and g.const(n.inputs[2]) is not None:
                n.inputs[2] = g.add_const(n.inputs[2] + "/zero", np.zeros_like(g.const(n.inputs[2])))
        elif n.op == "BatchNormalization":
            c = g.const(n.inputs[1]).shape
            for k, v in zip(range(1, 5), (1.0, 0.0, 0.0, 1.0)):
                n.inputs[k] = g.add_const(f"{n.name}/bn{k}", np.full(c, v, np.float32))
    g.remove_unused()
    return g
