"""Pass: shapes of every tensor, from the model inputs and the operator registry."""

from __future__ import annotations

from snpu.errors import CompileError

from .. import ops
from ..ir import Graph


def infer_shapes(graph: Graph) -> Graph:
    g = graph.copy()
    for n in g.nodes:
        shapes = [g.tensor(i).shape if i else None for i in n.inputs]
        consts = [g.const(i) if i else None for i in n.inputs]
        if any(s is None for i, s in zip(n.inputs, shapes) if i):
            missing = [i for i, s in zip(n.inputs, shapes) if i and s is None]
            raise CompileError(f"{n.where()}: shape of input {missing[0]!r} is unknown")
        try:
            out = ops.get(n).shape(n, shapes, consts)
        except CompileError:
            raise
        except Exception as e:
            raise CompileError(f"{n.where()}: cannot infer output shapes from inputs "
                               f"{shapes} ({type(e).__name__}: {e})") from None
        for name, shape in zip(n.outputs, out):
            if name:
                g.tensors[name].shape = tuple(int(d) for d in shape)
    return g
