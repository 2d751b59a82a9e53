"""Float reference: run an IR graph in numpy (the registry's float semantics).

Used to check the front end and folding passes against onnxruntime, to collect calibration
statistics, and to execute host operators.
"""

from __future__ import annotations

import numpy as np

from snpu.errors import CompileError

from . import ops
from .frontend import input_arrays
from .ir import Graph
from .passes.fuse_relu import activation


def run(graph: Graph, inputs, *, keep: bool = False) -> dict[str, np.ndarray]:
    """Evaluate ``graph``; returns the outputs (every tensor with ``keep``)."""
    values = {k: t.value for k, t in graph.tensors.items() if t.is_const}
    values.update(input_arrays(graph, inputs))
    for n in graph.nodes:
        args = [values[i] if i else None for i in n.inputs]
        try:
            outs = ops.get(n).run(n, args)
        except CompileError:
            raise
        except Exception as e:
            raise CompileError(f"{n.where()}: float evaluation failed ({type(e).__name__}: {e})") from None
        if n.meta.get("relu"):
            outs = [activation(n, outs[0])] + list(outs[1:])
        for name, v in zip(n.outputs, outs):
            if name:
                values[name] = v
    if keep:
        return values
    return {o: values[o] for o in graph.outputs}
