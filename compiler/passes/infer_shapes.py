"""Pass: shapes of every tensor, from the model inputs and the operator registry (ONNX
shape inference for the operators it does not describe, which also gives their output
dtypes)."""

from __future__ import annotations

from snpu.errors import CompileError

from .. import onnx_ops, ops
from ..ir import Graph, Node


def infer_node(g: Graph, n: Node) -> None:
    """Set the shapes (and, for generic ONNX operators, dtypes) of ``n``'s outputs."""
    shapes = [g.tensor(i).shape if i else None for i in n.inputs]
    consts = [g.const(i) if i else None for i in n.inputs]
    if any(s is None for i, s in zip(n.inputs, shapes) if i):
        missing = [i for i, s in zip(n.inputs, shapes) if i and s is None]
        raise CompileError(f"{n.where()}: shape of input {missing[0]!r} is unknown")
    d = ops.get(n)
    dtypes = None
    try:
        if d.shape is None:
            out, dtypes = onnx_ops.infer(n, shapes, consts,
                                         [g.tensor(i).dtype if i else None for i in n.inputs])
        else:
            out = d.shape(n, shapes, consts)
    except CompileError:
        raise
    except Exception as e:
        raise CompileError(f"{n.where()}: cannot infer output shapes from inputs "
                           f"{shapes} ({type(e).__name__}: {e})") from None
    for k, (name, shape) in enumerate(zip(n.outputs, out)):
        if name:
            g.tensors[name].shape = tuple(int(v) for v in shape)
            if dtypes is not None:
                g.tensors[name].dtype = dtypes[k]


def infer_shapes(graph: Graph) -> Graph:
    g = graph.copy()
    for n in g.nodes:
        infer_node(g, n)
    return g
