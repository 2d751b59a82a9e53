"""The host device: a host subgraph exported to ONNX and run by onnxruntime.

Seed 004 sends every subgraph the core cannot run to the host.  The host is onnxruntime's
CPU provider, so every operator onnxruntime implements runs there.  A host subgraph becomes
one ONNX model (:func:`segment_model`):

* its inputs are the tensors its nodes read that it does not produce (model inputs, or
  tensors a core subgraph wrote to memory);
* its outputs are the tensors it produces that a later subgraph or the caller reads;
* the compiler's own rewrites are lowered back to ONNX: an ``Affine`` becomes ``Mul`` then
  ``Add`` by per-channel constants, a fused ``relu`` flag becomes a ``Relu`` after the node
  (a ``Clip`` to [0, clip_max] when a clip was fused).

Values crossing the core/host boundary are int8 in memory (quantised with the tensor's
scale); values passed host to host, and model inputs read by the host, stay float.  The
int8 reference (:mod:`.int8_ref`) and the runtime (:mod:`.runtime`) both call
:func:`run_segment`, so their results agree bit for bit at every boundary.
"""

from __future__ import annotations

import weakref

import numpy as np

from snpu.errors import CompileError

from . import onnx_ops
from .ir import Graph, Node

#: id(graph) -> (weak reference to the graph, {node names: HostProgram})
_PROGRAMS: dict[int, tuple] = {}


def host_segments(g: Graph) -> list[list[str]]:
    """The host subgraphs of a partitioned graph (node names, in program order): the
    compiled segments when code generation has run, else the partition's subgraphs."""
    segs = g.meta.get("segments")
    if segs is not None:
        return [list(s["nodes"]) for s in segs if s["kind"] == "host"]
    return [list(s["nodes"]) for s in g.meta.get("subgraphs", []) if s["device"] == "host"]


def segment_interface(g: Graph, names: list[str]) -> tuple[list[str], list[str]]:
    """(inputs, outputs) of a host subgraph: non-constant tensors read from outside, and
    tensors produced inside that something outside (or the caller) reads."""
    inside = set(names)
    nodes = [n for n in g.nodes if n.name in inside]
    produced = {o for n in nodes for o in n.outputs if o}
    inputs: list[str] = []
    for n in nodes:
        for i in n.inputs:
            if i and i not in produced and not g.tensor(i).is_const and i not in inputs:
                inputs.append(i)
    read_outside = {i for n in g.nodes if n.name not in inside for i in n.inputs if i}
    outputs = [o for n in nodes for o in n.outputs
               if o and (o in read_outside or o in g.outputs)]
    return inputs, outputs


def _lower(g: Graph, n: Node, consts: dict) -> list:
    """ONNX nodes for one IR node (Affine and the fused relu flag lowered)."""
    from onnx import helper

    out = n.outputs[0]
    relu = bool(n.meta.get("relu"))
    pre = f"{out}/pre_relu" if relu else out
    if n.op == "Affine":
        rank = len(g.tensor(n.inputs[0]).shape)
        for k, which in ((1, "a"), (2, "b")):
            v = g.const(n.inputs[k]).astype(np.float32)
            consts[f"{n.name}/{which}"] = v.reshape((1, -1) + (1,) * (rank - 2))
        nodes = [helper.make_node("Mul", [n.inputs[0], f"{n.name}/a"], [f"{n.name}/ax"],
                                  name=f"{n.name}/mul"),
                 helper.make_node("Add", [f"{n.name}/ax", f"{n.name}/b"], [pre], name=f"{n.name}/add")]
    else:
        nodes = [onnx_ops.make_node(n, outputs=[pre] + list(n.outputs[1:]))]
    if relu and n.meta.get("clip_max") is not None:
        consts[f"{n.name}/lo"] = np.array(0, np.float32)
        consts[f"{n.name}/hi"] = np.array(n.meta["clip_max"], np.float32)
        nodes.append(helper.make_node("Clip", [pre, f"{n.name}/lo", f"{n.name}/hi"], [out],
                                      name=f"{n.name}/clip"))
    elif relu:
        nodes.append(helper.make_node("Relu", [pre], [out], name=f"{n.name}/relu"))
    return nodes


def segment_model(g: Graph, names: list[str]):
    """The ONNX model of a host subgraph (see the module docstring)."""
    from onnx import helper, numpy_helper

    inputs, outputs = segment_interface(g, names)
    inside = set(names)
    consts: dict[str, np.ndarray] = {}
    nodes = []
    for n in g.nodes:
        if n.name not in inside:
            continue
        for i in n.inputs:
            if i and g.tensor(i).is_const:
                consts[i] = np.asarray(g.const(i))
        nodes += _lower(g, n, consts)

    def info(name):
        t = g.tensor(name)
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)),
                                             list(t.shape) if t.shape is not None else None)

    graph = helper.make_graph(nodes, f"{g.name}_host", [info(i) for i in inputs],
                              [info(o) for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", int(g.meta.get("opset", 13)))])
    model.ir_version = min(model.ir_version, 8)
    return model


class HostProgram:
    """One host subgraph, ready to run (the onnxruntime session is built on first use)."""

    def __init__(self, g: Graph, names: list[str]):
        self.names = list(names)
        self.inputs, self.outputs = segment_interface(g, names)
        self.where = f"host subgraph {names[0]!r}..{names[-1]!r}" if len(names) > 1 \
            else f"host node {names[0]!r}"
        self._model = segment_model(g, names)
        self._session = None

    def prepare(self) -> "HostProgram":
        """Build the onnxruntime session now (not inside the first timed run)."""
        if self._session is None:
            try:
                self._session = onnx_ops.session(self._model.SerializeToString())
            except Exception as e:
                raise CompileError(f"{self.where}: onnxruntime cannot load it "
                                   f"({type(e).__name__}: {str(e).splitlines()[0][:300]})") from None
        return self

    def run(self, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``values``: every input by name -> every output by name."""
        from onnx import helper

        self.prepare()
        feeds = {}
        for i, meta in zip(self.inputs, self._model.graph.input):
            want = helper.tensor_dtype_to_np_dtype(meta.type.tensor_type.elem_type)
            feeds[i] = np.ascontiguousarray(np.asarray(values[i]).astype(want, copy=False))
        try:
            outs = self._session.run(self.outputs, feeds)
        except Exception as e:
            raise CompileError(f"{self.where}: onnxruntime failed "
                               f"({type(e).__name__}: {str(e).splitlines()[0][:300]})") from None
        return dict(zip(self.outputs, outs))


def program(g: Graph, names: list[str]) -> HostProgram:
    """The (cached) :class:`HostProgram` of a host subgraph of ``g``."""
    entry = _PROGRAMS.get(id(g))
    if entry is None or entry[0]() is not g:
        entry = (weakref.ref(g, lambda _r, k=id(g): _PROGRAMS.pop(k, None)), {})
        _PROGRAMS[id(g)] = entry
    cache = entry[1]
    key = tuple(names)
    if key not in cache:
        cache[key] = HostProgram(g, names)
    return cache[key]


def quantize_boundary(g: Graph, name: str, value: np.ndarray) -> np.ndarray:
    """A host value as the core (and the int8 comparison) sees it: quantised with the
    tensor's scale when it is a float tensor that has one, else unchanged."""
    from .passes.quantize import quantize_tensor

    v = np.asarray(value)
    if g.tensor(name).scale is None or not np.issubdtype(v.dtype, np.floating):
        return v
    return quantize_tensor(v, g.tensor(name).scale)


def dequantize_boundary(g: Graph, name: str, q: np.ndarray) -> np.ndarray:
    """An int8 tensor the core wrote, as a host subgraph reads it (float32)."""
    return q.astype(np.float32) * np.float32(g.tensor(name).scale)


def run_segment(g: Graph, names: list[str], fetch, store) -> None:
    """Run one host subgraph: ``fetch(tensor)`` gives each input as a float (or its own
    dtype) array; ``store(tensor, value)`` receives each output."""
    p = program(g, names)
    outs = p.run({i: fetch(i) for i in p.inputs})
    for o in p.outputs:
        store(o, outs[o])
