"""One small model per core layer kind (seeded, built in code), large enough that the RTL
tests' 4-lane core (``tests/compiler/models.TEST_CORE``) tiles and splits them: the scheduling
tests and ``bench/schedule.py``'s calibration of the cost model per layer kind use them.

:func:`layer_model` returns the model and its input shape."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

H = helper.make_node

#: every kind :func:`layer_model` builds, and the split dimension its layer takes under a
#: small threshold (None: whichever the cost picks)
KINDS = {"conv_rows": "rows", "conv_channels": "channels", "depthwise": None,
         "fc_channels": "channels", "fc_images": "images", "maxpool": "channels",
         "avgpool": "channels", "global_pool": "channels", "add": None,
         "conv_images": "images"}


def one_node(nodes, x_shape, y_shape, inits, name="m"):
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _w(rng, name, *shape):
    return numpy_helper.from_array((rng.standard_normal(shape) * (2 / np.prod(shape[1:])) ** 0.5)
                                   .astype(np.float32), name)


def layer_model(kind: str, rng: np.random.Generator):
    """The model of ``kind`` (one of :data:`KINDS`) and its input shape."""
    if kind == "conv_rows":  # a large map, few weights: output rows
        return one_node([H("Conv", ["x", "w"], ["c"], pads=[1] * 4), H("Relu", ["c"], ["y"])],
                      [1, 8, 40, 40], [1, 8, 40, 40], [_w(rng, "w", 8, 8, 3, 3)]), [1, 8, 40, 40]
    if kind == "conv_channels":  # a small map, many weights: output channels
        return one_node([H("Conv", ["x", "w"], ["y"], pads=[1] * 4)], [1, 64, 4, 4],
                      [1, 96, 4, 4], [_w(rng, "w", 96, 64, 3, 3)]), [1, 64, 4, 4]
    if kind == "depthwise":
        return one_node([H("Conv", ["x", "w"], ["y"], pads=[1] * 4, group=32)], [1, 32, 24, 24],
                      [1, 32, 24, 24], [_w(rng, "w", 32, 1, 3, 3)]), [1, 32, 24, 24]
    if kind == "fc_channels":
        return one_node([H("Gemm", ["x", "w"], ["y"], transB=1)], [1, 256], [1, 200],
                      [_w(rng, "w", 200, 256)]), [1, 256]
    if kind == "fc_images":
        return one_node([H("Gemm", ["x", "w"], ["y"], transB=1)], [6, 512], [6, 64],
                      [_w(rng, "w", 64, 512)]), [6, 512]
    if kind == "maxpool":
        return one_node([H("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2])],
                      [1, 48, 30, 30], [1, 48, 14, 14], []), [1, 48, 30, 30]
    if kind == "avgpool":
        return one_node([H("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2],
                         pads=[1] * 4)], [1, 48, 30, 30], [1, 48, 16, 16], []), [1, 48, 30, 30]
    if kind == "global_pool":
        return one_node([H("GlobalAveragePool", ["x"], ["y"])], [1, 64, 24, 24], [1, 64, 1, 1],
                      []), [1, 64, 24, 24]
    if kind == "add":
        return one_node([H("Relu", ["x"], ["r"]), H("Add", ["x", "r"], ["y"])], [1, 32, 30, 30],
                      [1, 32, 30, 30], []), [1, 32, 30, 30]
    if kind == "conv_images":
        return one_node([H("Conv", ["x", "w"], ["y"], pads=[1] * 4)], [4, 8, 24, 24],
                      [4, 8, 24, 24], [_w(rng, "w", 8, 8, 3, 3)]), [4, 8, 24, 24]
    raise KeyError(kind)


