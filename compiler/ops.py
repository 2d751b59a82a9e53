"""Operator registry: the ONNX operators the compiler reasons about.

For the core's operators and the shape arithmetic constant folding meets: float semantics in
numpy (constant folding, the float reference, calibration) and output shapes.  Any other
ONNX operator gets a generic definition from :func:`get` (shapes from ONNX shape inference,
values from onnxruntime: :mod:`.onnx_ops`); host subgraphs always run on onnxruntime
(:mod:`.host`).  Whether the core runs an op is decided by :mod:`.passes.partition` from
:data:`CORE_OPS`; how it runs there is the kernel in :mod:`.kernels`.  ``docs/compiler.md``
("Adding an operator") walks through adding one.

Tensors are NCHW at this level, as in ONNX.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from snpu.errors import CompileError

from .ir import Node

Shapes = list[tuple[int, ...]]


@dataclass(frozen=True)
class OpDef:
    name: str
    #: (node, input shapes, input consts) -> output shapes; None: ONNX shape inference
    #: (:func:`.onnx_ops.infer`, which also gives the output dtypes)
    shape: Callable[[Node, Shapes, list], Shapes] | None
    run: Callable[[Node, list[np.ndarray]], list[np.ndarray]]


REGISTRY: dict[str, OpDef] = {}
#: ops the core can run (after folding / fusion); the rest run on the host
CORE_OPS = {"Conv", "Gemm", "MatMul", "Relu", "MaxPool", "AveragePool", "GlobalAveragePool",
            "Add", "Sum", "Concat", "BatchNormalization", "Flatten", "Reshape", "Affine"}


def op(name: str, shape):
    def deco(fn):
        REGISTRY[name] = OpDef(name, shape, fn)
        return fn
    return deco


def get(node: Node) -> OpDef:
    """The registry's definition, or for any other ONNX operator the generic one
    (shapes from ONNX shape inference, values from onnxruntime: :mod:`.onnx_ops`)."""
    from . import onnx_ops

    d = REGISTRY.get(node.op)
    if d is not None:
        return d
    if onnx_ops.is_onnx_op(node.op, int(node.meta.get("opset", onnx_ops.DEFAULT_OPSET))):
        return OpDef(node.op, None, onnx_ops.run)
    raise CompileError(f"{node.where()}: {node.op} is not an ONNX operator of the default "
                       f"domain at opset {node.meta.get('opset', onnx_ops.DEFAULT_OPSET)}")


def _ints(node, key, default):
    v = node.attrs.get(key, default)
    return [int(x) for x in v] if isinstance(v, (list, tuple)) else v


# ----------------------------------------------------------------------------------------------
# Convolution, matrix products
# ----------------------------------------------------------------------------------------------


def conv_geometry(node: Node, x_shape, w_shape):
    """(kh, kw, sh, sw, pads [top, left, bottom, right], dilations, groups, out H, out W)."""
    kh, kw = w_shape[2], w_shape[3]
    sh, sw = _ints(node, "strides", [1, 1])
    dh, dw = _ints(node, "dilations", [1, 1])
    groups = int(node.attrs.get("group", 1))
    pads = _ints(node, "pads", [0, 0, 0, 0])
    auto = node.attrs.get("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    h, w = x_shape[2], x_shape[3]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        oh, ow = -(-h // sh), -(-w // sw)
        ph = max(0, (oh - 1) * sh + (kh - 1) * dh + 1 - h)
        pw = max(0, (ow - 1) * sw + (kw - 1) * dw + 1 - w)
        if auto == "SAME_UPPER":
            pads = [ph // 2, pw // 2, ph - ph // 2, pw - pw // 2]
        else:
            pads = [ph - ph // 2, pw - pw // 2, ph // 2, pw // 2]
    elif auto == "VALID":
        pads = [0, 0, 0, 0]
    oh = (h + pads[0] + pads[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pads[1] + pads[3] - (kw - 1) * dw - 1) // sw + 1
    return kh, kw, sh, sw, pads, (dh, dw), groups, oh, ow


def _conv_shape(node, shapes, consts):
    x, w = shapes[0], shapes[1]
    *_, oh, ow = conv_geometry(node, x, w)
    return [(x[0], w[0], oh, ow)]


def ungrouped_weights(w: np.ndarray, groups: int) -> np.ndarray:
    """The weights ``w`` (out, in / groups, kh, kw) of a convolution of ``groups`` groups as
    an ungrouped convolution's (out, in, kh, kw): zero outside each group's block."""
    co, cig, kh, kw = w.shape
    og = co // groups
    full = np.zeros((co, cig * groups, kh, kw), w.dtype)
    for k in range(groups):
        full[k * og:(k + 1) * og, k * cig:(k + 1) * cig] = w[k * og:(k + 1) * og]
    return full


@op("Conv", _conv_shape)
def conv(node, inputs):
    x, w = np.asarray(inputs[0], np.float32), np.asarray(inputs[1], np.float32)
    b = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    kh, kw, sh, sw, pads, (dh, dw), groups, oh, ow = conv_geometry(node, x.shape, w.shape)
    n, c = x.shape[:2]
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    cg, og = c // groups, w.shape[0] // groups
    out = np.empty((n, w.shape[0], oh, ow), np.float32)
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        cols = np.empty((n, cg, kh, kw, oh, ow), np.float32)
        for i in range(kh):
            for j in range(kw):
                cols[:, :, i, j] = xs[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                                      j * dw:j * dw + sw * (ow - 1) + 1:sw]
        wg = w[g * og:(g + 1) * og].reshape(og, -1)
        # a (batched) matrix product: BLAS, unlike einsum's loops
        out[:, g * og:(g + 1) * og] = np.matmul(wg, cols.reshape(n, cg * kh * kw, oh * ow)
                                                ).reshape(n, og, oh, ow)
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return [out]


def _gemm_shape(node, shapes, consts):
    a, b = shapes[0], shapes[1]
    m = a[1] if node.attrs.get("transA", 0) else a[0]
    n = b[0] if node.attrs.get("transB", 0) else b[1]
    return [(m, n)]


@op("Gemm", _gemm_shape)
def gemm(node, inputs):
    a, b = inputs[0], inputs[1]
    if node.attrs.get("transA", 0):
        a = a.T
    if node.attrs.get("transB", 0):
        b = b.T
    # no copies of float32 operands (a fully connected layer's weights are large)
    y = float(node.attrs.get("alpha", 1.0)) * (np.asarray(a, np.float32) @ np.asarray(b, np.float32))
    if len(inputs) > 2 and inputs[2] is not None:
        y = y + float(node.attrs.get("beta", 1.0)) * inputs[2]
    return [y.astype(np.float32)]


@op("MatMul", lambda node, s, c: [np.broadcast_shapes(s[0][:-2], s[1][:-2]) + (s[0][-2], s[1][-1])]
    if len(s[0]) >= 2 and len(s[1]) >= 2 else [tuple(np.matmul(np.zeros(s[0]), np.zeros(s[1])).shape)])
def matmul(node, inputs):
    return [np.matmul(inputs[0], inputs[1]).astype(np.float32)]


# ----------------------------------------------------------------------------------------------
# Pooling
# ----------------------------------------------------------------------------------------------


def pool_geometry(node: Node, x_shape):
    kh, kw = _ints(node, "kernel_shape", None)
    sh, sw = _ints(node, "strides", [1, 1])
    pads = _ints(node, "pads", [0, 0, 0, 0])
    ceil = int(node.attrs.get("ceil_mode", 0))
    h, w = x_shape[2], x_shape[3]

    def out(size, k, s, p0, p1):
        span = size + p0 + p1 - k
        o = (-(-span // s) if ceil else span // s) + 1
        if ceil and (o - 1) * s >= size + p0:  # the last window must start inside the input
            o -= 1
        return o
    return kh, kw, sh, sw, pads, out(h, kh, sh, pads[0], pads[2]), out(w, kw, sw, pads[1], pads[3])


def never_negative(g, t: str) -> bool:
    """Is activation ``t`` never negative whatever the input?  A fused ReLU or clip at zero
    makes it so; max pooling, concatenation, views and local response normalisation keep it.
    A structural fact, not a calibration range."""
    seen: dict[str, bool] = {}
    producers = g.producers()

    def walk(t: str) -> bool:
        if t not in seen:
            seen[t] = False  # a cycle proves nothing
            n = producers.get(t)
            if n is None:
                ok = False
            elif n.meta.get("relu") or n.op == "Relu":
                ok = True
            elif n.op in ("MaxPool", "Concat", "Flatten", "Reshape") or (
                    # x / (bias + alpha/size * sum x^2) ** beta keeps the sign of x
                    n.op == "LRN" and float(n.attrs.get("bias", 1.0)) > 0
                    and float(n.attrs.get("alpha", 1e-4)) >= 0):
                ok = all(walk(i) for i in n.inputs if i and not g.tensor(i).is_const)
            else:
                ok = False
            seen[t] = ok
        return seen[t]
    return walk(t)


def pool_halo(g, node: Node) -> tuple[int, int]:
    """(rows, pixels) of zero halo a pooling may read for its padding -- (0, 0) if zeros
    are not exact there.  Zeros are exact for an average (they add nothing; the divisor
    stays the window's own) and for a maximum over an input that is never negative (every
    window holds at least one input value, which is >= 0).  Reading the halo gives every
    window the same shape, so a pooling's pixel groups are one loop body."""
    if node.op not in ("MaxPool", "AveragePool"):
        return 0, 0
    if node.op == "MaxPool" and not never_negative(g, node.inputs[0]):
        return 0, 0
    shape = g.tensor(node.inputs[0]).shape
    kh, kw, sh, sw, pads, oh, ow = pool_geometry(node, shape)
    below = max(pads[2], (oh - 1) * sh + kh - shape[2] - pads[0])  # ceil_mode's last window
    right = max(pads[3], (ow - 1) * sw + kw - shape[3] - pads[1])
    return max(pads[0], below, 0), max(pads[1], right, 0)


def _pool_shape(node, shapes, consts):
    x = shapes[0]
    *_, oh, ow = pool_geometry(node, x)
    return [(x[0], x[1], oh, ow)]


def _windows(x, kh, kw, sh, sw, pads, oh, ow, fill):
    h, w = x.shape[2], x.shape[3]
    pb = max(0, (oh - 1) * sh + kh - h - pads[0])
    pr = max(0, (ow - 1) * sw + kw - w - pads[1])
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pb), (pads[1], pr)), constant_values=fill)
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    return win[:, :, ::sh, ::sw][:, :, :oh, :ow]


@op("MaxPool", _pool_shape)
def maxpool(node, inputs):
    x = inputs[0].astype(np.float32)
    kh, kw, sh, sw, pads, oh, ow = pool_geometry(node, x.shape)
    return [_windows(x, kh, kw, sh, sw, pads, oh, ow, -np.inf).max(axis=(-2, -1))]


def avgpool_divisors(node: Node, h: int, w: int) -> np.ndarray:
    """The divisor of every output position ([oh, ow]) under count_include_pad."""
    kh, kw, sh, sw, pads, oh, ow = pool_geometry(node, (1, 1, h, w))
    ones = np.ones((1, 1, h, w), np.float32)
    if int(node.attrs.get("count_include_pad", 0)):
        ones = np.pad(ones, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=1)
        pads = [0, 0, 0, 0]
    return _windows(ones, kh, kw, sh, sw, pads, oh, ow, 0.0).sum(axis=(-2, -1))[0, 0]


@op("AveragePool", _pool_shape)
def avgpool(node, inputs):
    x = inputs[0].astype(np.float32)
    kh, kw, sh, sw, pads, oh, ow = pool_geometry(node, x.shape)
    s = _windows(x, kh, kw, sh, sw, pads, oh, ow, 0.0).sum(axis=(-2, -1))
    return [s / avgpool_divisors(node, x.shape[2], x.shape[3])]


@op("GlobalAveragePool", lambda node, s, c: [(s[0][0], s[0][1], 1, 1)])
def gap(node, inputs):
    return [inputs[0].mean(axis=(2, 3), keepdims=True).astype(np.float32)]


# ----------------------------------------------------------------------------------------------
# Element-wise, normalisation, activations
# ----------------------------------------------------------------------------------------------


def _broadcast(node, shapes, consts):
    return [tuple(np.broadcast_shapes(*[s for s in shapes if s is not None]))]


for _name, _fn in (("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply), ("Div", np.divide)):
    def _make(fn):
        return lambda node, inputs: [fn(inputs[0], inputs[1]).astype(np.result_type(inputs[0], inputs[1]))]
    REGISTRY[_name] = OpDef(_name, _broadcast, _make(_fn))


@op("Sum", _broadcast)
def sum_(node, inputs):
    out = inputs[0]
    for x in inputs[1:]:
        out = out + x
    return [out.astype(np.float32)]


@op("Relu", lambda node, s, c: [s[0]])
def relu(node, inputs):
    return [np.maximum(inputs[0], 0)]


@op("BatchNormalization", lambda node, s, c: [s[0]])
def batchnorm(node, inputs):
    x, scale, bias, mean, var = inputs[:5]
    eps = float(node.attrs.get("epsilon", 1e-5))
    a, b = bn_affine(scale, bias, mean, var, eps)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return [(x * a.reshape(shape) + b.reshape(shape)).astype(np.float32)]


def bn_affine(scale, bias, mean, var, eps):
    """BatchNormalization as a per-channel affine ``x * a + b``."""
    a = scale / np.sqrt(var + eps)
    return a.astype(np.float32), (bias - mean * a).astype(np.float32)


@op("Copy", lambda node, s, c: [s[0]])
def copy_op(node, inputs):
    """Identity: the memory plan's swap-out and swap-in (passes/memory_budget.py)."""
    return [inputs[0]]


@op("Affine", lambda node, s, c: [s[0]])
def affine(node, inputs):
    """Per-channel ``x * a + b`` (what BatchNormalization and Mul/Add by channel vectors fold
    into); ``a`` and ``b`` are constant inputs of shape [C]."""
    x, a, b = inputs
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return [(x * a.reshape(shape) + b.reshape(shape)).astype(np.float32)]


@op("Dropout", lambda node, s, c: [s[0]] + ([s[0]] if len(node.outputs) > 1 else []))
def dropout(node, inputs):
    outs = [inputs[0]]
    if len(node.outputs) > 1:
        outs.append(np.ones(inputs[0].shape, bool))
    return outs


@op("Identity", lambda node, s, c: [s[0]])
def identity(node, inputs):
    return [inputs[0]]


# ----------------------------------------------------------------------------------------------
# Shape manipulation and constants
# ----------------------------------------------------------------------------------------------


@op("Flatten", lambda node, s, c: [(int(np.prod(s[0][:int(node.attrs.get("axis", 1))])),
                                    int(np.prod(s[0][int(node.attrs.get("axis", 1)):])))])
def flatten(node, inputs):
    axis = int(node.attrs.get("axis", 1))
    x = inputs[0]
    return [x.reshape(int(np.prod(x.shape[:axis])), -1)]


def _reshape_target(shape_in, target):
    target = [int(v) for v in target]
    out = [shape_in[k] if v == 0 else v for k, v in enumerate(target)]
    if -1 in out:
        known = int(np.prod([v for v in out if v != -1]))
        out[out.index(-1)] = int(np.prod(shape_in)) // known
    return tuple(out)


def _reshape_shape(node, shapes, consts):
    if consts[1] is None:
        raise CompileError(f"{node.where()}: the target shape must be constant")
    return [_reshape_target(shapes[0], consts[1])]


@op("Reshape", _reshape_shape)
def reshape(node, inputs):
    return [inputs[0].reshape(_reshape_target(inputs[0].shape, inputs[1]))]


def _concat_shape(node, shapes, consts):
    axis = int(node.attrs["axis"])
    out = list(shapes[0])
    axis = axis % len(out)
    out[axis] = sum(s[axis] for s in shapes)
    return [tuple(out)]


@op("Concat", _concat_shape)
def concat(node, inputs):
    return [np.concatenate(inputs, axis=int(node.attrs["axis"]))]


def _unsqueeze_axes(node, inputs_or_consts):
    axes = node.attrs.get("axes")
    if axes is None and len(inputs_or_consts) > 1:
        axes = inputs_or_consts[1]
    return [int(a) for a in axes]


@op("Unsqueeze", lambda node, s, c: [tuple(np.expand_dims(np.zeros(s[0]), _unsqueeze_axes(node, c)).shape)])
def unsqueeze(node, inputs):
    return [np.expand_dims(inputs[0], _unsqueeze_axes(node, inputs))]


@op("Squeeze", lambda node, s, c: [tuple(np.squeeze(np.zeros(s[0]), tuple(_unsqueeze_axes(node, c))
                                                    if (node.attrs.get("axes") or len(c) > 1) else None).shape)])
def squeeze(node, inputs):
    axes = node.attrs.get("axes") or (inputs[1] if len(inputs) > 1 else None)
    return [np.squeeze(inputs[0], tuple(int(a) for a in axes) if axes is not None else None)]


@op("Shape", lambda node, s, c: [(len(s[0]),)])
def shape_(node, inputs):
    return [np.array(inputs[0].shape, np.int64)]


@op("Constant", lambda node, s, c: [tuple(node.attrs["value"].shape)])
def constant(node, inputs):
    return [node.attrs["value"]]


@op("ConstantOfShape", lambda node, s, c: [tuple(int(v) for v in c[0])])
def constant_of_shape(node, inputs):
    value = node.attrs.get("value", np.zeros(1, np.float32))
    return [np.full(tuple(int(v) for v in inputs[0]), value.reshape(-1)[0], value.dtype)]


@op("Gather", lambda node, s, c: [tuple(np.take(np.zeros(s[0]), c[1].astype(int) if c[1] is not None
                                                 else np.zeros(s[1], int), axis=int(node.attrs.get("axis", 0))).shape)])
def gather(node, inputs):
    return [np.take(inputs[0], inputs[1].astype(np.int64), axis=int(node.attrs.get("axis", 0)))]


@op("Cast", lambda node, s, c: [s[0]])
def cast(node, inputs):
    from onnx import helper

    return [inputs[0].astype(helper.tensor_dtype_to_np_dtype(int(node.attrs["to"])))]


