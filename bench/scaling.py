"""Benchmark of compiling onto the tiled array (``snpu compile --mesh``).

    .venv/bin/python bench/scaling.py [--quick] [--skip-rtl] [--models a,b]

(The issue asked for ``bench/array.py``; that name would shadow the standard library's
``array`` module for every script in ``bench/``.)

* **Scaling** (golden model): zoo networks (random weights, 50 % weight density, the
  default 16-lane core) compiled for 1, 4 (2x2) and 16 (4x4) cores; cycles of one input to
  the last core's halt, speedup and parallel efficiency (speedup / cores), against a naive
  mapping in the same run (every matrix layer split by output channels over every core,
  row-major placement), and against the same array with one external-memory port for all
  cores (``--memory-ports 1``; the default is one per column).  Also the activation bytes over the network, the DRAM bytes
  (loads, stores, instruction fetch) and the hop traffic of the mapper's placement against
  row-major.
* **Small batch** (golden model): squeezenet with a batch of 4 on 16 cores (4x4): each image
  on its own 4 cores (the default) against one core per image (``--split images``, the
  data-parallel split: 12 cores idle), and against one core running the batch.
* **Throughput mode** (golden model): a stream of 32 inputs through the digits MLP and a
  256-wide MLP on 2x2: a pipeline of stages with resident weights (``--split pipeline``)
  against the data-parallel split (``--split images``), and what ``--split auto`` chose.
* **RTL** (cocotb + Verilator): the digits CNN (``examples/digits``) on one core and on a
  2x2 array: cycles, bit-exactness against the int8 reference, NoC flits, and the golden
  model's cycle estimate against the RTL's (``golden_error``).

Prints one JSON document.
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

from snpu.compiler import check, runtime  # noqa: E402
from snpu.compiler.pipeline import CompileOptions, compile_model  # noqa: E402
from snpu.config import CoreConfig  # noqa: E402

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = ("squeezenet", "inception_v1", "resnet50")
DIGITS = ROOT / "examples" / "digits"


def _one(source, options: CompileOptions, x) -> dict:
    t = time.time()
    c = compile_model(source, options)
    compile_s = time.time() - t
    t = time.time()
    reps = runtime.run_batch(c, [x], check_races=False)
    agree = check.compare(c, [x], reps, onnxruntime=False)
    rep = reps[0]
    out = {"cycles": rep.core_cycles, "bit_exact": agree.bit_exact == 1,
           "compile_s": round(compile_s, 1), "run_s": round(time.time() - t, 1),
           "mac_pairs": rep.mac_pairs}
    arrays = [s for s in rep.segments if s["device"] == "array"]
    if arrays:
        out["noc_flits"] = sum(s["network"]["flits"] for s in arrays)
        out["noc_flit_hops"] = sum(s["network"]["hop_flits"] for s in arrays)
        # every core's loads, stores and fetches (local memory included)
        out["dram_bytes"] = sum(v["dram_bytes"] for s in arrays for v in s["cores"].values())
        # what crossed the external-memory ports (local memory excluded)
        out["port_bytes"] = sum(sum(s.get("port_bytes", ())) for s in arrays)
        busy = [v["mx_busy"] / max(1, s["cycles"]) for s in arrays for v in s["cores"].values()]
        out["mx_utilisation_mean"] = round(float(np.mean(busy)), 3)
        pl = c.report["mesh"]["placement"]
        out["hop_bytes"], out["hop_bytes_row_major"] = pl["hop_bytes"], pl["hop_bytes_row_major"]
        out["memory_ports"] = c.report["mesh"]["memory_ports"]
        out["noc_bytes"] = sum(s["noc"]["data_bytes"] for s in c.segments if "noc" in s)
        kinds: dict[str, int] = {}
        for layer in c.report["layers"]:
            if layer.get("split"):
                key = f"{layer['split']['kind']} x{layer['split']['cores']}"
                kinds[key] = kinds.get(key, 0) + 1
        out["layer_splits"] = kinds
    return out


def scaling(models, meshes) -> dict:
    res = {}
    for name in models:
        src = ZOO / f"light_{name}.onnx"
        base = CompileOptions(density=0.5, random_weights=0)
        g = compile_model(src, base).graph
        x = np.random.default_rng(0).standard_normal(g.tensor(g.inputs[0]).shape).astype(np.float32)
        one = _one(src, base, x)
        rows = {"1x1": one}
        for mesh in meshes:
            n = mesh[0] * mesh[1]
            key = f"{mesh[0]}x{mesh[1]}"
            for variant, extra in (("", {}), (" one port", {"memory_ports": 1}),
                                   (" naive", {"split": "channels", "placement": "row-major"})):
                r = _one(src, CompileOptions(density=0.5, random_weights=0, mesh=mesh, **extra), x)
                r["speedup"] = round(one["cycles"] / r["cycles"], 3)
                r["parallel_efficiency"] = round(r["speedup"] / n, 3)
                rows[key + variant] = r
            rows[key]["gain_over_naive"] = round(rows[key + " naive"]["cycles"] / rows[key]["cycles"], 3)
            print(f"{name} {key}: {rows[key]['speedup']}x (one port "
                  f"{rows[key + ' one port']['speedup']}x, naive {rows[key + ' naive']['speedup']}x)",
                  file=sys.stderr)
        res[name] = rows
    return res


def _batched(name: str, images: int) -> onnx.ModelProto:
    """Zoo model ``name`` with a batch of ``images`` (its input and output's first dimension)."""
    m = onnx.load(str(ZOO / f"light_{name}.onnx"))
    inits = {i.name for i in m.graph.initializer}
    inp = next(i for i in m.graph.input if i.name not in inits)
    for vi in (inp, m.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_value = images
    return m


def small_batch(name: str = "squeezenet", images: int = 4, mesh=(4, 4)) -> dict:
    m = _batched(name, images)
    shape = [d.dim_value for d in next(i for i in m.graph.input if i.name not in
                                       {t.name for t in m.graph.initializer}).type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    key = f"{mesh[0]}x{mesh[1]}"
    out = {"model": name, "images": images,
           "1x1": _one(m, CompileOptions(density=0.5, random_weights=0), x)}
    for variant, split in (("", "auto"), (" images", "images")):
        r = _one(m, CompileOptions(density=0.5, random_weights=0, mesh=mesh, split=split), x)
        r["speedup"] = round(out["1x1"]["cycles"] / r["cycles"], 3)
        r["parallel_efficiency"] = round(r["speedup"] / (mesh[0] * mesh[1]), 3)
        out[key + variant] = r
    out["gain_over_images_only"] = round(out[key + " images"]["cycles"] / out[key]["cycles"], 3)
    print(f"{name} batch {images} {key}: {out[key]['speedup']}x (one core per image "
          f"{out[key + ' images']['speedup']}x)", file=sys.stderr)
    return out


def _mlp(sizes=(256, 256, 256, 256, 10), images: int = 32, seed: int = 0) -> onnx.ModelProto:
    """A stream of ``images`` through a ReLU MLP of ``sizes`` (random weights)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, cur = [], [], "x"
    for k, (a, b) in enumerate(zip(sizes, sizes[1:])):
        w = (rng.standard_normal((b, a)) * np.sqrt(2 / a)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{k}"))
        nodes.append(helper.make_node("Gemm", [cur, f"w{k}"], [f"h{k}"], transB=1))
        cur = f"h{k}"
        if k < len(sizes) - 2:
            nodes.append(helper.make_node("Relu", [cur], [f"r{k}"]))
            cur = f"r{k}"
    nodes.append(helper.make_node("Identity", [cur], ["y"]))
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [images, sizes[0]])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [images, sizes[-1]])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def throughput(images: int = 32, mesh=(2, 2)) -> dict:
    """A stream of inputs (a batch) in throughput mode: the pipeline of stages
    (``--split pipeline``) against the data-parallel split (``--split images``) and what
    ``--split auto`` chooses, on the digits MLP (its own core) and a 256-wide MLP (the
    default core)."""
    cfg = CoreConfig.from_dict(json.loads((DIGITS / "core.json").read_text()))
    digits = onnx.load(str(DIGITS / "digits_mlp.onnx"))
    for vi in (digits.graph.input[0], digits.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_value = images
    out = {}
    for name, m, config in (("digits_mlp", digits, cfg), ("mlp_256x3", _mlp(images=images), CoreConfig())):
        shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        base = dict(config=config, density=0.5)
        row = {"images": images, "1x1": _one(m, CompileOptions(**base), x)}
        key = f"{mesh[0]}x{mesh[1]}"
        for split in ("images", "pipeline", "auto"):
            c = compile_model(m, CompileOptions(**base, mesh=mesh, split=split))
            r = _one(m, CompileOptions(**base, mesh=mesh, split=split), x)
            r["speedup"] = round(row["1x1"]["cycles"] / r["cycles"], 3)
            r["throughput"] = c.report["mesh"].get("throughput")
            r["resident_bytes"] = sum(s.get("resident_bytes", 0) for s in c.segments)
            row[f"{key} {split}"] = r
        row["pipeline_over_data_parallel"] = round(row[f"{key} images"]["cycles"]
                                                   / row[f"{key} pipeline"]["cycles"], 3)
        row["auto_chose"] = row[f"{key} auto"]["throughput"]["chosen"]
        print(f"{name} stream of {images} on {key}: pipeline {row[f'{key} pipeline']['speedup']}x, "
              f"data parallel {row[f'{key} images']['speedup']}x one core; auto: "
              f"{row['auto_chose']}", file=sys.stderr)
        out[name] = row
    return out


def rtl_digits() -> dict:
    cfg = CoreConfig.from_dict(json.loads((DIGITS / "core.json").read_text()))
    src = DIGITS / "digits_cnn.onnx"
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 1, 8, 8)).astype(np.float32) for _ in range(4)]
    out = {}
    for key, mesh in (("1x1", (1, 1)), ("2x2", (2, 2))):
        c = compile_model(src, CompileOptions(config=cfg, mesh=mesh))
        t = time.time()
        reps = runtime.run_batch(c, xs, sim="rtl")
        agree = check.compare(c, xs, reps, onnxruntime=False)
        gold = runtime.run_batch(c, xs)
        out[key] = {"rtl_cycles": [r.core_cycles for r in reps],
                    "golden_cycles": [r.core_cycles for r in gold],
                    "bit_exact": f"{agree.bit_exact}/{len(xs)}", "wall_s": round(time.time() - t)}
        # the golden model's cycle estimate against the RTL (the cost model's error)
        out[key]["golden_error"] = round(float(np.mean(out[key]["golden_cycles"])
                                               / np.mean(out[key]["rtl_cycles"]) - 1), 4)
        arrays = [s for s in reps[0].segments if s["device"] == "array"]
        if arrays:
            out[key]["noc_flits"] = arrays[0]["network"]["flits"]
            out[key]["noc_bytes"] = c.segments[0]["noc"]["data_bytes"]
            out[key]["dram_bytes"] = sum(v["dram_bytes"] for v in arrays[0]["cores"].values())
            pl = c.report["mesh"]["placement"]
            out[key]["hop_bytes"], out[key]["hop_bytes_row_major"] = pl["hop_bytes"], pl["hop_bytes_row_major"]
    out["rtl_speedup"] = round(float(np.mean(out["1x1"]["rtl_cycles"]) / np.mean(out["2x2"]["rtl_cycles"])), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="squeezenet only, 2x2 only")
    ap.add_argument("--skip-rtl", action="store_true")
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    models = ["squeezenet"] if args.quick else args.models.split(",")
    meshes = [(2, 2)] if args.quick else [(2, 2), (4, 4)]
    out = {"benchmark": "compiling onto the tiled array", "provenance": provenance()}
    t0 = time.time()
    out["scaling"] = scaling(models, meshes)
    if not args.quick:
        out["small_batch"] = small_batch()
        out["throughput"] = throughput()
    if not args.skip_rtl:
        out["rtl_digits"] = rtl_digits()
    out["seconds"] = round(time.time() - t0)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
