"""Benchmark of the compiler (issue: compiler v1).

    .venv/bin/python bench/compiler.py [--models squeezenet,resnet50] [--rtl-images 360]
                                       [--no-zoo] [--no-digits]

Prints one JSON document:

* ``zoo``: for each network of the onnx wheel's model zoo (``onnx/backend/test/data/light``),
  at its own input size on the default core (16 lanes):
  - ``structure``: compiled with its own weights (ConstantOfShape placeholders), as
    shipped: compile seconds (target: every model <= 30 s), ops on the core / host, the
    host op types; ROM words with hardware loops and the instructions dispatched (what the
    ROM held before loops: target ROM <= 1/20 of it), and the same compile without loops
    (``--no-loops`` compile seconds);
  - ``numerics``: the same architecture with seeded Kaiming-normal weights, unpruned,
    calibrated on 8 seeded normal inputs, one other seeded input run on the golden model:
    bit-exact against the int8 reference, top-1 agreement and max error against
    onnxruntime on the float model;
  - ``sparse``: random weights pruned to density 0.5: golden-model cycles and MAC pairs
    against dense, and the ROM words;
  - ``speed``: the same compiled with ``--optimize speed`` (tokens decided from what each
    unit took itself only): ROM words and golden-model cycles, and both as fractions of
    ``sparse``'s (the default, ``--optimize size``).
* ``digits``: the trained, pruned digits CNN and MLP (``examples/digits``): float accuracy
  on onnxruntime, int8 accuracy on the golden model and on the RTL, cycles, sparse speedup
  on the RTL over dense mode.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import provenance  # noqa: E402
sys.path.insert(0, str(ROOT / "examples" / "digits"))

from demo import evaluate  # noqa: E402

from snpu.compiler import check, runtime  # noqa: E402
from snpu.compiler.pipeline import CompileOptions, compile_model  # noqa: E402
from snpu.config import CoreConfig  # noqa: E402

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
          "shufflenet", "squeezenet", "vgg19", "zfnet512"]


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def zoo_model(name: str) -> dict:
    path = ZOO / f"light_{name}.onnx"
    t = time.time()
    c = compile_model(path)
    rep = c.report
    seconds = round(time.time() - t, 2)
    t = time.time()
    unrolled = compile_model(path, CompileOptions(loops=False))
    rom = sum(s.get("instructions", 0) for s in rep["segments"])
    dispatched = sum(s.get("dispatched_instructions", 0) for s in rep["segments"])
    out = {"structure": {
        "compile_seconds": seconds,
        "compile_seconds_without_loops": round(time.time() - t, 2),
        "ops_on_core": rep["ops_on_core"], "ops_on_host": rep["ops_on_host"],
        "host_ops": rep["host_ops"],
        "rom_words": rom, "dispatched_instructions": dispatched,
        "rom_words_without_loops": sum(s.get("instructions", 0)
                                       for s in unrolled.report["segments"]),
        "rom_fraction_of_unrolled": round(rom / max(1, dispatched), 4),
        "segments": len(rep["segments"]),
        "pass_seconds": rep["pass_seconds"]}}
    _log(f"{name}: structure compiled in {out['structure']['compile_seconds']} s")
    g = c.graph
    x = [np.random.default_rng(99).standard_normal(g.tensor(g.inputs[0]).shape).astype(np.float32)]
    for kind, density, optimize in (("numerics", 1.0, "size"), ("sparse", 0.5, "size"),
                                    ("speed", 0.5, "speed")):
        t = time.time()
        c = compile_model(path, CompileOptions(random_weights=0, density=density, calibration_count=8,
                                               optimize=optimize))
        tc = time.time() - t
        t = time.time()
        reps = runtime.run_batch(c, x, check_races=False)
        tg = time.time() - t
        a = check.compare(c, x, reps, onnxruntime=(kind == "numerics"))
        r = reps[0]
        out[kind] = {"compile_seconds": round(tc, 2), "golden_seconds": round(tg, 2),
                     **a.to_dict(), "golden_core_cycles": r.core_cycles,
                     "mac_pairs": r.mac_pairs, "dense_pairs": r.dense_pairs,
                     "rom_words": sum(s.get("instructions", 0) for s in c.report["segments"])}
        out[kind].pop("mismatches", None)
        if a.mismatches:
            out[kind]["mismatches"] = a.mismatches[:3]
        _log(f"{name}: {kind} done ({tc:.1f} s compile, {tg:.1f} s golden)")
    out["sparse"]["mac_pairs_fraction_of_dense"] = round(
        out["sparse"]["mac_pairs"] / max(1, out["sparse"]["dense_pairs"]), 4)
    for key in ("golden_core_cycles", "rom_words"):
        out["speed"][f"{key}_vs_size"] = round(out["speed"][key] / max(1, out["sparse"][key]), 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--rtl-images", type=int, default=360)
    ap.add_argument("--no-zoo", action="store_true")
    ap.add_argument("--no-digits", action="store_true")
    ap.add_argument("--out", default="build/bench_compiler")
    args = ap.parse_args()
    figures: dict = {"benchmark": "compiler", "provenance": provenance(),
                     "core_default": CoreConfig().to_dict()}
    if not args.no_zoo:
        figures["zoo"] = {m: zoo_model(m) for m in args.models.split(",") if m}
    if not args.no_digits:
        figures["digits"] = {}
        cfg = CoreConfig.load(ROOT / "examples" / "digits" / "core.json")
        for m in ("digits_cnn", "digits_mlp"):
            f, ok = evaluate(ROOT / "examples" / "digits" / f"{m}.onnx", cfg, Path(args.out),
                             rtl_images=args.rtl_images, say=_log)
            f["all_bit_exact"] = ok
            figures["digits"][m] = f
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
