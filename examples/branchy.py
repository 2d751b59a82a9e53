"""Generated branchy networks (seeded, built in code): inception-like blocks whose branches
load the core's units differently, for the scheduling benchmark and tests.

Each block takes a map of ``c`` channels and runs 2 to 4 branches drawn from

* ``conv1``: 1x1 convolution (light on the MX unit, heavy on loads and stores),
* ``conv3``: 1x1 reduction then 3x3 convolution (heavy on the MX unit),
* ``maxpool``: 3x3 max pooling then 1x1 convolution (VX unit, then MX),
* ``avgpool``: 3x3 average pooling (VX unit only),

concatenates them along channels and reduces back to ``c`` channels with a 1x1
convolution; a global average pooling and a fully connected layer end the network.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BRANCHES = ("conv1", "conv3", "maxpool", "avgpool")


def build(seed: int = 0, blocks: int = 3, channels: int = 32, size: int = 16,
          classes: int = 10, branches: tuple[int, int] = (2, 4)) -> onnx.ModelProto:
    """A branchy network with input ``x`` [1, ``channels``, ``size``, ``size``] and output
    ``y`` [1, ``classes``]; ``branches``: how many branches a block has (inclusive range)."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    H = helper.make_node
    count = {"n": 0}

    def name(kind: str) -> str:
        count["n"] += 1
        return f"{kind}{count['n']}"

    def conv(x: str, cin: int, cout: int, k: int) -> str:
        n = name("conv")
        w = rng.standard_normal((cout, cin, k, k)).astype(np.float32) * float(np.sqrt(2 / (cin * k * k)))
        b = rng.standard_normal(cout).astype(np.float32) * 0.1
        inits.extend([numpy_helper.from_array(w, f"{n}_w"), numpy_helper.from_array(b, f"{n}_b")])
        nodes.append(H("Conv", [x, f"{n}_w", f"{n}_b"], [f"{n}_c"], pads=[k // 2] * 4, name=n))
        nodes.append(H("Relu", [f"{n}_c"], [f"{n}_y"], name=f"{n}_relu"))
        return f"{n}_y"

    def pool(x: str, op: str) -> str:
        n = name(op.lower())
        nodes.append(H(op, [x], [f"{n}_y"], kernel_shape=[3, 3], strides=[1, 1], pads=[1] * 4,
                       name=n))
        return f"{n}_y"

    c = channels
    x = conv("x", c, c, 3)
    for _ in range(blocks):
        k = int(rng.integers(branches[0], branches[1] + 1))
        kinds = list(rng.choice(BRANCHES, size=k, replace=k > len(BRANCHES)))
        outs, width = [], 0
        for kind in kinds:
            if kind == "conv1":
                outs.append(conv(x, c, c // 2, 1))
                width += c // 2
            elif kind == "conv3":
                outs.append(conv(conv(x, c, c // 4, 1), c // 4, c // 2, 3))
                width += c // 2
            elif kind == "maxpool":
                outs.append(conv(pool(x, "MaxPool"), c, c // 4, 1))
                width += c // 4
            else:
                outs.append(pool(x, "AveragePool"))
                width += c
        n = name("concat")
        nodes.append(H("Concat", outs, [f"{n}_y"], axis=1, name=n))
        x = conv(f"{n}_y", width, c, 1)
    nodes.append(H("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(H("Flatten", ["gap"], ["flat"], name="flatten"))
    w = rng.standard_normal((classes, c)).astype(np.float32) * float(np.sqrt(2 / c))
    inits.append(numpy_helper.from_array(w, "fc_w"))
    nodes.append(H("Gemm", ["flat", "fc_w"], ["y"], transB=1, name="fc"))
    graph = helper.make_graph(
        nodes, f"branchy{seed}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
