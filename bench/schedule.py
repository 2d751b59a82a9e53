"""Benchmark of seed 002 (issue 12): the cost model against the RTL, and program orders.

    .venv/bin/python bench/schedule.py [--quick] [--no-rtl]

Prints one JSON document (every figure measured in this run):

* ``calibration.instructions``: steady-state cycles of one instruction (five back-to-back
  copies minus one) on the RTL and in the golden model's timing, per instruction kind and
  shape (the RTL tests' 4-lane core), and their relative error;
* ``calibration.layer_kinds``: one model per core layer kind (``examples/layer_models.py``):
  golden cycles vs RTL cycles;
* ``calibration.models``: the digits CNN on one core and on a 2x2 array, and a branchy
  network: golden vs RTL cycles; and the compiler's estimate (neuron densities instead of
  activations, :mod:`snpu.compiler.cost`) vs the golden model;
* ``orders``: per model -- inception_v1, inception_v2, densenet121 and squeezenet from the
  onnx wheel, generated branchy networks (``examples/branchy.py``) -- the golden cycles on a
  real input of the file order, the list scheduler's order (``--schedule greedy``) and the
  searched order (``--schedule search``), and the compile seconds of each;
* ``rtl_orders``: the RTL cycles of one branchy network under the file and the searched
  order;
* ``split``: per model, the nodes the default threshold (the core's on-chip memory) splits
  and the golden cycles with and without splitting.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import provenance  # noqa: E402
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import branchy  # noqa: E402
import layer_models  # noqa: E402
from snpu.compiler import runtime  # noqa: E402
from snpu.compiler.passes.codegen import units  # noqa: E402
from snpu.compiler.passes.schedule import ScheduleOptions, KernelTimer  # noqa: E402
from snpu.compiler.pipeline import CompileOptions, compile_model  # noqa: E402
from snpu.config import CoreConfig  # noqa: E402
from snpu.verif import act_compress, golden, layout, numerics, progen  # noqa: E402
from snpu.verif.index import FORMAT_CODES as FMT  # noqa: E402
from snpu.verif.program import Program  # noqa: E402
from snpu.config import SMALL_CORE as TEST_CORE  # noqa: E402

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _err(model: float, rtl: float) -> float:
    return round((model - rtl) / rtl, 4) if rtl else 0.0


# ---------------------------------------------------------------------------------------------
# instruction calibration


def _instruction_cases(cfg: CoreConfig):
    """(name, setup, body): ``body`` emits one instruction, repeated back to back."""
    P = cfg.lanes

    def ld(buf, rows, cols, off):
        def setup(p):
            a = p.data("x", np.ones(rows * (cols + 16) + 64, np.int8))
            p.cfgs(ld__ext_stride=cols + (8 if off else 0), ld__dst_stride=cols)
            return a
        return setup, lambda p, a: p.emit("ld", buf=buf, ext=a + off, dst=0, rows=rows, cols=cols)

    def st(rows, cols, off):
        def setup(p):
            a = p.space("y", (rows * (cols + 16) + 64,))
            p.cfgs(st__ext_stride=cols + (8 if off else 0), st__src_stride=cols)
            return a
        return setup, lambda p, a: p.emit("st", src=0, ext=a + off, rows=rows, cols=cols)

    def stc(rows, cols, density):
        pitch = -(-cols // max(P, 8)) * max(P, 8)

        def setup(p):  # the rows into the output cache: ld, identity req, then sync
            x = progen.sparse_int8(np.random.default_rng(rows * cols), (rows, cols), density)
            prm = numerics.pack_params(np.zeros(pitch, np.int64), np.ones(pitch, np.int64),
                                       np.zeros(pitch, np.int64))
            p.emit("ld", buf="param", ext=p.data("prm", prm, "params"), dst=0, cols=prm.size)
            p.cfgs(ld__ext_stride=cols, ld__dst_stride=pitch, vx__src_stride=pitch,
                   vx__dst_stride=pitch, st__src_stride=pitch)
            p.emit("ld", buf="acc", ext=p.data("x", x), dst=0, rows=rows, cols=cols)
            p.emit("sync")
            p.emit("req", dst=0, src=0, param=0, n_o=rows, n_i=pitch // P)
            p.emit("sync")
            return p.space("y", (act_compress.stream_bound(rows, cols),), align=8)
        return setup, lambda p, a: p.emit("stc", src=0, ext=a, rows=rows, cols=cols)

    def ldc(rows, cols, density):
        def setup(p):
            x = progen.sparse_int8(np.random.default_rng(rows * cols), (rows, cols), density)
            p.cfgs(ld__dst_stride=-(-cols // 8) * 8)
            return p.data("s", np.frombuffer(act_compress.encode_stream(x), np.uint8), align=8)
        return setup, lambda p, a: p.emit("ldc", buf="acc", dst=0, ext=a, rows=rows, cols=cols)

    def vx(op, n_o, n_i, k=(1, 1)):
        def setup(p):
            p.cfgs(vx__k1_stride=P * n_i, vx__k2_stride=P * n_i * k[0], vx__src_stride=P * n_i,
                   vx__b_stride=P * n_i, vx__dst_stride=P * n_i)
        args = {"vred": dict(mode=1, dst=768, src=0, k1=k[0], k2=k[1]),
                "vew": dict(dst=512, a=0, b=256, ma=1, mb=1),
                "req": dict(dst=0, src=0, param=0, relu=0)}[op]
        return setup, lambda p, _: p.emit(op, n_o=n_o, n_i=n_i, **args)

    for rows, cols, off in itertools.product((1, 16, 64), (8, 24, 64, 128), (0, 3)):
        if rows * cols <= 1024:
            yield f"ld acc {rows}x{cols}{' unaligned' if off else ''}", *ld("acc", rows, cols, off)
        if rows * cols <= 2048:
            yield f"ld nbuf {rows}x{cols}{' unaligned' if off else ''}", *ld("nbuf", rows, cols, off)
            yield f"st {rows}x{cols}{' unaligned' if off else ''}", *st(rows, cols, off)
    for rows, cols, density in ((1, 64, 0.3), (8, 64, 0.3), (8, 64, 1.0), (4, 120, 0.5),
                                (16, 24, 0.3)):
        yield f"stc {rows}x{cols} d={density}", *stc(rows, cols, density)
        yield f"ldc acc {rows}x{cols} d={density}", *ldc(rows, cols, density)
    for n_o, n_i, k in ((1, 4, (3, 3)), (32, 1, (1, 1)), (8, 1, (9, 1))):
        yield f"vred {n_o}x{n_i} k={k[0]}x{k[1]}", *vx("vred", n_o, n_i, k)
    for n_o, n_i in ((16, 1), (4, 8)):
        yield f"vew {n_o}x{n_i}", *vx("vew", n_o, n_i)
        yield f"req {n_o}x{n_i}", *vx("req", n_o, n_i)


def _fc_program(cfg, x, w, wfmt, mixed):
    P = cfg.lanes
    V, N = x.shape
    M = w.shape[0]
    p = Program(cfg, mem_bytes=1 << 18, rom_bytes=1 << 12)
    nstride = -(-N // 64) * 64
    p.cfgs(ld__nidx_mode=1, ld__thresh=0, ld__ext_stride=N, ld__dst_stride=nstride)
    p.emit("ld", buf="nbuf", ext=p.data("x", x), dst=0, rows=V, cols=N)
    p.cfgs(ld__nidx_mode=0)
    for g, b in enumerate(layout.encode_weight_tile(w, wfmt, P, 64)):
        for buf, raw in (("wbuf", b.wbuf), ("widx", b.widx)):
            if raw:
                p.emit("ld", buf=buf, lane=g, ext=p.data(f"{buf}{g}", np.frombuffer(raw, np.uint8),
                                                         "weights", 8), dst=0, cols=len(raw))
    p.cfgs(mx__nfmt=FMT["direct"], mx__wfmt=FMT[wfmt], mx__nvec=V, mx__nstride=nstride,
           mx__nidx_stride=nstride // 8, mx__acc_stride=-(-M // P) * P, mx__mixed=mixed)
    p.emit("sync")
    p.emit("fc", nbuf=0, nidx=0, wbuf=0, widx=0, acc=0, n_in=N, rows=M)
    p.emit("halt")
    return p


def calibrate_instructions(cfg: CoreConfig) -> list[dict]:
    from snpu.verif.tb import rtl_sim

    progs = []
    for name, setup, body in _instruction_cases(cfg):
        for n in (1, 5):
            p = Program(cfg, mem_bytes=1 << 18, rom_bytes=1 << 12)
            a = setup(p)
            for _ in range(n):
                body(p, a)
            p.emit("halt")
            progs.append((name, n, p))
    rng = np.random.default_rng(0)
    fc = []
    # (stride weights on the AND path are expanded by the compiler: that is the "and" row)
    for k, (wfmt, mixed, path) in itertools.product((9, 64), (("direct", 0, "and"),
                                                             ("stride", 1, "merge"))):
        w = np.zeros((32, 288), np.int8)
        for r in range(32):
            w[r, rng.choice(288, k, replace=False)] = rng.integers(1, 127, k)
        x = np.where(rng.random((8, 288)) < 0.7, rng.integers(1, 127, (8, 288)), 0).astype(np.int8)
        fc.append((f"fc {path} 8 vectors x 32 rows, {k} weights per row", _fc_program(cfg, x, w, wfmt, mixed)))
    jobs = [rtl_sim.Job(p.words(), p.image, "rom") for *_, p in progs + fc]
    res = rtl_sim.run_many(jobs, cfg)
    out, cyc = [], {}
    for (name, n, p), r in zip(progs, res):
        g = golden.run_image(p.words(), p.image, cfg, check_races=False).stats.cycles
        cyc.setdefault(name, {})[n] = (r.cycles, g)
    for name, v in cyc.items():
        rtl, model = (v[5][0] - v[1][0]) / 4, (v[5][1] - v[1][1]) / 4
        out.append({"instruction": name, "rtl": rtl, "model": model, "error": _err(model, rtl)})
    for (name, p), r in zip(fc, res[len(progs):]):
        g = golden.run_image(p.words(), p.image, cfg, check_races=False).stats.busy["MX"]
        rtl = r.counters["mx_busy"]
        out.append({"instruction": name + " (MX busy)", "rtl": rtl, "model": g, "error": _err(g, rtl)})
    return out


# ---------------------------------------------------------------------------------------------
# layers and models


def _input(c, seed=7):
    rng = np.random.default_rng(seed)
    return {i: rng.standard_normal(c.graph.tensor(i).shape).astype(np.float32) for i in c.graph.inputs}


def _estimate(c) -> int:
    """The compile-time estimate of the compiled single-core program (file order)."""
    sg = next(s for s in c.graph.meta["subgraphs"] if s["device"] == "core")
    order = [tuple(u) for u in sg["units"]] if "units" in sg else units(c.graph, sg["nodes"])
    return KernelTimer(c.graph, c.config, c.image, False)(order)


def calibrate_layers(rtl: bool) -> list[dict]:
    out = []
    for kind in layer_models.KINDS:
        m, shape = layer_models.layer_model(kind, np.random.default_rng(3))
        rng = np.random.default_rng(7)
        xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(2)]
        c = compile_model(m, CompileOptions(config=TEST_CORE, calibration=[{"x": x} for x in xs],
                                            split_threshold=0, loops=False))
        g = runtime.run(c, xs[0]).core_cycles
        row = {"layer": kind, "golden": g, "estimate": _estimate(c)}
        row["estimate_error_vs_golden"] = _err(row["estimate"], g)
        if rtl:
            r = runtime.run(c, xs[0], sim="rtl").core_cycles
            row.update(rtl=r, golden_error_vs_rtl=_err(g, r))
        out.append(row)
    return out


def calibrate_models(rtl: bool) -> list[dict]:
    out = []
    digits = ROOT / "examples" / "digits" / "digits_cnn.onnx"
    sys.path.insert(0, str(ROOT / "examples" / "digits"))
    from train import split  # noqa: E402

    xtr, _, xte, _ = split()
    calib = [{"image": x[None]} for x in xtr[:64]]
    cfg4 = CoreConfig(lanes=4)
    models = [("digits_cnn 1 core (4 lanes)", digits, CompileOptions(config=cfg4, calibration=calib, loops=False), {"image": xte[0][None]}),
              ("digits_cnn 2x2 array (4 lanes)", digits, CompileOptions(config=cfg4, calibration=calib, mesh=(2, 2)), {"image": xte[0][None]}),
              ("branchy seed 1 (TEST_CORE)", branchy.build(1, blocks=2, channels=16, size=8),
               CompileOptions(config=TEST_CORE, density=0.5, loops=False), None)]
    for name, m, opts, x in models:
        c = compile_model(m, opts)
        x = x or _input(c)
        g = runtime.run(c, x).core_cycles
        row = {"model": name, "golden": g}
        if not opts.array:
            row["estimate"] = _estimate(c)
            row["estimate_error_vs_golden"] = _err(row["estimate"], g)
        if rtl:
            r = runtime.run(c, x, sim="rtl").core_cycles
            row.update(rtl=r, golden_error_vs_rtl=_err(g, r))
        out.append(row)
    return out


# ---------------------------------------------------------------------------------------------
# orders


def _zoo(name):
    return ZOO / f"light_{name}.onnx"


def orders(quick: bool) -> list[dict]:
    models = [(f"branchy seed {s}", branchy.build(s)) for s in range(2 if quick else 4)]
    if not quick:
        models += [(n, _zoo(n)) for n in ("squeezenet", "inception_v1", "inception_v2", "densenet121")]
    out = []
    for name, m in models:
        row = {"model": name}
        for mode in ("file", "greedy", "search"):
            t = time.time()
            c = compile_model(m, CompileOptions(density=0.5, random_weights=0,
                                                schedule=ScheduleOptions(mode)))
            row[f"{mode}_compile_seconds"] = round(time.time() - t, 2)
            row[f"{mode}_cycles"] = runtime.run(c, _input(c), check_races=False).core_cycles
            sch = c.report.get("schedule", {}).get("subgraphs", [])
            if mode == "search":
                row["blocks_searched"] = sum(len(s["blocks"]) for s in sch)
                row["orders_timed"] = sum(b["timed"] for s in sch for b in s["blocks"])
                row["estimated_gain"] = round(1 - sum(s["chosen_cycles"] for s in sch) /
                                              max(1, sum(s["file_cycles"] for s in sch)), 4)
                row["estimated_worst_order_loss"] = round(
                    max((b["worst_cycles"] / b["file_cycles"] - 1 for s in sch for b in s["blocks"]),
                        default=0.0), 4)
        for mode in ("greedy", "search"):
            row[f"{mode}_gain_vs_file"] = round(1 - row[f"{mode}_cycles"] / row["file_cycles"], 4)
        row["search_compile_overhead"] = round(row["search_compile_seconds"] /
                                               row["file_compile_seconds"], 2)
        out.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return out


def rtl_orders() -> dict:
    m = branchy.build(1, blocks=2, channels=16, size=8)
    out = {"model": "branchy seed 1, 16 channels, 8x8, TEST_CORE, pieces of <= 2048 bytes"}
    for mode in ("file", "search"):
        c = compile_model(m, CompileOptions(config=TEST_CORE, density=0.3, split_threshold=2048,
                                            schedule=ScheduleOptions(mode)))
        x = _input(c)
        out[f"{mode}_golden"] = runtime.run(c, x).core_cycles
        out[f"{mode}_rtl"] = runtime.run(c, x, sim="rtl").core_cycles
    out["rtl_gain"] = round(1 - out["search_rtl"] / out["file_rtl"], 4)
    return out


def split_cost(quick: bool) -> list[dict]:
    names = ("squeezenet",) if quick else ("squeezenet", "inception_v1", "resnet50")
    out = []
    for n in names:
        row = {"model": n}
        for th in (0, None):
            c = compile_model(_zoo(n), CompileOptions(density=0.5, random_weights=0, split_threshold=th))
            key = "unsplit" if th == 0 else "split"
            row[f"{key}_cycles"] = runtime.run(c, _input(c), check_races=False).core_cycles
            if th is None:
                row["threshold_bytes"] = c.report["split"]["threshold"]
                row["nodes_split"] = [(s["node"], s["pieces"], s["dimensions"]) for s in c.report["split"]["nodes"]]
        row["split_cost"] = round(row["split_cycles"] / row["unsplit_cycles"] - 1, 4)
        out.append(row)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="branchy networks and squeezenet only")
    ap.add_argument("--no-rtl", action="store_true", help="skip every RTL run")
    a = ap.parse_args()
    rtl = not a.no_rtl
    doc = {"provenance": provenance()}
    doc["calibration"] = {
        "core": TEST_CORE.to_dict(),
        **({"instructions": calibrate_instructions(TEST_CORE)} if rtl else {}),
        "layer_kinds": calibrate_layers(rtl),
        "models": calibrate_models(rtl)}
    doc["orders"] = orders(a.quick)
    if rtl:
        doc["rtl_orders"] = rtl_orders()
    doc["split"] = split_cost(a.quick)
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
