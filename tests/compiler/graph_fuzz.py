"""Random small ONNX graphs mixing core and host operators (seeded, replayable).

``random_model(seed)`` grows a DAG from one input: at each step it picks an operator whose
operands exist in the pool of tensors built so far (convolutions of every geometry,
pooling, element-wise adds and concatenations, BatchNormalization, ReLU / ReLU6, and host
operators: sigmoid-type activations, Softmax, Transpose, Resize, Pad, Slice, Reduce...),
then ends with a Flatten and a Gemm (or a 4-D output).  The same seed always gives the same
model.

Replay one from the command line::

    python tests/compiler/graph_fuzz.py 123 -o fuzz123.onnx
    snpu compile fuzz123.onnx -o out && snpu run out
"""

from __future__ import annotations

import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Builder:
    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.nodes, self.inits = [], []
        self.pool: list[tuple[str, tuple]] = []  # 4-D activations: (name, shape)
        self.k = 0

    def name(self, base: str) -> str:
        self.k += 1
        return f"{base}{self.k}"

    def const(self, value, dtype=np.float32) -> str:
        n = self.name("k")
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), n))
        return n

    def node(self, op: str, inputs: list[str], shape: tuple, **attrs) -> str:
        out = self.name(op.lower() + "_")
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        if len(shape) == 4:
            self.pool.append((out, shape))
        return out

    def pick(self):
        # prefer recent tensors (a chain with some branches)
        k = len(self.pool) - 1 - min(int(self.rng.exponential(1.5)), len(self.pool) - 1)
        return self.pool[k]


def _step(b: _Builder) -> None:
    rng = b.rng
    x, (n, c, h, w) = b.pick()
    kind = rng.choice(["conv", "conv", "conv", "relu", "relu6", "bn", "maxpool", "avgpool",
                       "add", "concat", "mulc", "sigmoid", "tanh", "leaky", "softmax",
                       "transpose", "resize", "pad", "slice", "reduce", "hardswish"])
    if kind == "conv":
        k = int(rng.choice([1, 3, 3, 5])) if min(h, w) >= 5 else 1
        s = int(rng.choice([1, 1, 2]))
        p = int(rng.integers(0, k // 2 + 1))
        groups = int(rng.choice([1, 1, 1, c])) if c > 1 else 1
        co = int(rng.integers(1, 12))
        co = co if groups == 1 else c * int(rng.integers(1, 3))
        wt = b.const(rng.standard_normal((co, c // groups, k, k)) * (1.5 / np.sqrt(c // groups * k * k)))
        bias = [b.const(rng.standard_normal(co) * 0.1)] if rng.random() < 0.5 else []
        oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
        if oh < 1 or ow < 1:
            return
        b.node("Conv", [x, wt] + bias, (n, co, oh, ow), kernel_shape=[k, k], strides=[s, s],
               pads=[p, p, p, p], group=groups)
    elif kind == "relu":
        b.node("Relu", [x], (n, c, h, w))
    elif kind == "relu6":
        b.node("Clip", [x, b.const(0.0), b.const(6.0)], (n, c, h, w))
    elif kind == "bn":
        b.node("BatchNormalization", [x, b.const(rng.uniform(0.5, 1.5, c)), b.const(rng.normal(0, 0.1, c)),
                                      b.const(rng.normal(0, 0.1, c)), b.const(rng.uniform(0.5, 2, c))],
               (n, c, h, w))
    elif kind in ("maxpool", "avgpool") and min(h, w) >= 2:
        b.node("MaxPool" if kind == "maxpool" else "AveragePool", [x], (n, c, h // 2, w // 2),
               kernel_shape=[2, 2], strides=[2, 2])
    elif kind == "add":
        same = [t for t, s in b.pool if s == (n, c, h, w) and t != x]
        if same:
            b.node("Add", [x, same[int(rng.integers(len(same)))]], (n, c, h, w))
    elif kind == "concat":
        other = [(t, s) for t, s in b.pool if s[0] == n and s[2:] == (h, w) and t != x]
        if other:
            t, s = other[int(rng.integers(len(other)))]
            b.node("Concat", [x, t], (n, c + s[1], h, w), axis=1)
    elif kind == "mulc":
        b.node("Mul", [x, b.const(rng.uniform(0.5, 1.5, (c, 1, 1)))], (n, c, h, w))
    elif kind in ("sigmoid", "tanh"):
        b.node(kind.capitalize(), [x], (n, c, h, w))
    elif kind == "leaky":
        b.node("LeakyRelu", [x], (n, c, h, w), alpha=0.1)
    elif kind == "hardswish":
        b.node("HardSigmoid", [x], (n, c, h, w), alpha=1 / 6, beta=0.5)
    elif kind == "softmax":
        b.node("Softmax", [x], (n, c, h, w), axis=1)
    elif kind == "transpose":
        b.node("Transpose", [x], (n, c, w, h), perm=[0, 1, 3, 2])
    elif kind == "resize" and h * w <= 64:
        b.node("Resize", [x, "", b.const([1, 1, 2, 2])], (n, c, 2 * h, 2 * w), mode="nearest")
    elif kind == "pad":
        b.node("Pad", [x, b.const([0, 0, 1, 1, 0, 0, 1, 1], np.int64)], (n, c, h + 2, w + 2))
    elif kind == "slice" and h > 2:
        b.node("Slice", [x, b.const([1], np.int64), b.const([h - 1], np.int64),
                         b.const([2], np.int64)], (n, c, h - 2, w))
    elif kind == "reduce":
        b.node("ReduceMean", [x], (n, c, 1, w), axes=[2], keepdims=1)


def random_model(seed: int) -> onnx.ModelProto:
    """A random model (opset 13) with input ``x`` and output ``y``; replayable by seed."""
    rng = np.random.default_rng(seed)
    b = _Builder(rng)
    shape = (int(rng.choice([1, 1, 1, 2])), int(rng.integers(1, 6)), int(rng.integers(3, 11)),
             int(rng.integers(3, 11)))
    b.pool.append(("x", shape))
    for _ in range(int(rng.integers(2, 9))):
        _step(b)
    y, (n, c, h, w) = b.pool[-1]
    if rng.random() < 0.7:
        f = b.node("Flatten", [y], (n, c * h * w))
        classes = int(rng.integers(2, 11))
        wt = b.const(rng.standard_normal((classes, c * h * w)) / np.sqrt(c * h * w))
        b.nodes.append(helper.make_node("Gemm", [f, wt], ["y"], name="head", transB=1))
        out_shape = [n, classes]
    else:
        b.nodes.append(helper.make_node("Identity", [y], ["y"], name="out"))
        out_shape = [n, c, h, w]
    g = helper.make_graph(b.nodes, f"fuzz{seed}",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                          b.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("seed", type=int)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    onnx.save(random_model(a.seed), a.output)
    print(a.output)


if __name__ == "__main__":
    main()
