"""ONNX front end: the IR it builds, and one clear error for every bad input."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from snpu.compiler.frontend import input_arrays, load_onnx
from snpu.errors import CompileError

from .models import tiny_cnn


def _one_node_model(op: str, domain: str = "", **attrs) -> onnx.ModelProto:
    node = helper.make_node(op, ["x"], ["y"], name="the_node", domain=domain, **attrs)
    g = helper.make_graph([node], "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_hypergraph_of_tiny_cnn():
    g = load_onnx(tiny_cnn())
    assert g.inputs == ["x"] and g.outputs == ["prob"]
    assert g.tensor("x").shape == (1, 3, 12, 12)
    # hyperedges: one producer, a set of sinks; "p1" feeds the grouped conv and the residual add
    sinks = {n.name for n in g.consumers()["p1"]}
    assert sinks == {"conv2_grouped", "residual"}
    assert g.producers()["p1"].name == "pool1"
    assert g.tensor("w1").is_const and g.const("w1").shape == (8, 3, 3, 3)


def test_missing_file(tmp_path):
    with pytest.raises(CompileError, match="no such model file"):
        load_onnx(tmp_path / "nope.onnx")


def test_not_an_onnx_file(tmp_path):
    p = tmp_path / "junk.onnx"
    p.write_bytes(b"\x00\x01this is not protobuf\xff" * 10)
    with pytest.raises(CompileError, match=r"junk.onnx: not an ONNX model"):
        load_onnx(p)


def test_any_onnx_operator_loads_and_a_made_up_one_is_named():
    """Every default-domain ONNX operator is a node (the host runs it on onnxruntime); an
    operator ONNX does not define names the node and the opset."""
    g = load_onnx(_one_node_model("Einsum", equation="ij->ij"))
    assert [n.op for n in g.nodes] == ["Einsum"]
    with pytest.raises(CompileError, match=r"the_node.*Frobnicate is not an operator of the "
                                           r"default ONNX domain at opset 13"):
        load_onnx(_one_node_model("Frobnicate"))


def test_foreign_domain_is_rejected():
    with pytest.raises(CompileError, match=r"the_node.*com.example"):
        load_onnx(_one_node_model("Relu", domain="com.example"))


def test_dangling_input_is_named():
    node = helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")
    g = helper.make_graph([node], "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(CompileError, match=r"adder.*'ghost' is not produced"):
        load_onnx(m)


def test_input_shape_errors():
    g = load_onnx(tiny_cnn())
    with pytest.raises(CompileError, match=r"input 'x' has shape \(5,\)"):
        input_arrays(g, np.zeros(5, np.float32))
    with pytest.raises(CompileError, match="input 'z' is not an input of the model"):
        input_arrays(g, {"z": np.zeros((1, 3, 12, 12), np.float32)})
    with pytest.raises(CompileError, match="no value for model input 'x'"):
        input_arrays(g, {})
    # the same number of elements is reshaped (e.g. an image without its batch axis)
    assert input_arrays(g, np.zeros((3, 12, 12), np.float32))["x"].shape == (1, 3, 12, 12)


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int8])
def test_inputs_must_be_float32(dtype):
    g = load_onnx(tiny_cnn())
    with pytest.raises(CompileError, match=f"input 'x' is {np.dtype(dtype)}; the model wants float32"):
        input_arrays(g, np.zeros((1, 3, 12, 12), dtype))


def test_inputs_must_be_finite():
    g = load_onnx(tiny_cnn())
    x = np.zeros((1, 3, 12, 12), np.float32)
    x[0, 1, 2, 3] = np.inf
    with pytest.raises(CompileError, match=r"1 NaN/Inf value\(s\) \(first at flat index 171\)"):
        input_arrays(g, x)


def test_non_float32_models_and_empty_graphs_are_refused():
    half = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "half",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 4])]))
    with pytest.raises(CompileError, match="input 'x' is float16; snpu compiles models with float32"):
        load_onnx(half)
    w64 = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "w64",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(np.ones((1, 4)), "w")]))
    with pytest.raises(CompileError, match="initializer 'w' is float64"):
        load_onnx(w64)
    empty = helper.make_model(helper.make_graph(
        [], "nothing", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])]))
    with pytest.raises(CompileError, match="nothing: the graph has no nodes"):
        load_onnx(empty)


def test_control_flow_capturing_outer_values_is_named():
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 4])])
    node = helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_g, else_branch=then_g)
    g = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                           helper.make_node("Greater", ["s", "z"], ["c"]), node], "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor("z", TensorProto.FLOAT, [], [0.0])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(CompileError, match=r"'branch' \(If\): its \w+_branch reads 'x' from the "
                                           r"enclosing graph"):
        load_onnx(m)
