"""Pass: evaluate everything that does not depend on the model inputs.

Constant, ConstantOfShape, Shape (of a tensor whose shape is known), and any node whose
inputs are all constant (shape arithmetic, weight transforms) become constant tensors."""

from __future__ import annotations

import numpy as np

from snpu.errors import CompileError

from .. import ops
from ..ir import Graph
from .infer_shapes import infer_node


def fold_constants(graph: Graph) -> Graph:
    """Node by node in program order: its shapes first (a target shape computed from
    ``Shape`` is folded by the time its Reshape is reached), then folded if constant."""
    g = graph.copy()
    keep = []
    for n in g.nodes:
        infer_node(g, n)
        if n.op == "Shape" and g.tensor(n.inputs[0]).shape is not None:
            value = np.array(g.tensor(n.inputs[0]).shape, np.int64)
            _set(g, n.outputs[0], value)
            continue
        if all((not i) or g.tensor(i).is_const for i in n.inputs) and n.op not in ("Dropout",):
            inputs = [g.const(i) if i else None for i in n.inputs]
            try:
                outs = ops.get(n).run(n, inputs)
            except Exception as e:
                raise CompileError(f"{n.where()}: constant folding failed ({type(e).__name__}: {e})") from None
            for name, v in zip(n.outputs, outs):
                if name:
                    _set(g, name, np.asarray(v))
            continue
        keep.append(n)
    g.nodes = keep
    g.remove_unused()
    return g


def _set(g: Graph, name: str, value: np.ndarray) -> None:
    t = g.tensors[name]
    t.value, t.shape, t.dtype = value, tuple(value.shape), str(value.dtype)
