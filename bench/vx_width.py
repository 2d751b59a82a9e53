"""What a VX unit narrower than the MAC lanes costs in cycles (``CoreConfig.vx_lanes``).

    .venv/bin/python bench/vx_width.py [--models squeezenet,resnet50] [--widths 16,8,4,2]
                                       [--density 0.5]

Prints one JSON document: for each network of the onnx wheel's model zoo named (random
seeded weights pruned to ``--density``, calibrated on 8 seeded inputs) and for the trained,
pruned digits CNN (``examples/digits``), compiled for the default 16-lane core with each
VX width: the golden model's core cycles for one seeded input and their ratio to the full
width's.  The synthesis side (LUTs, multipliers) is in
``bench/results/core_synth_lanes16.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import provenance  # noqa: E402

from snpu.compiler import runtime  # noqa: E402
from snpu.compiler.pipeline import CompileOptions, compile_model  # noqa: E402
from snpu.config import CoreConfig  # noqa: E402

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
DIGITS = ROOT / "examples" / "digits"


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def measure(name: str, model, widths: list[int], x=None, **options) -> dict:
    """Compile ``model`` for the default core at every VX width; one input ``x`` (seeded
    normal in the model's input shape if none) on the golden model."""
    out = {}
    for v in widths:
        t = time.time()
        c = compile_model(model, CompileOptions(config=CoreConfig(vx_lanes=v), **options))
        if x is None:
            g = c.graph
            x = np.random.default_rng(99).standard_normal(g.tensor(g.inputs[0]).shape)
            x = x.astype(np.float32)
        r = runtime.run_batch(c, [x], check_races=False)[0]
        out[str(v)] = {"core_cycles": int(r.core_cycles), "seconds": round(time.time() - t, 1)}
        _log(f"{name}: vx_lanes {v}: {out[str(v)]}")
    full = out[str(max(widths))]["core_cycles"]
    for v in widths:
        out[str(v)]["cycles_vs_full_width"] = round(out[str(v)]["core_cycles"] / full, 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="squeezenet,shufflenet,inception_v1,resnet50,densenet121")
    ap.add_argument("--widths", default="16,8,4,2")
    ap.add_argument("--density", type=float, default=0.5)
    ap.add_argument("--no-digits", action="store_true")
    a = ap.parse_args()
    widths = sorted({int(w) for w in a.widths.split(",")}, reverse=True)
    res = {}
    for name in [m for m in a.models.split(",") if m]:
        res[name] = measure(name, ZOO / f"light_{name}.onnx", widths, random_weights=0,
                            density=a.density, calibration_count=8)
    if not a.no_digits:
        sys.path.insert(0, str(DIGITS))
        from train import split
        xtr, _, xte, _ = split()
        res["digits_cnn"] = measure("digits_cnn", DIGITS / "digits_cnn.onnx", widths,
                                    xte[0][None],
                                    calibration=[{"image": x[None]} for x in xtr[:16]])
    print(json.dumps({"benchmark": "vx_width", "provenance": provenance(),
                      "config": dataclasses.asdict(CoreConfig()), "density": a.density,
                      "models": res}, indent=1))


if __name__ == "__main__":
    main()
