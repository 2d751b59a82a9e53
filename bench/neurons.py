"""Benchmark of the neuron-side sparsity settings (seed 000 claims 5, 9-11) on the digits
models: the sparse processing unit's threshold, neuron group pruning, and the two mixed
direct x stride paths.

    .venv/bin/python bench/neurons.py [--rtl-images 8] [--models digits_cnn,digits_mlp]

For every setting: int8 accuracy on the 360 test images (golden model, bit-exact with the
int8 reference, checked), MAC pairs as a fraction of dense, golden-model cycles per image,
and RTL cycles per image on the first ``--rtl-images`` images.  Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "examples" / "digits"))
from provenance import provenance  # noqa: E402
from train import split  # noqa: E402

from snpu.compiler import check, runtime  # noqa: E402
from snpu.compiler.passes.neurons import NeuronOptions  # noqa: E402
from snpu.compiler.pipeline import CompileOptions, compile_model  # noqa: E402
from snpu.config import CoreConfig  # noqa: E402

#: (name, weight density of the compile (None: the model's own pruning), neuron options)
SETTINGS = [
    ("baseline (|x| > 0)", None, NeuronOptions()),
    ("threshold 2", None, NeuronOptions(threshold=2)),
    ("threshold 4", None, NeuronOptions(threshold=4)),
    ("threshold 8", None, NeuronOptions(threshold=8)),
    ("threshold 16", None, NeuronOptions(threshold=16)),
    ("groups 4, t3 2, t4 1", None, NeuronOptions(group=4, t3=2, t4=1)),
    ("groups 4, t3 4, t4 2", None, NeuronOptions(group=4, t3=4, t4=2)),
    ("groups 8, t3 4, t4 4", None, NeuronOptions(group=8, t3=4, t4=4)),
    ("threshold 4 + groups 8, t3 4, t4 4", None, NeuronOptions(threshold=4, group=8, t3=4, t4=4)),
    ("5 % weights (stride), mixed: cost model", 0.05, NeuronOptions()),
    ("5 % weights (stride), mixed: expand (claim 9)", 0.05, NeuronOptions(mixed="expand")),
    ("5 % weights (stride), mixed: merge (claim 10)", 0.05, NeuronOptions(mixed="merge")),
]


def measure(model: Path, cfg: CoreConfig, density, opts, data, rtl_images: int) -> dict:
    xtr, _, xte, yte = data
    calib = [{"image": x[None]} for x in xtr[:64]]
    t0 = time.time()
    c = compile_model(model, CompileOptions(config=cfg, calibration=calib, neurons=opts,
                                            density=density or 1.0))
    compile_s = time.time() - t0
    xs = [x[None] for x in xte]
    runs = runtime.run_batch(c, xs, sim="golden")
    agree = check.compare(c, xs, runs, onnxruntime=False)
    if agree.bit_exact != len(xs):
        raise AssertionError(f"{model.name}: golden != int8 reference: {agree.mismatches[:2]}")
    layers = [e for e in c.report["layers"] if e["op"] in ("Conv", "Gemm", "MatMul")]
    out = {
        "accuracy_int8": round(float(np.mean(np.array(agree.run_top1) == yte)), 4),
        "mac_pairs_fraction_of_dense": round(sum(r.mac_pairs for r in runs)
                                             / max(1, sum(r.dense_pairs for r in runs)), 4),
        "golden_cycles_per_image": round(float(np.mean([r.core_cycles for r in runs]))),
        "compile_seconds": round(compile_s, 2),
        "layers": {e["node"]: {k: e.get(k) for k in ("format", "neuron_threshold", "neuron_groups",
                                                     "neuron_density", "mixed_path")}
                   for e in layers},
    }
    if rtl_images:
        rtl = runtime.run_batch(c, xs[:rtl_images], sim="rtl")
        gold = runs[:rtl_images]
        if any(not np.array_equal(r.outputs_int8[k], g.outputs_int8[k])
               for r, g in zip(rtl, gold) for k in g.outputs_int8):
            raise AssertionError(f"{model.name}: RTL != golden")
        out["rtl_cycles_per_image"] = round(float(np.mean([r.core_cycles for r in rtl])))
        out["golden_vs_rtl_cycles"] = round(float(np.mean([g.core_cycles for g in gold]))
                                            / out["rtl_cycles_per_image"], 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="digits_cnn,digits_mlp")
    ap.add_argument("--rtl-images", type=int, default=8)
    args = ap.parse_args()
    cfg = CoreConfig.load(ROOT / "examples" / "digits" / "core.json")
    data = split()
    report = {"benchmark": "neurons", "provenance": provenance(), "core": cfg.to_dict(),
              "test_images": len(data[2]), "models": {}}
    for name in args.models.split(","):
        rows = {}
        for label, density, opts in SETTINGS:
            print(f"{name}: {label} ...", file=sys.stderr, flush=True)
            rows[label] = measure(ROOT / "examples" / "digits" / f"{name}.onnx", cfg, density,
                                  opts, data, args.rtl_images)
        report["models"][name] = rows
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
