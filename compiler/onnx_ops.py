"""Every other ONNX operator: shapes from ONNX shape inference, values from onnxruntime.

The registry in :mod:`.ops` describes the operators the compiler reasons about (the core's
operators, and the shape arithmetic constant folding meets in every exported model).  Any
other operator of the default ONNX domain is still a valid node: :func:`.ops.get` gives it an
:class:`~.ops.OpDef` whose

* output shapes and types come from ONNX's own shape inference on a one-node model (with
  the constant inputs as initializers, so data-dependent shapes such as Resize's scales are
  resolved), or, when inference leaves a dimension open, from running the node once on
  onnxruntime;
* values come from onnxruntime's CPU provider running that one-node model (sessions are
  cached per node and input signature).

Host subgraphs run as whole exported models (:mod:`.host`); this module is what constant
folding, shape inference and calibration use node by node.  onnxruntime runs with graph
optimisation off and one thread, so a node gives the same bits alone or inside a subgraph.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from snpu.errors import CompileError

from .ir import Node

DEFAULT_OPSET = 13
_SESSIONS: OrderedDict = OrderedDict()
_MAX_SESSIONS = 256


def is_onnx_op(op_type: str, opset: int = DEFAULT_OPSET) -> bool:
    """Is ``op_type`` an operator of the default ONNX domain at ``opset``?"""
    import onnx.defs

    try:
        onnx.defs.get_schema(op_type, opset, "")
        return True
    except onnx.defs.SchemaError:
        return False


def attribute_value(v):
    """An IR attribute back to what ``onnx.helper.make_node`` takes (the front end turned
    tensors into numpy arrays and bytes into str)."""
    from onnx import numpy_helper

    if isinstance(v, np.ndarray):
        return numpy_helper.from_array(v)
    return v


def make_node(node: Node, inputs=None, outputs=None, name=None):
    from onnx import helper

    return helper.make_node(node.op, list(node.inputs if inputs is None else inputs),
                            list(node.outputs if outputs is None else outputs),
                            name=name or node.name,
                            **{k: attribute_value(v) for k, v in node.attrs.items()})


def session(model_bytes: bytes):
    """A cached onnxruntime CPU session for a serialised model (deterministic settings)."""
    import onnxruntime as ort

    s = _SESSIONS.get(model_bytes)
    if s is not None:
        _SESSIONS.move_to_end(model_bytes)
        return s
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    s = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    _SESSIONS[model_bytes] = s
    if len(_SESSIONS) > _MAX_SESSIONS:
        _SESSIONS.popitem(last=False)
    return s


def _node_model(node: Node, specs: list, out_types: list | None = None):
    """A one-node ONNX model.  ``specs[k]``: None (absent input), ``("const", array)`` or
    ``("value", shape, dtype)``; non-constant inputs become graph inputs ``in{k}``."""
    from onnx import helper, numpy_helper

    opset = int(node.meta.get("opset", DEFAULT_OPSET))
    ins, inits, names = [], [], []
    for k, spec in enumerate(specs):
        if spec is None:
            names.append("")
            continue
        nm = f"in{k}"
        names.append(nm)
        if spec[0] == "const":
            inits.append(numpy_helper.from_array(np.asarray(spec[1]), nm))
        else:
            ins.append(helper.make_tensor_value_info(
                nm, helper.np_dtype_to_tensor_dtype(np.dtype(spec[2])), list(spec[1])))
    outs = [f"out{k}" if o else "" for k, o in enumerate(node.outputs)]
    if out_types is None:
        out_vi = [helper.make_empty_tensor_value_info(o) for o in outs if o]
    else:
        out_vi = [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(np.dtype(t)), None)
                  for o, t in zip([o for o in outs if o], out_types)]
    try:
        nd = make_node(node, names, outs)
    except Exception as e:
        raise CompileError(f"{node.where()}: attributes cannot be written back to ONNX "
                           f"({type(e).__name__}: {e})") from None
    graph = helper.make_graph([nd], node.op, ins, out_vi, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 8)
    return model


def infer(node: Node, shapes: list, consts: list, dtypes: list) -> tuple[list, list]:
    """Output shapes and dtypes of a node (ONNX shape inference; onnxruntime if open)."""
    import onnx
    from onnx import helper

    specs = [None if s is None and c is None else ("const", c) if c is not None
             else ("value", s, d) for s, c, d in zip(shapes, consts, dtypes)]
    model = _node_model(node, specs)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as e:
        raise CompileError(f"{node.where()}: ONNX shape inference rejects the node with input "
                           f"shapes {shapes} ({type(e).__name__}: {str(e).splitlines()[0]})") from None
    out_shapes, out_types, complete = [], [], True
    known = {vi.name: vi for vi in list(inferred.graph.output) + list(inferred.graph.value_info)}
    for k, o in enumerate(node.outputs):
        vi = known.get(f"out{k}") if o else None
        if vi is None or not vi.type.tensor_type.elem_type or not vi.type.tensor_type.HasField("shape"):
            complete = False
            break
        dims = vi.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            complete = False
            break
        out_shapes.append(tuple(int(d.dim_value) for d in dims))
        out_types.append(str(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)))
    if complete:
        return out_shapes, out_types
    # open dimensions: run the node once on placeholder values (zeros) for its real shapes
    args = [c if c is not None else (np.zeros(s, d) if s is not None else None)
            for s, c, d in zip(shapes, consts, dtypes)]
    outs = run(node, args)
    return [tuple(v.shape) for v in outs], [str(v.dtype) for v in outs]


def run(node: Node, inputs: list) -> list[np.ndarray]:
    """Evaluate one node on onnxruntime (None entries: absent optional inputs)."""
    specs = [None if a is None else ("value", np.asarray(a).shape, np.asarray(a).dtype) for a in inputs]
    feeds = {f"in{k}": np.asarray(a) for k, a in enumerate(inputs) if a is not None}
    model = _node_model(node, specs)
    try:
        sess = session(model.SerializeToString())
        outs = sess.run([o.name for o in sess.get_outputs()], feeds)
    except CompileError:
        raise
    except Exception as e:
        raise CompileError(f"{node.where()}: onnxruntime cannot run it "
                           f"({type(e).__name__}: {str(e).splitlines()[0][:300]})") from None
    it = iter(outs)
    return [next(it) if o else None for o in node.outputs]
