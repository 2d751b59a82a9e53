"""Ordinary small models a user might bring, one per class of issue 14 (built with
onnx.helper, seeded): host activations and shape operators on onnxruntime, batches on the
core, depthwise / grouped convolution, ReLU6, global pooling over a large map, integer
outputs.  Each builder returns an ``onnx.ModelProto``."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _w(rng, name, *shape, scale=0.3):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _c(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _model(name, nodes, x_shape, y_shape, inits, opset=13, y_type=TensorProto.FLOAT):
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", y_type, y_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _conv(name, x, w, y, **kw):
    return helper.make_node("Conv", [x, w], [y], name=name, **kw)


def sigmoid_tanh(rng):
    """Core conv, host Sigmoid / Tanh / HardSigmoid / LeakyRelu chain, core conv again."""
    return _model("sigmoid_tanh", [
        _conv("c1", "x", "w1", "a", pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["a"], ["b"]), helper.make_node("Tanh", ["b"], ["c"]),
        helper.make_node("HardSigmoid", ["c"], ["d"]),
        helper.make_node("LeakyRelu", ["d"], ["e"], alpha=0.2),
        _conv("c2", "e", "w2", "f"), helper.make_node("Flatten", ["f"], ["y"])],
        [1, 3, 8, 8], [1, 144], [_w(rng, "w1", 8, 3, 3, 3), _w(rng, "w2", 4, 8, 3, 3)])


def resize_upsample(rng):
    """Nearest-neighbour Resize between two core convolutions (a decoder's upsampling)."""
    return _model("resize_upsample", [
        _conv("c1", "x", "w1", "a", pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Resize", ["r", "", "scales"], ["u"], mode="nearest"),
        _conv("c2", "u", "w2", "y", pads=[1, 1, 1, 1])],
        [1, 3, 6, 6], [1, 4, 12, 12],
        [_w(rng, "w1", 8, 3, 3, 3), _w(rng, "w2", 4, 8, 3, 3), _c("scales", [1, 1, 2, 2])])


def layernorm_softmax(rng):
    """Gemm on the core, LayerNormalization and Softmax on the host (opset 17)."""
    return _model("layernorm_softmax", [
        helper.make_node("Gemm", ["x", "w", "b"], ["a"], transB=1),
        helper.make_node("LayerNormalization", ["a", "s", "o"], ["l"]),
        helper.make_node("Gemm", ["l", "w2"], ["z"], transB=1),
        helper.make_node("Softmax", ["z"], ["y"])],
        [1, 32], [1, 10], [_w(rng, "w", 24, 32), _w(rng, "b", 24), _w(rng, "s", 24),
                           _w(rng, "o", 24), _w(rng, "w2", 10, 24)], opset=17)


def transpose_gather_slice(rng):
    """Shape operators on activations: Transpose, Slice, Gather, Split, Pad, Concat, Einsum."""
    return _model("transpose_gather_slice", [
        _conv("c1", "x", "w1", "a", pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 1, 3, 2]),
        helper.make_node("Slice", ["t", "starts", "ends", "axes"], ["s"]),
        helper.make_node("Gather", ["s", "idx"], ["gth"], axis=1),
        helper.make_node("Split", ["gth", "split"], ["p", "q"], axis=1),
        helper.make_node("Concat", ["q", "p"], ["cat"], axis=1),
        helper.make_node("Pad", ["cat", "pads"], ["pd"]),
        helper.make_node("Einsum", ["pd"], ["e"], equation="nchw->nchw"),
        _conv("c2", "e", "w2", "f"), helper.make_node("Flatten", ["f"], ["y"])],
        [1, 3, 8, 8], [1, 4 * 6 * 8],
        [_w(rng, "w1", 8, 3, 3, 3), _w(rng, "w2", 4, 6, 3, 3),
         _c("starts", [1], np.int64), _c("ends", [7], np.int64), _c("axes", [2], np.int64),
         _c("idx", [0, 2, 4, 6, 1, 3], np.int64), _c("split", [2, 4], np.int64),
         _c("pads", [0, 0, 1, 1, 0, 0, 1, 1], np.int64)])


def batch_mlp(rng):
    """A batch of 4 through Gemm / ReLU / Gemm: on the core, image by image."""
    return _model("batch_mlp", [
        helper.make_node("Gemm", ["x", "w", "b"], ["a"], transB=1),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Gemm", ["r", "w2"], ["y"], transB=1)],
        [4, 20], [4, 10], [_w(rng, "w", 32, 20), _w(rng, "b", 32), _w(rng, "w2", 10, 32)])


def batch_cnn(rng):
    """A batch of 3 through Conv / ReLU / MaxPool / Conv / Flatten / Gemm."""
    return _model("batch_cnn", [
        _conv("c1", "x", "w1", "a", pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
        _conv("c2", "m", "w2", "c", pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["d"]),
        helper.make_node("Flatten", ["d"], ["f"]),
        helper.make_node("Gemm", ["f", "w3"], ["y"], transB=1)],
        [3, 3, 8, 8], [3, 10], [_w(rng, "w1", 8, 3, 3, 3), _w(rng, "w2", 8, 8, 3, 3),
                                _w(rng, "w3", 10, 128)])


def depthwise_relu6(rng):
    """MobileNet's block: 1x1 conv, ReLU6 (Clip 0..6), depthwise 3x3, ReLU6, 1x1 conv."""
    return _model("depthwise_relu6", [
        _conv("pw1", "x", "w1", "a"), helper.make_node("Clip", ["a", "lo", "hi"], ["r"]),
        _conv("dw", "r", "w2", "d", pads=[1, 1, 1, 1], group=16),
        helper.make_node("Clip", ["d", "lo", "hi"], ["r2"]),
        _conv("pw2", "r2", "w3", "y")],
        [1, 4, 8, 8], [1, 8, 8, 8],
        [_w(rng, "w1", 16, 4, 1, 1, scale=1.0), _w(rng, "w2", 16, 1, 3, 3), _w(rng, "w3", 8, 16, 1, 1),
         _c("lo", 0.0), _c("hi", 6.0)])


def grouped_conv(rng):
    """A grouped convolution (4 groups) after a dense one."""
    return _model("grouped_conv", [
        _conv("c1", "x", "w1", "a", pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["r"]),
        _conv("g", "r", "w2", "y", group=4)],
        [1, 4, 8, 8], [1, 8, 6, 6], [_w(rng, "w1", 8, 4, 3, 3), _w(rng, "w2", 8, 2, 3, 3)])


def global_pool_large(rng):
    """Global average pooling over a 48x48 map: more than half the accumulators hold, so
    the kernel sums it tile by tile into a running total."""
    return _model("global_pool_large", [
        _conv("c1", "x", "w1", "a", pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w2"], ["y"], transB=1)],
        [1, 3, 48, 48], [1, 5], [_w(rng, "w1", 8, 3, 3, 3), _w(rng, "w2", 5, 8)])


def avgpool_whole_map(rng):
    """ResNet's head: an AveragePool whose window is the whole 12x12 map (more than the
    accumulators hold), run as global pooling tile by tile."""
    return _model("avgpool_whole_map", [
        _conv("c1", "x", "w1", "a", pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("AveragePool", ["r"], ["p"], kernel_shape=[12, 12]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w2"], ["y"], transB=1)],
        [1, 3, 12, 12], [1, 5], [_w(rng, "w1", 16, 3, 3, 3), _w(rng, "w2", 5, 16)])


def argmax_output(rng):
    """An integer model output: ArgMax of the logits (int64, on the host)."""
    return _model("argmax_output", [
        helper.make_node("Gemm", ["x", "w"], ["z"], transB=1),
        helper.make_node("ArgMax", ["z"], ["y"], axis=1, keepdims=0)],
        [1, 16], [1], [_w(rng, "w", 10, 16)], y_type=TensorProto.INT64)


def dynamic_batch(rng):
    """A classifier exported with a symbolic batch dimension ``N`` (``--batch`` sets it)."""
    g = helper.make_graph([
        _conv("c1", "x", "w1", "a", pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w2"], ["z"], transB=1), helper.make_node("Softmax", ["z"], ["y"])],
        "dynamic_batch", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])],
        [_w(rng, "w1", 8, 3, 3, 3), _w(rng, "w2", 5, 8)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def lstm_head(rng):
    """An LSTM over a 5-step sequence (host), its last hidden state into a Gemm (core)."""
    return _model("lstm_head", [
        helper.make_node("LSTM", ["x", "W", "R"], ["seq", "h"], hidden_size=16),
        helper.make_node("Squeeze", ["h", "axes"], ["hs"]),
        helper.make_node("Gemm", ["hs", "w2"], ["z"], transB=1), helper.make_node("Relu", ["z"], ["y"])],
        [5, 1, 8], [1, 10], [_w(rng, "W", 1, 64, 8), _w(rng, "R", 1, 64, 16), _w(rng, "w2", 10, 16),
                             _c("axes", [0], np.int64)], opset=14)


def attention(rng):
    """Self-attention: projections on the core (a batch of 6 tokens), scores / Softmax /
    weighted sum on the host (MatMul of two activations), a Reshape whose target is computed
    by Shape (folded), the output projection on the core."""
    return _model("attention", [
        helper.make_node("Gemm", ["x", "wq"], ["q"], transB=1),
        helper.make_node("Gemm", ["x", "wk"], ["k"], transB=1),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[1, 0]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Softmax", ["s"], ["p"]),
        helper.make_node("MatMul", ["p", "x"], ["o"]), helper.make_node("Shape", ["o"], ["sh"]),
        helper.make_node("Reshape", ["o", "sh"], ["o2"]),
        helper.make_node("Gemm", ["o2", "wo"], ["y"], transB=1)],
        [6, 16], [6, 4], [_w(rng, "wq", 16, 16), _w(rng, "wk", 16, 16), _w(rng, "wo", 4, 16)])


def where_gate(rng):
    """Boolean tensors on the host: Where(conv > 0, conv, -conv) between two convolutions."""
    return _model("where_gate", [
        _conv("c1", "x", "w1", "c", pads=[1, 1, 1, 1]),
        helper.make_node("Greater", ["c", "zero"], ["m"]), helper.make_node("Neg", ["c"], ["n"]),
        helper.make_node("Where", ["m", "c", "n"], ["a"]), _conv("c2", "a", "w2", "y")],
        [1, 3, 8, 8], [1, 4, 6, 6], [_w(rng, "w1", 8, 3, 3, 3), _w(rng, "w2", 4, 8, 3, 3),
                                     _c("zero", 0.0)])


MODELS = {f.__name__: f for f in (lstm_head, attention, where_gate, sigmoid_tanh, resize_upsample, layernorm_softmax,
                                   transpose_gather_slice, batch_mlp, batch_cnn, depthwise_relu6,
                                   grouped_conv, global_pool_large, avgpool_whole_map,
                                   argmax_output)}


#: models that need an option to compile (not in the fixed-shape suite)
OTHERS = {"dynamic_batch": dynamic_batch}


def build(name: str, seed: int = 0) -> onnx.ModelProto:
    return {**MODELS, **OTHERS}[name](np.random.default_rng(seed))
