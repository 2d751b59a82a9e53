"""A generated U-Net-like network (seeded, built in code) with long skip connections, for
the memory-planning benchmark and tests.

The encoder is ``depth`` 3x3 convolutions whose maps widen from ``channels`` by
``channels`` per level; the decoder walks back, each level a 3x3 convolution of the level
below added to the encoder map of its own level (the skip), then ReLU.  The encoder map of
level ``i`` is written early and read ``2 * (depth - i)`` layers later: the long-lived
tensors that make a U-Net's activation memory large, and what seed 001 swaps out.  The
maps keep their size (the core runs no upsampling), so every layer runs on the core.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(seed: int = 0, depth: int = 4, channels: int = 8, size: int = 16,
          resample: bool = False) -> onnx.ModelProto:
    """Input ``x`` [1, ``channels``, ``size``, ``size``], output ``y`` of the same shape.

    ``resample``: the classic U-Net shape instead: each encoder level below the first
    halves the map (stride-2 convolution) and doubles the channels, and each decoder level
    doubles the map back with a nearest-neighbour Resize, which runs on the host
    (onnxruntime), so the skips cross host subgraphs.  ``size`` must divide by
    ``2 ** (depth - 1)``."""
    if resample and size % (1 << (depth - 1)):
        raise ValueError(f"size {size} does not divide by 2**{depth - 1}")
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    H = helper.make_node

    def conv(name: str, x: str, cin: int, cout: int, relu: bool = True, stride: int = 1) -> str:
        w = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32) * float(np.sqrt(2 / (cin * 9)))
        b = rng.standard_normal(cout).astype(np.float32) * 0.1
        inits.extend([numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")])
        nodes.append(H("Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_c"], pads=[1] * 4,
                       strides=[stride] * 2, name=name))
        if not relu:
            return f"{name}_c"
        nodes.append(H("Relu", [f"{name}_c"], [f"{name}_y"], name=f"{name}_relu"))
        return f"{name}_y"

    width = [channels * ((1 << i) if resample else i + 1) for i in range(depth)]
    enc, x, cin = [], "x", channels
    for i in range(depth):
        x = conv(f"enc{i}", x, cin, width[i], stride=2 if resample and i else 1)
        enc.append(x)
        cin = width[i]
    if resample:
        inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "up_scales"))
    for i in reversed(range(depth - 1)):
        if resample:
            nodes.append(H("Resize", [x, "", "up_scales"], [f"up{i}"], mode="nearest",
                           name=f"up{i}"))
            x = f"up{i}"
        up = conv(f"dec{i}", x, cin, width[i], relu=False)
        nodes.append(H("Add", [up, enc[i]], [f"skip{i}"], name=f"skip{i}"))
        nodes.append(H("Relu", [f"skip{i}"], [f"dec{i}_y"], name=f"dec{i}_relu"))
        x, cin = f"dec{i}_y", width[i]
    y = conv("head", x, cin, channels, relu=False)
    nodes.append(H("Identity", [y], ["y"], name="out"))
    graph = helper.make_graph(
        nodes, f"unet{seed}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, size, size])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model
