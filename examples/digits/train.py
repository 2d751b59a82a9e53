"""Train, prune and export the digits demo models (numpy only, deterministic).

    .venv/bin/python examples/digits/train.py [--out examples/digits]

scikit-learn's bundled 8x8 handwritten digits (1797 images, no download), split 80/20 with
a fixed seed (:func:`split`).  Two models:

* ``digits_cnn.onnx``: Conv 1->16 3x3 + ReLU, MaxPool 2, Conv 16->32 3x3 + ReLU, MaxPool 2,
  Gemm 128->64 + ReLU, Gemm 64->10 (logits);
* ``digits_mlp.onnx``: Gemm 64->128 + ReLU, Gemm 128->64 + ReLU, Gemm 64->10.

Both are trained dense with Adam, then pruned by gradual magnitude pruning (the kept
fraction follows a cubic schedule down to the target while training continues) and
fine-tuned with the masks fixed, so the exported weights are already sparse: the CNN to
20 % of its weights in every layer but the first convolution (50 %: it has only 144), the
MLP to 15 %.  The script prints the float test accuracy and per-layer densities as JSON.
The exported .onnx files are committed; the demo and tests never retrain.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def split(seed: int = 0):
    """(x_train, y_train, x_test, y_test): images as float32 in [0, 1], shape [N, 1, 8, 8]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    xtr, xte, ytr, yte = train_test_split(x, d.target, test_size=0.2, random_state=seed,
                                          stratify=d.target)
    return xtr, ytr.astype(np.int64), xte, yte.astype(np.int64)


# --- layers (forward caches what backward needs) ------------------------------------------
def im2col(x, k, pad):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    cols = np.empty((n, c, k, k, h, w), x.dtype)
    for i in range(k):
        for j in range(k):
            cols[:, :, i, j] = xp[:, :, i:i + h, j:j + w]
    return cols.transpose(0, 4, 5, 1, 2, 3).reshape(n * h * w, c * k * k)


def col2im(cols, shape, k, pad):
    n, c, h, w = shape
    cols = cols.reshape(n, h, w, c, k, k).transpose(0, 3, 4, 5, 1, 2)
    xp = np.zeros((n, c, h + 2 * pad, w + 2 * pad), cols.dtype)
    for i in range(k):
        for j in range(k):
            xp[:, :, i:i + h, j:j + w] += cols[:, :, i, j]
    return xp[:, :, pad:pad + h, pad:pad + w]


class Conv:
    def __init__(self, rng, cin, cout, k=3, pad=1):
        self.k, self.pad = k, pad
        self.w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2 / (cin * k * k))).astype(np.float32)
        self.b = np.zeros(cout, np.float32)

    def forward(self, x):
        self.shape = x.shape
        self.cols = im2col(x, self.k, self.pad)
        n, _, h, w = x.shape
        y = self.cols @ self.w.reshape(len(self.b), -1).T + self.b
        return y.reshape(n, h, w, -1).transpose(0, 3, 1, 2)

    def backward(self, dy):
        n, co, h, w = dy.shape
        d = dy.transpose(0, 2, 3, 1).reshape(-1, co)
        self.dw = (d.T @ self.cols).reshape(self.w.shape)
        self.db = d.sum(0)
        return col2im(d @ self.w.reshape(co, -1), self.shape, self.k, self.pad)


class Dense:
    def __init__(self, rng, nin, nout):
        self.w = (rng.standard_normal((nout, nin)) * np.sqrt(2 / nin)).astype(np.float32)
        self.b = np.zeros(nout, np.float32)

    def forward(self, x):
        self.x = x
        return x @ self.w.T + self.b

    def backward(self, dy):
        self.dw = dy.T @ self.x
        self.db = dy.sum(0)
        return dy @ self.w


class Relu:
    def forward(self, x):
        self.m = x > 0
        return x * self.m

    def backward(self, dy):
        return dy * self.m


class MaxPool2:
    def forward(self, x):
        n, c, h, w = x.shape
        r = x.reshape(n, c, h // 2, 2, w // 2, 2)
        y = r.max(axis=(3, 5))
        self.mask = r == y[:, :, :, None, :, None]
        self.shape = x.shape
        return y

    def backward(self, dy):
        d = self.mask * dy[:, :, :, None, :, None]
        d /= np.maximum(self.mask.sum(axis=(3, 5), keepdims=True), 1)
        return d.reshape(self.shape)


class Flatten:
    def forward(self, x):
        self.shape = x.shape
        return x.reshape(len(x), -1)

    def backward(self, dy):
        return dy.reshape(self.shape)


class Net:
    def __init__(self, layers):
        self.layers = layers
        self.params = [l for l in layers if hasattr(l, "w")]
        self.masks = [np.ones_like(l.w) for l in self.params]

    def forward(self, x):
        for l in self.layers:
            x = l.forward(x)
        return x

    def backward(self, dy):
        for l in reversed(self.layers):
            dy = l.backward(dy)

    def accuracy(self, x, y):
        return float(np.mean(self.forward(x).argmax(1) == y))


def cnn(rng) -> Net:
    return Net([Conv(rng, 1, 16), Relu(), MaxPool2(), Conv(rng, 16, 32), Relu(), MaxPool2(),
                Flatten(), Dense(rng, 128, 64), Relu(), Dense(rng, 64, 10)])


def mlp(rng) -> Net:
    return Net([Flatten(), Dense(rng, 64, 128), Relu(), Dense(rng, 128, 64), Relu(),
                Dense(rng, 64, 10)])


# --- training ------------------------------------------------------------------------------
def train(net: Net, x, y, rng, epochs: int, lr: float, targets: list[float] | None = None,
          prune_epochs: tuple[int, int] = (0, 0), batch: int = 32) -> None:
    """Adam with weight decay; with ``targets`` (kept fraction per parameter layer), gradual
    magnitude pruning between epochs ``prune_epochs`` (cubic schedule), masks fixed after."""
    state = [[np.zeros_like(p) for p in (l.w, l.b, l.w, l.b)] for l in net.params]
    t = 0
    for ep in range(epochs):
        if targets is not None:
            e0, e1 = prune_epochs
            if e0 <= ep <= e1:
                frac = 1.0 if e1 == e0 else (ep - e0) / (e1 - e0)
                for l, m, tgt in zip(net.params, net.masks, targets):
                    keep = tgt + (1 - tgt) * (1 - frac) ** 3
                    k = max(1, int(round(keep * l.w.size)))
                    thr = np.sort(np.abs(l.w).reshape(-1))[::-1][k - 1]
                    m[...] = np.abs(l.w) >= thr
                    l.w *= m
        order = rng.permutation(len(x))
        step = lr * (0.5 * (1 + np.cos(np.pi * ep / epochs)))  # cosine decay
        for s in range(0, len(x), batch):
            idx = order[s:s + batch]
            logits = net.forward(x[idx])
            p = np.exp(logits - logits.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            p[np.arange(len(idx)), y[idx]] -= 1
            net.backward(p / len(idx))
            t += 1
            for l, m, st in zip(net.params, net.masks, state):
                for j, (param, grad) in enumerate(((l.w, l.dw * m + 1e-4 * l.w), (l.b, l.db))):
                    st[j] = 0.9 * st[j] + 0.1 * grad
                    st[j + 2] = 0.999 * st[j + 2] + 0.001 * grad * grad
                    mh = st[j] / (1 - 0.9 ** t)
                    vh = st[j + 2] / (1 - 0.999 ** t)
                    param -= (step * mh / (np.sqrt(vh) + 1e-8)).astype(np.float32)
                l.w *= m


# --- export --------------------------------------------------------------------------------
def export(net: Net, kind: str, path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []
    cur, k = "image", 0
    for l in net.layers:
        out = f"t{k}"
        if isinstance(l, Conv):
            inits += [numpy_helper.from_array(l.w, f"conv{k}.w"), numpy_helper.from_array(l.b, f"conv{k}.b")]
            nodes.append(helper.make_node("Conv", [cur, f"conv{k}.w", f"conv{k}.b"], [out],
                                          name=f"conv{k}", kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
        elif isinstance(l, Dense):
            inits += [numpy_helper.from_array(l.w, f"fc{k}.w"), numpy_helper.from_array(l.b, f"fc{k}.b")]
            nodes.append(helper.make_node("Gemm", [cur, f"fc{k}.w", f"fc{k}.b"], [out],
                                          name=f"fc{k}", transB=1))
        elif isinstance(l, Relu):
            nodes.append(helper.make_node("Relu", [cur], [out], name=f"relu{k}"))
        elif isinstance(l, MaxPool2):
            nodes.append(helper.make_node("MaxPool", [cur], [out], name=f"pool{k}",
                                          kernel_shape=[2, 2], strides=[2, 2]))
        elif isinstance(l, Flatten):
            nodes.append(helper.make_node("Flatten", [cur], [out], name=f"flatten{k}"))
        cur, k = out, k + 1
    nodes[-1].output[0] = "logits"
    graph = helper.make_graph(
        nodes, f"digits_{kind}",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="snpu examples/digits/train.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    tmp = path.with_suffix(".tmp")
    onnx.save(model, str(tmp))
    tmp.replace(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).parent))
    args = ap.parse_args()
    xtr, ytr, xte, yte = split()
    report = {}
    for kind, make, targets in (("cnn", cnn, [0.5, 0.2, 0.2, 0.2]), ("mlp", mlp, [0.15, 0.15, 0.15])):
        rng = np.random.default_rng(0)
        net = make(rng)
        train(net, xtr, ytr, rng, epochs=30, lr=3e-3)
        dense_acc = net.accuracy(xte, yte)
        train(net, xtr, ytr, rng, epochs=40, lr=1e-3, targets=targets, prune_epochs=(0, 25))
        dens = {f"layer{k}": float(np.count_nonzero(l.w)) / l.w.size for k, l in enumerate(net.params)}
        total = sum(np.count_nonzero(l.w) for l in net.params) / sum(l.w.size for l in net.params)
        export(net, kind, Path(args.out) / f"digits_{kind}.onnx")
        report[kind] = {"float_test_accuracy_dense": dense_acc,
                        "float_test_accuracy_pruned": net.accuracy(xte, yte),
                        "weight_density": dens, "weight_density_overall": float(total),
                        "test_images": len(xte)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
