"""The main job end to end: compile the pruned digits CNN, run it on the RTL, compare.

    .venv/bin/python examples/digits/demo.py [--out build/digits] [--rtl-images 360]
                                             [--dense-images 8] [--array-images 8] [--json]

1. compiles ``examples/digits/digits_cnn.onnx`` (trained and pruned to ~20 % weight density
   by ``train.py``) for the core in ``core.json``, calibrated on 64 training images, and a
   dense-mode build of the same model (no index, no activation threshold: the baseline);
2. runs the 360 test images of scikit-learn's digits on the golden model and checks every
   output bit for bit against the compiler's int8 reference;
3. runs them on the RTL (Verilator via cocotb; the testbench also checks external memory
   and counters against the golden model after every image);
4. runs a few images in dense mode on the RTL for the sparse speedup;
5. compiles the same model for a 2x2 tiled array (``--mesh 2x2``: layers split across four
   cores, activations moved core to core over the network), checks every test image on the
   multi-core golden model and a few on the RTL array, for the array's speedup;
6. prints accuracy (float on onnxruntime, int8 on the golden model, RTL), cycles per image
   and the speedup, and exits non-zero on any mismatch.

The same with the CLI (after this script wrote the test set)::

    snpu compile examples/digits/digits_cnn.onnx -o build/digits/digits_cnn --core examples/digits/core.json \\
        --calibration build/digits/calibration.npy
    snpu run build/digits/digits_cnn --sim rtl --input build/digits/test_images.npy \\
        --labels build/digits/test_labels.npy
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from train import split  # noqa: E402

from snpu.compiler import check, runtime  # noqa: E402
from snpu.compiler.pipeline import CompileOptions, compile_model  # noqa: E402
from snpu.config import CoreConfig  # noqa: E402
from snpu.fileio import atomic_write  # noqa: E402


def _save_npy(path: Path, a: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, a)
    atomic_write(path, buf.getvalue())


def _accuracy(top1: list[int], labels: np.ndarray) -> float:
    return float(np.mean(np.asarray(top1) == labels[:len(top1)]))


def evaluate(model: str | Path, cfg: CoreConfig, out: Path, *, rtl_images: int = 360,
             dense_images: int = 8, array_images: int = 8, say=print) -> tuple[dict, bool]:
    """Compile ``model`` (sparse and dense mode), run the digits test split on the golden
    model and ``rtl_images`` of it on the RTL; return (figures, every run bit-exact)."""
    xtr, _, xte, yte = split()
    _save_npy(out / "calibration.npy", xtr[:64])
    _save_npy(out / "test_images.npy", xte)
    _save_npy(out / "test_labels.npy", yte)
    calib = [{"image": x[None]} for x in xtr[:64]]
    stem = Path(model).stem

    t = time.time()
    sparse = compile_model(model, CompileOptions(config=cfg, calibration=calib))
    t_compile = time.time() - t
    dense = compile_model(model, CompileOptions(config=cfg, calibration=calib, dense=True))
    sparse.save(out / stem)
    dense.save(out / f"{stem}_dense")
    rep = sparse.report
    layers = [l for l in rep["layers"] if "density" in l]
    say(f"{Path(model).name}: {rep['ops_on_core']} ops on the core, {rep['ops_on_host']} "
        f"on the host; compiled in {t_compile:.2f} s -> {out / stem}/ "
        f"({rep['segments'][0]['instructions']} instructions)")
    say("  layers: " + ", ".join(f"{l['node']} {l['format']} {100 * l['density']:.0f} %" for l in layers))
    xs = [x[None] for x in xte]

    t = time.time()
    golden = runtime.run_batch(sparse, xs, sim="golden")
    t_golden = time.time() - t
    agree = check.compare(sparse, xs, golden)
    figures = {
        "model": Path(model).name, "core": cfg.to_dict(), "test_images": len(xs),
        "compile_seconds": round(t_compile, 3),
        "weight_density": {l["node"]: round(l["density"], 4) for l in layers},
        "accuracy_float_onnxruntime": _accuracy(agree.reference_top1, yte),
        "accuracy_int8_golden": _accuracy(agree.run_top1, yte),
        "golden_bit_exact_vs_int8_reference": f"{agree.bit_exact}/{len(xs)}",
        "top1_agreement_golden_vs_onnxruntime": agree.top1_agree / len(xs),
        "golden_cycles_per_image_estimate": float(np.mean([r.core_cycles for r in golden])),
        "golden_seconds": round(t_golden, 2),
    }
    ok = agree.bit_exact == len(xs)

    n = min(rtl_images, len(xs))
    if n:
        say(f"running {n} test images on the RTL ({cfg.lanes} lanes; the first run builds "
            "the Verilator model, a few minutes) ...")
        t = time.time()
        rtl = runtime.run_batch(sparse, xs[:n], sim="rtl")  # raises on any RTL/golden mismatch
        t_rtl = time.time() - t
        rtl_top1 = [check.top1(r.outputs["logits"]) for r in rtl]
        same = sum(np.array_equal(r.outputs_int8["logits"], g.outputs_int8["logits"])
                   for r, g in zip(rtl, golden))
        ok &= same == n
        cycles = [r.core_cycles for r in rtl]
        figures.update({
            "rtl_images": n, "accuracy_rtl": _accuracy(rtl_top1, yte),
            "rtl_bit_exact_vs_golden": f"{same}/{n}",
            "rtl_cycles_per_image": float(np.mean(cycles)),
            "rtl_mac_pairs_fraction_of_dense": sum(r.mac_pairs for r in rtl) / sum(r.dense_pairs for r in rtl),
            "rtl_seconds": round(t_rtl, 1)})
        m = min(dense_images, n)
        if m:
            drtl = runtime.run_batch(dense, xs[:m], sim="rtl")
            dcyc = float(np.mean([r.core_cycles for r in drtl]))
            figures["rtl_dense_mode_cycles_per_image"] = dcyc
            figures["sparse_speedup_rtl"] = round(dcyc / float(np.mean(cycles[:m])), 3)
            figures["sparse_speedup_ideal"] = round(
                sum(r.dense_pairs for r in rtl[:m]) / sum(r.mac_pairs for r in rtl[:m]), 3)
    if array_images:
        ok &= _array(model, cfg, calib, xs, golden, figures, out, array_images, say,
                     rtl_cycles=[r.core_cycles for r in rtl] if n else None)
    return figures, ok


def _array(model, cfg, calib, xs, golden, figures, out, images, say, rtl_cycles) -> bool:
    """The model on a 2x2 array: every image on the golden model, ``images`` on the RTL."""
    arr = compile_model(model, CompileOptions(config=cfg, calibration=calib, mesh=(2, 2)))
    arr.save(out / f"{Path(model).stem}_2x2")
    g2 = runtime.run_batch(arr, xs, sim="golden")
    agree = check.compare(arr, xs, g2, onnxruntime=False)
    same_as_one = sum(np.array_equal(a.outputs_int8["logits"], b.outputs_int8["logits"])
                      for a, b in zip(g2, golden))
    ok = agree.bit_exact == len(xs) and same_as_one == len(xs)
    figures.update({
        "array_golden_bit_exact_vs_int8_reference": f"{agree.bit_exact}/{len(xs)}",
        "array_golden_cycles_per_image_estimate": float(np.mean([r.core_cycles for r in g2])),
        "array_noc_bytes": arr.segments[0]["noc"]["data_bytes"],
        "array_hop_bytes": arr.report["mesh"]["placement"]["hop_bytes"],
        "array_hop_bytes_row_major": arr.report["mesh"]["placement"]["hop_bytes_row_major"]})
    say(f"running {images} test images on a 2x2 array on the RTL (the first run builds the "
        "array's Verilator model, a few minutes) ...")
    rtl = runtime.run_batch(arr, xs[:images], sim="rtl")  # raises on any RTL/golden mismatch
    same = sum(np.array_equal(r.outputs_int8["logits"], g.outputs_int8["logits"])
               for r, g in zip(rtl, g2))
    ok &= same == len(rtl)
    cycles = [r.core_cycles for r in rtl]
    figures.update({"array_rtl_images": len(rtl), "array_rtl_bit_exact_vs_golden": f"{same}/{len(rtl)}",
                    "array_rtl_cycles_per_image": float(np.mean(cycles))})
    if rtl_cycles:
        figures["array_speedup_rtl"] = round(float(np.mean(rtl_cycles[:len(rtl)]) / np.mean(cycles)), 3)
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(HERE / "digits_cnn.onnx"))
    ap.add_argument("--core", default=str(HERE / "core.json"))
    ap.add_argument("--out", default="build/digits")
    ap.add_argument("--rtl-images", type=int, default=360, help="test images run on the RTL")
    ap.add_argument("--dense-images", type=int, default=8,
                    help="images run in dense mode on the RTL (speedup baseline)")
    ap.add_argument("--array-images", type=int, default=8,
                    help="images run on a 2x2 array on the RTL (0: skip the array)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    say = (lambda *a: None) if args.json else print
    figures, ok = evaluate(args.model, CoreConfig.load(args.core), Path(args.out),
                           rtl_images=args.rtl_images, dense_images=args.dense_images,
                           array_images=args.array_images, say=say)
    if args.json:
        print(json.dumps(figures, indent=1))
    else:
        _print(figures)
        print("match" if ok else "MISMATCH")
    return 0 if ok else 1


def _print(f: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{f['model']}, {f['test_images']} test images")
    for col in ("run", "accuracy", "agreement", "cycles / image"):
        t.add_column(col, justify="left" if col == "run" else "right")
    t.add_row("float, onnxruntime", f"{100 * f['accuracy_float_onnxruntime']:.1f} %", "", "")
    t.add_row("int8, golden model", f"{100 * f['accuracy_int8_golden']:.1f} %",
              f"{f['golden_bit_exact_vs_int8_reference']} bit-exact vs int8 reference",
              f"{f['golden_cycles_per_image_estimate']:.0f} (estimate)")
    if "accuracy_rtl" in f:
        t.add_row(f"int8, RTL ({f['core']['lanes']} lanes)", f"{100 * f['accuracy_rtl']:.1f} %"
                  + (f" (first {f['rtl_images']})" if f["rtl_images"] < f["test_images"] else ""),
                  f"{f['rtl_bit_exact_vs_golden']} bit-exact vs golden",
                  f"{f['rtl_cycles_per_image']:.0f}")
    if "rtl_dense_mode_cycles_per_image" in f:
        t.add_row("int8, RTL, dense mode", "", "", f"{f['rtl_dense_mode_cycles_per_image']:.0f}")
    if "array_golden_cycles_per_image_estimate" in f:
        t.add_row("int8, golden model, 2x2 array", "",
                  f"{f['array_golden_bit_exact_vs_int8_reference']} bit-exact vs int8 reference",
                  f"{f['array_golden_cycles_per_image_estimate']:.0f} (estimate)")
    if "array_rtl_cycles_per_image" in f:
        t.add_row("int8, RTL, 2x2 array", f"(first {f['array_rtl_images']})",
                  f"{f['array_rtl_bit_exact_vs_golden']} bit-exact vs golden",
                  f"{f['array_rtl_cycles_per_image']:.0f}")
    Console(width=max(Console().width, 100)).print(t)
    if "sparse_speedup_rtl" in f:
        print(f"sparse speedup on the RTL: {f['sparse_speedup_rtl']:.2f}x over dense mode "
              f"(MAC pairs {100 * f['rtl_mac_pairs_fraction_of_dense']:.1f} % of dense: "
              f"ideal {f['sparse_speedup_ideal']:.2f}x)")
    if "array_speedup_rtl" in f:
        print(f"2x2 array on the RTL: {f['array_speedup_rtl']:.2f}x over one core "
              f"({f['array_noc_bytes']} activation bytes over the network per image)")


if __name__ == "__main__":
    sys.exit(main())
