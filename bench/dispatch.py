"""Benchmark of seed 004's dispatch: a batch of inputs through models whose subgraphs
alternate between the core (golden model) and the host (onnxruntime), run segment by
segment and pipelined across the two devices.

    .venv/bin/python bench/dispatch.py [--inputs 8] [--repeats 3]

For every model: wall seconds per input each way (best of ``--repeats``) -- segment by
segment, pipelined, and the runtime's own choice (``auto``: pipelined only where the
first input's busy times say it helps) -- each device's busy seconds per input, the
pipelined speedup, and its bound (core + host busy over the larger of the two).  Prints
one JSON document.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import provenance  # noqa: E402

from snpu.compiler import check, runtime  # noqa: E402
from snpu.compiler.pipeline import CompileOptions, compile_model  # noqa: E402


def _model(name, nodes, x_shape, y_shape, inits, opset=17):
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _w(rng, name, *shape):
    fan = int(np.prod(shape[1:]))
    return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(fan)).astype(np.float32), name)


def decoder(rng):
    """Encoder convs on the core, nearest upsampling + sigmoid gating on the host, twice."""
    nodes, inits = [], []
    x, c, h = "x", 3, 16
    for k in range(2):
        nodes += [helper.make_node("Conv", [x, f"w{k}"], [f"c{k}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{k}"], [f"r{k}"]),
                  helper.make_node("Resize", [f"r{k}", "", "scales"], [f"u{k}"], mode="nearest"),
                  helper.make_node("Sigmoid", [f"u{k}"], [f"s{k}"]),
                  helper.make_node("Mul", [f"u{k}", f"s{k}"], [f"g{k}"]),
                  helper.make_node("MaxPool", [f"g{k}"], [f"m{k}"], kernel_shape=[2, 2], strides=[2, 2])]
        inits.append(_w(rng, f"w{k}", 16, c, 3, 3))
        x, c = f"m{k}", 16
    nodes += [helper.make_node("Conv", [x, "wo"], ["y"], pads=[1, 1, 1, 1])]
    inits += [_w(rng, "wo", 4, 16, 3, 3),
              numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")]
    return _model("decoder", nodes, [1, 3, h, h], [1, 4, h, h], inits)


def mixer(rng):
    """A token mixer: per-token Gemm on the core, LayerNormalization, GELU-like (Erf) and
    Softmax attention weights on the host."""
    t, d = 32, 64
    nodes = [helper.make_node("Gemm", ["x", "w1"], ["a"], transB=1),
             helper.make_node("LayerNormalization", ["a", "s", "o"], ["l"]),
             helper.make_node("Erf", ["l"], ["e"]),
             helper.make_node("Softmax", ["e"], ["p"], axis=1),
             helper.make_node("Gemm", ["p", "w2"], ["b"], transB=1),
             helper.make_node("Relu", ["b"], ["r"]),
             helper.make_node("Gemm", ["r", "w3"], ["y"], transB=1)]
    inits = [_w(rng, "w1", d, d), _w(rng, "w2", d, d), _w(rng, "w3", 10, d),
             numpy_helper.from_array(np.ones(d, np.float32), "s"),
             numpy_helper.from_array(np.zeros(d, np.float32), "o")]
    return _model("mixer", nodes, [t, d], [t, 10], inits)


def dilated(rng):
    """Context module: small convolutions on the core around wide dilated convolutions,
    which the core does not run (host) -- the host's share is large here."""
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "wd"], ["d"], pads=[4, 4, 4, 4], dilations=[4, 4]),
             helper.make_node("Relu", ["d"], ["rd"]),
             helper.make_node("Conv", ["rd", "wd2"], ["d2"], pads=[8, 8, 8, 8], dilations=[8, 8]),
             helper.make_node("Relu", ["d2"], ["rd2"]),
             helper.make_node("Conv", ["rd2", "w1"], ["y"])]
    inits = [_w(rng, "w0", 8, 3, 3, 3), _w(rng, "wd", 128, 8, 3, 3), _w(rng, "wd2", 128, 128, 3, 3),
             _w(rng, "w1", 4, 128, 1, 1)]
    return _model("dilated", nodes, [1, 3, 48, 48], [1, 4, 48, 48], inits)


MODELS = {"decoder": decoder, "mixer": mixer, "dilated": dilated}


def measure(name: str, inputs: int, repeats: int) -> dict:
    m = MODELS[name](np.random.default_rng(0))
    onnx.checker.check_model(m)
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(inputs)]
    c = compile_model(m, CompileOptions(calibration=[{"x": x} for x in xs[:4]]))
    out = {"model": name, "segments": [s["kind"] for s in c.segments],
           "host_ops": c.report["host_ops"], "ops_on_core": c.report["ops_on_core"]}
    for mode, overlap in (("segment_by_segment", False), ("pipelined", True), ("auto", None)):
        best = None
        for _ in range(repeats):
            reps = runtime.run_batch(c, xs, overlap=overlap)
            d = reps[0].dispatch
            if best is None or d["wall_seconds"] < best["wall_seconds"]:
                best = d
        agree = check.compare(c, xs, reps, onnxruntime=False)
        assert agree.bit_exact == inputs, agree.mismatches
        out[mode] = {"pipelined": best["pipelined"],
                     "wall_s_per_input": round(best["wall_seconds"] / inputs, 5),
                     "busy_s_per_input": {k: round(v / inputs, 5) for k, v in best["busy_seconds"].items()}}
    seq, pip = out["segment_by_segment"], out["pipelined"]
    busy = pip["busy_s_per_input"]
    out["pipelined_speedup"] = round(seq["wall_s_per_input"] / pip["wall_s_per_input"], 3)
    out["speedup_bound"] = round(sum(busy.values()) / max(busy.values()), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    print(json.dumps({"benchmark": "dispatch", "provenance": provenance(),
                      "inputs": a.inputs,
                      "models": [measure(n, a.inputs, a.repeats) for n in MODELS]}, indent=1))


if __name__ == "__main__":
    main()
