"""ONNX front end: a model file -> the IR graph (:mod:`.ir`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from snpu.errors import CompileError

from . import onnx_ops, ops
from .ir import Graph, Node, Tensor


def load_onnx(model, *, name: str | None = None, batch: int = 1) -> Graph:
    """Read an ONNX model (a path, serialised bytes or a ``ModelProto``) into a :class:`~.ir.Graph`.

    Initializers become constant tensors; symbolic input dimensions become ``batch``.  Every
    problem is a :class:`CompileError` naming the file, node and operator.
    """
    import onnx
    from onnx import helper, numpy_helper

    if isinstance(model, (bytes, bytearray)):
        try:
            model = onnx.load_from_string(bytes(model))
        except Exception as e:  # protobuf gives no stable exception type
            raise CompileError(f"{name or 'model'}: not an ONNX model ({type(e).__name__}: {e})") from None
    if isinstance(model, (str, Path)):
        path = Path(model)
        name = name or path.stem
        if not path.exists():
            raise CompileError(f"{path}: no such model file")
        try:
            model = onnx.load(str(path))
        except Exception as e:  # protobuf gives no stable exception type
            raise CompileError(f"{path}: not an ONNX model ({type(e).__name__}: {e})") from None
    name = name or model.graph.name or "model"
    g = model.graph
    for imp in model.opset_import:
        if imp.domain not in ("", "ai.onnx"):
            raise CompileError(f"{name}: operator set domain {imp.domain!r} is not supported")
    if not g.node:
        raise CompileError(f"{name}: the graph has no nodes; nothing to compile")
    tensors: dict[str, Tensor] = {}
    for init in g.initializer:
        try:
            arr = numpy_helper.to_array(init)
        except Exception as e:  # onnx raises bare exceptions for broken tensors
            raise CompileError(f"{name}: initializer {init.name!r} cannot be read "
                               f"({type(e).__name__}: {e})") from None
        if arr.dtype.kind == "f" and arr.dtype != np.float32:
            raise CompileError(f"{name}: initializer {init.name!r} is {arr.dtype}; snpu compiles "
                               "float32 models (convert the model to float32 first)")
        tensors[init.name] = Tensor(init.name, tuple(arr.shape), str(arr.dtype), arr)
    inputs = []
    for vi in g.input:
        if vi.name in tensors:
            continue
        tt = vi.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else batch
                     for d in tt.shape.dim)
        dtype = str(helper.tensor_dtype_to_np_dtype(tt.elem_type)) if tt.elem_type else "float32"
        if dtype != "float32":
            raise CompileError(f"{name}: input {vi.name!r} is {dtype}; snpu compiles models with "
                               "float32 inputs")
        tensors[vi.name] = Tensor(vi.name, dims, dtype)
        inputs.append(vi.name)
    opset = max((imp.version for imp in model.opset_import if imp.domain in ("", "ai.onnx")),
                default=13)
    nodes = []
    for k, n in enumerate(g.node):
        if n.domain not in ("", "ai.onnx"):
            raise CompileError(f"{name}: node {n.name or k!r} ({n.op_type}): domain {n.domain!r} "
                               "is not supported")
        attrs = {}
        for a in n.attribute:
            v = helper.get_attribute_value(a)
            if hasattr(v, "dims") and hasattr(v, "data_type"):  # TensorProto
                v = numpy_helper.to_array(v)
            elif isinstance(v, bytes):
                v = v.decode()
            attrs[a.name] = v
        node = Node(n.name or f"{n.op_type}_{k}", n.op_type, list(n.input), list(n.output), attrs)
        for key, v in attrs.items():
            outer = _captured(v) if isinstance(v, onnx.GraphProto) else []
            if outer:
                raise CompileError(f"{name}: {node.where()}: its {key} reads {outer[0]!r} from the "
                                   "enclosing graph; control-flow operators that capture outer "
                                   "values are not supported (export the model without them, "
                                   "e.g. with constant folding of the condition)")
        node.meta["opset"] = opset
        if n.op_type not in ops.REGISTRY and not onnx_ops.is_onnx_op(n.op_type, opset):
            raise CompileError(f"{name}: {node.where()}: {n.op_type} is not an operator of the "
                               f"default ONNX domain at opset {opset}")
        for o in node.outputs:
            if o:
                tensors.setdefault(o, Tensor(o))
        for i in node.inputs:
            if i and i not in tensors:
                raise CompileError(f"{name}: {node.where()}: input {i!r} is not produced by "
                                   "any node, input or initializer")
        nodes.append(node)
    outputs = [o.name for o in g.output]
    graph = Graph(name, nodes, tensors, inputs, outputs)
    graph.meta["opset"] = opset
    graph.check()
    graph.toposort()
    return graph


def _captured(sub) -> list[str]:
    """Names a subgraph reads that it neither defines nor receives (outer-scope values)."""
    known = {i.name for i in sub.input} | {i.name for i in sub.initializer}
    outer = []
    for n in sub.node:
        for i in n.input:
            if i and i not in known and i not in outer:
                outer.append(i)
        known.update(o for o in n.output if o)
    return outer


def input_arrays(graph: Graph, arrays: dict | np.ndarray | None) -> dict[str, np.ndarray]:
    """Normalise user inputs to ``{name: array}`` and check their shapes."""
    if isinstance(arrays, np.ndarray):
        if len(graph.inputs) != 1:
            raise CompileError(f"the model has {len(graph.inputs)} inputs; name them")
        arrays = {graph.inputs[0]: arrays}
    out = {}
    unknown = sorted(set(arrays) - set(graph.inputs))
    if unknown:
        raise CompileError(f"input {unknown[0]!r} is not an input of the model (its inputs: "
                           f"{', '.join(graph.inputs)})")
    for name in graph.inputs:
        if name not in arrays:
            raise CompileError(f"no value for model input {name!r}")
        a = np.asarray(arrays[name])
        want = graph.tensor(name).shape
        check_input_array(name, a, want)
        a = a.astype(np.float32, copy=False)
        if a.shape != want:
            if a.size == int(np.prod(want)):
                a = a.reshape(want)
            else:
                raise CompileError(f"input {name!r} has shape {a.shape}, the model wants {want}")
        out[name] = a
    return out


def check_input_array(name: str, a: np.ndarray, want, where: str = "") -> None:
    """An input value must be float32 (the model's type: no silent conversion of float16 or
    float64 data) and finite."""
    prefix = f"{where}: " if where else ""
    if a.dtype != np.float32:
        raise CompileError(f"{prefix}input {name!r} is {a.dtype}; the model wants float32 of "
                           f"shape {tuple(want)} (convert with .astype(np.float32))")
    bad = ~np.isfinite(a)
    if bad.any():
        k = int(np.flatnonzero(bad.reshape(-1))[0])
        raise CompileError(f"{prefix}input {name!r} holds {int(bad.sum())} NaN/Inf value(s) "
                           f"(first at flat index {k})")
