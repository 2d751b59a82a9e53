"""Small ONNX models built in code for the compiler tests (seeded, no files, no downloads)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from snpu.config import SMALL_CORE

#: the core the RTL tests build (tests/rtl/test_core.py); small buffers force tiling
TEST_CORE = SMALL_CORE


def _const(name: str, a: np.ndarray):
    return numpy_helper.from_array(np.asarray(a, np.float32), name)


def _model(nodes, inputs, outputs, inits, name, opset=13) -> onnx.ModelProto:
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def tiny_cnn(seed: int = 0) -> onnx.ModelProto:
    """Every core operator once: Conv (+BatchNorm, +ReLU), MaxPool, grouped Conv, 1x1 Conv,
    residual Add, Concat, AveragePool, GlobalAveragePool, Flatten, Gemm, Dropout; Softmax
    runs on the host.  Input ``x`` [1, 3, 12, 12], output ``prob`` [1, 10]."""
    rng = np.random.default_rng(seed)
    n = rng.standard_normal
    inits = [_const("w1", n((8, 3, 3, 3)) * 0.3), _const("b1", n(8) * 0.1),
             _const("bn_s", 1 + 0.1 * n(8)), _const("bn_b", 0.1 * n(8)),
             _const("bn_m", 0.1 * n(8)), _const("bn_v", 1 + 0.1 * np.abs(n(8))),
             _const("w2", n((8, 2, 3, 3)) * 0.3), _const("w3", n((8, 8, 1, 1)) * 0.3),
             _const("w4", n((4, 8, 1, 1)) * 0.3),
             _const("wf", n((10, 12)) * 0.3), _const("bf", n(10) * 0.1)]
    H = helper.make_node
    nodes = [H("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             H("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["n1"], name="bn1"),
             H("Relu", ["n1"], ["r1"], name="relu1"),
             H("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
               name="pool1"),
             H("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=4, name="conv2_grouped"),
             H("Relu", ["c2"], ["r2"], name="relu2"),
             H("Conv", ["r2", "w3"], ["c3"], name="conv3"),
             H("Add", ["c3", "p1"], ["a"], name="residual"),
             H("Relu", ["a"], ["ra"], name="relu3"),
             H("Conv", ["ra", "w4"], ["c4"], name="conv4"),
             H("Concat", ["ra", "c4"], ["cat"], axis=1, name="concat"),
             H("AveragePool", ["cat"], ["ap"], kernel_shape=[3, 3], strides=[1, 1],
               pads=[1, 1, 1, 1], name="avgpool"),
             H("GlobalAveragePool", ["ap"], ["g"], name="gap"),
             H("Flatten", ["g"], ["f"], name="flatten"),
             H("Dropout", ["f"], ["d"], name="dropout"),
             H("Gemm", ["d", "wf", "bf"], ["y"], transB=1, name="fc"),
             H("Softmax", ["y"], ["prob"], name="softmax")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                  [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 10])],
                  inits, "tiny_cnn")


def fire_cnn(seed: int = 0, size: int = 16) -> onnx.ModelProto:
    """A stem convolution and two squeezenet fire modules (squeeze 1x1 -> expand 1x1 and
    expand 3x3 -> concatenation), then global pooling: padded convolutions reading
    concatenations, many maps alive one after another.  Input ``x`` [1, 3, size, size],
    output ``y`` [1, 16, 1, 1]."""
    rng = np.random.default_rng(seed)
    n = rng.standard_normal
    H = helper.make_node
    inits, nodes, cur, cin = [], [], "x", 3
    inits.append(_const("w0", n((8, 3, 3, 3)) * 0.3))
    nodes += [H("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1], name="stem"),
              H("Relu", ["c0"], ["r0"], name="stem_relu")]
    cur, cin = "r0", 8
    for k in range(2):
        inits += [_const(f"s{k}", n((4, cin, 1, 1)) * 0.4), _const(f"e1_{k}", n((8, 4, 1, 1)) * 0.4),
                  _const(f"e3_{k}", n((8, 4, 3, 3)) * 0.3)]
        nodes += [H("Conv", [cur, f"s{k}"], [f"sq{k}"], name=f"squeeze{k}"),
                  H("Relu", [f"sq{k}"], [f"sr{k}"], name=f"squeeze_relu{k}"),
                  H("Conv", [f"sr{k}", f"e1_{k}"], [f"a{k}"], name=f"expand1_{k}"),
                  H("Relu", [f"a{k}"], [f"ar{k}"], name=f"expand1_relu{k}"),
                  H("Conv", [f"sr{k}", f"e3_{k}"], [f"b{k}"], pads=[1, 1, 1, 1], name=f"expand3_{k}"),
                  H("Relu", [f"b{k}"], [f"br{k}"], name=f"expand3_relu{k}"),
                  H("Concat", [f"ar{k}", f"br{k}"], [f"cat{k}"], axis=1, name=f"concat{k}")]
        cur, cin = f"cat{k}", 16
    inits.append(_const("w9", n((16, 16, 3, 3)) * 0.2))
    nodes += [H("Conv", [cur, "w9"], ["c9"], pads=[1, 1, 1, 1], name="head"),
              H("Relu", ["c9"], ["r9"], name="head_relu"),
              H("GlobalAveragePool", ["r9"], ["y"], name="gap")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 1, 1])],
                  inits, "fire_cnn")


def shuffle_cnn(seed: int = 0, pooled_shuffle: bool = False) -> onnx.ModelProto:
    """A ShuffleNet unit: grouped 1x1 convolution, channel shuffle (Reshape, Transpose,
    Reshape), depthwise 3x3 convolution with BatchNorm, grouped 1x1 convolution and a
    residual sum; then a second shuffle read by a convolution and (``pooled_shuffle``) also
    by a max pooling.  Input ``x`` [1, 12, 10, 10], output ``y`` [1, 12, 10, 10]."""
    rng = np.random.default_rng(seed)
    n = rng.standard_normal
    H = helper.make_node
    c, g = 12, 3

    def shape(name, dims):
        return numpy_helper.from_array(np.array(dims, np.int64), name)

    inits = [_const("w_in", n((c, c // g, 1, 1)) * 0.4), _const("w_dw", n((c, 1, 3, 3)) * 0.4),
             _const("bn_s", 1 + 0.1 * n(c)), _const("bn_b", 0.1 * n(c)),
             _const("bn_m", 0.1 * n(c)), _const("bn_v", 1 + 0.1 * np.abs(n(c))),
             _const("w_out", n((c, c // g, 1, 1)) * 0.4), _const("w_last", n((c, c, 3, 3)) * 0.2),
             shape("split", [1, g, c // g, 10, 10]), shape("merge", [1, c, 10, 10])]

    def shuffle(x, tag):
        return [H("Reshape", [x, "split"], [f"{tag}_s"], name=f"{tag}_split"),
                H("Transpose", [f"{tag}_s"], [f"{tag}_t"], perm=[0, 2, 1, 3, 4], name=f"{tag}_swap"),
                H("Reshape", [f"{tag}_t", "merge"], [f"{tag}_m"], name=f"{tag}_merge")]

    nodes = [H("Conv", ["x", "w_in"], ["a"], group=g, name="gconv_in"),
             H("Relu", ["a"], ["ar"], name="relu_in"),
             *shuffle("ar", "sh1"),
             H("Conv", ["sh1_m", "w_dw"], ["d"], pads=[1, 1, 1, 1], group=c, name="dwconv"),
             H("BatchNormalization", ["d", "bn_s", "bn_b", "bn_m", "bn_v"], ["dn"], name="bn"),
             H("Conv", ["dn", "w_out"], ["o"], group=g, name="gconv_out"),
             H("Add", ["o", "x"], ["r"], name="residual"),
             H("Relu", ["r"], ["rr"], name="relu_out"),
             *shuffle("rr", "sh2"),
             H("Conv", ["sh2_m", "w_last"], ["y0"], pads=[1, 1, 1, 1], name="conv_last")]
    if pooled_shuffle:
        nodes += [H("MaxPool", ["sh2_m"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                    name="pool"),
                  H("Add", ["y0", "p"], ["y"], name="sum")]
    else:
        nodes += [H("Identity", ["y0"], ["y"], name="out")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 10, 10])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 10, 10])],
                  inits, "shuffle_cnn")


def tiny_mlp(seed: int = 0, sizes=(48, 96, 40, 10)) -> onnx.ModelProto:
    """MatMul + Add (bias) + ReLU layers; wide enough that layers are tiled on TEST_CORE."""
    rng = np.random.default_rng(seed)
    nodes, inits, cur = [], [], "x"
    for k, (a, b) in enumerate(zip(sizes, sizes[1:])):
        inits += [_const(f"w{k}", rng.standard_normal((a, b)) * np.sqrt(2 / a)),
                  _const(f"b{k}", rng.standard_normal(b) * 0.1)]
        nodes += [helper.make_node("MatMul", [cur, f"w{k}"], [f"m{k}"], name=f"matmul{k}"),
                  helper.make_node("Add", [f"m{k}", f"b{k}"], [f"h{k}"], name=f"bias{k}")]
        cur = f"h{k}"
        if k < len(sizes) - 2:
            nodes.append(helper.make_node("Relu", [cur], [f"r{k}"], name=f"relu{k}"))
            cur = f"r{k}"
    nodes.append(helper.make_node("Identity", [cur], ["y"], name="out"))
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, sizes[0]])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, sizes[-1]])],
                  inits, "tiny_mlp")


def inputs(model: onnx.ModelProto, count: int, seed: int = 1) -> list[np.ndarray]:
    """Seeded standard-normal inputs of the model's (single) input shape."""
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(dims).astype(np.float32) for _ in range(count)]


def dense_cnn(seed: int = 0, h: int = 34, w: int = 18) -> onnx.ModelProto:
    """A densenet-like chain: convolution, ReLU, BatchNorm (not foldable after the ReLU),
    ReLU, max pooling, 1x1 convolution, BatchNorm, ReLU, a residual sum with the pooled
    map, 1x1 convolution: kernels of different kinds one after another, each walking its
    map row by row.  Input ``x``
    [1, 3, h, w], output ``y`` [1, 8, h // 2, w // 2]."""
    rng = np.random.default_rng(seed)
    n = rng.standard_normal

    def bn(tag: str, c: int) -> list:
        return [_const(f"{tag}_s", 1 + 0.1 * n(c)), _const(f"{tag}_b", 0.1 * n(c)),
                _const(f"{tag}_m", 0.1 * n(c)), _const(f"{tag}_v", 1 + 0.1 * np.abs(n(c)))]

    inits = [_const("w1", n((16, 3, 3, 3)) * 0.3), _const("w2", n((16, 16, 1, 1)) * 0.3),
             _const("w3", n((8, 16, 1, 1)) * 0.3), *bn("bn1", 16), *bn("bn2", 16)]
    H = helper.make_node
    nodes = [H("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             H("Relu", ["c1"], ["r1"], name="relu1"),
             H("BatchNormalization", ["r1", *(f"bn1_{x}" for x in "sbmv")], ["n1"], name="bn1"),
             H("Relu", ["n1"], ["r2"], name="relu2"),
             H("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
             H("Conv", ["p", "w2"], ["c2"], name="conv2"),
             H("BatchNormalization", ["c2", *(f"bn2_{x}" for x in "sbmv")], ["n2"], name="bn2"),
             H("Relu", ["n2"], ["r3"], name="relu3"),
             H("Add", ["r3", "p"], ["s"], name="residual"),
             H("Conv", ["s", "w3"], ["y"], name="conv3")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, h, w])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, h // 2, w // 2])],
                  inits, "dense_cnn")
