"""The IR back to ONNX, for onnxruntime reference runs.

Only graphs whose nodes are still plain ONNX operators can be exported: the front end's
output and the graph after :func:`~.passes.fold_constants.fold_constants`,
:func:`~.passes.remove_noops.remove_noops` and :func:`~.passes.random_weights.random_weights`
(the passes before operator fusion).  ``snpu run`` uses this to compare a model compiled with
substituted random weights against onnxruntime on the same weights.
"""

from __future__ import annotations

import numpy as np

from snpu.errors import CompileError

from . import onnx_ops
from .ir import Graph

#: the compiler's own IR operators (every other node is an ONNX operator)
OWN_OPS = frozenset({"Affine"})


def to_onnx(g: Graph):
    """:class:`~.ir.Graph` -> ``onnx.ModelProto`` (checked by ``onnx.checker``)."""
    import onnx
    from onnx import helper, numpy_helper

    used = {i for n in g.nodes for i in n.inputs if i}
    inits = [numpy_helper.from_array(np.asarray(t.value), t.name)
             for t in g.tensors.values() if t.is_const and t.name in used]
    nodes = []
    for n in g.nodes:
        if n.op in OWN_OPS or n.meta.get("relu"):
            raise CompileError(f"{g.name}: {n.where()}: not a plain ONNX operator after the "
                               "compiler's fusion passes; export before fold_affine")
        nodes.append(onnx_ops.make_node(n))

    def info(name):
        t = g.tensor(name)
        dtype = helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype))
        return helper.make_tensor_value_info(name, dtype, list(t.shape) if t.shape else None)

    graph = helper.make_graph(nodes, g.name, [info(i) for i in g.inputs],
                              [info(o) for o in g.outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", g.meta.get("opset", 13))])
    model.ir_version = min(model.ir_version, 8)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise CompileError(f"{g.name}: the exported reference model is invalid: {e}") from None
    return model


def onnxruntime_run(model, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run a ModelProto (or path) on onnxruntime's CPU provider, graph optimisation off:
    the reference must be the operators' semantics, and onnxruntime 1.31's Pad fusion
    folds a zero Pad into a following MaxPool's (-inf) padding, which changes the result."""
    from pathlib import Path

    if isinstance(model, (str, Path)):
        data = Path(model).read_bytes()
    else:
        data = model if isinstance(model, bytes) else model.SerializeToString()
    sess = onnx_ops.session(data)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, {k: v.astype(np.float32) for k, v in inputs.items()})))

