"""cocotb testbench of the tiled array (one core is the 1 x 1 array): runs one ROM per core
against one shared memory image.

Launched by :mod:`snpu.verif.tb.rtl_sim` through ``cocotb_tools.runner``; the job (paths, core
configuration, cycle budget, back-pressure) comes in the JSON file named by ``SNPU_JOB`` and
the result goes to the JSON file the job names.  Structure, as in cocotb's
``matrix_multiplier`` example:

* :class:`MemoryPort` (driver side of external memory): loads the ROMs and the memory image
  into the design's AXI RAM (``hdl``) or into cocotbext-axi's ``AxiRam`` (``axiram``, with
  random pauses on all five channels), and reads memory back;
* :class:`LocalMemories`: every core's local memory, loaded and read through the
  simulator's handles;
* :class:`ArrayDriver`: reset, ``start`` with every core's ROM;
* :class:`ArrayMonitor`: waits for ``done`` within the cycle budget (a watchdog turns a hang
  into a failure) and samples every core's status and counters and every router's flits;
* the model: :func:`snpu.verif.mesh.run_mesh` on the same images;
* :class:`Checker`: external memory and every local memory bit for bit, the exact
  counters per core (pairs, DMA bytes, instructions per unit, NET bytes) and per router
  (flits out of every port), and the error status;
* :class:`Testbench`: ``start`` / ``reset`` / ``run`` / ``stop``.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout

from snpu.config import CoreConfig
from snpu.errors import ExecutionError, IllegalInstruction
from snpu.rtl.core import COUNTERS
from snpu.rtl.microcode import PC_BITS
from snpu.rtl.noc import EAST, LOCAL, NORTH, SOUTH, WEST
from snpu.rtl.router import PORTS
from snpu.rtl.status import ErrorCode
from snpu.verif.image import MemoryImage, read_rom
from snpu.verif.mesh import run_mesh
from snpu.verif.tb.axi_ram import RamArray
from snpu.verif.timing import FarMemory

CLOCK_NS = 10


class MemoryPort:
    def __init__(self, dut, kind: str, size: int, stall: float, seed: int, error_range=None):
        self.dut, self.kind, self.size = dut, kind, size
        if kind == "axiram":
            from cocotbext.axi import AxiBus, AxiRam

            self.ram = AxiRam(AxiBus.from_prefix(dut, "axi_"), dut.clk, dut.rst, size=size)
            if stall:
                rng = random.Random(seed)

                def pauses():
                    while True:
                        yield rng.random() < stall

                for ch in (self.ram.write_if.aw_channel, self.ram.write_if.w_channel,
                           self.ram.write_if.b_channel, self.ram.read_if.ar_channel,
                           self.ram.read_if.r_channel):
                    ch.set_pause_generator(pauses())
        else:
            self.array = dut.ram.mem.mem  # axi_ram.RamArray's words
            dut.stall_rate.value = int(stall * 256) if stall < 1 else 255
            lo, hi = error_range or (0, 0)
            dut.err_lo.value = lo
            dut.err_hi.value = hi
            self.set_far(None)

    def set_far(self, far) -> None:
        """Make ``far`` (a :class:`~snpu.verif.timing.FarMemory`, or ``None``) the RAM's far
        range (``hdl`` memory; cocotbext-axi's RAM has no far range)."""
        if self.kind == "axiram":
            return
        d = self.dut
        d.far_lo.value, d.far_hi.value = (far.lo, far.hi) if far else (0, 0)
        d.far_latency.value = far.latency if far else 0
        d.far_beat.value = far.beat_cycles if far else 1

    def load(self, data: np.ndarray, previous: np.ndarray | None = None) -> None:
        """Write ``data`` at address 0.  ``previous`` is what memory holds now (``None``: all
        zeros after power-up); only the 64-bit words that differ are written."""
        if self.kind == "axiram":
            self.ram.write(0, data.tobytes())
            return
        words = self._words(data)
        old = self._words(previous) if previous is not None else np.zeros_like(words)
        for k in np.flatnonzero(words != old):
            self.array[int(k)].value = int(words[k])

    def _words(self, data: np.ndarray) -> np.ndarray:
        words = np.zeros(self.size // 8, dtype="<u8")
        n = min(data.size, self.size) // 8
        words[:n] = data[:n * 8].view("<u8")
        return words

    async def read(self, n: int) -> np.ndarray:
        """The first ``n`` bytes of memory (``hdl``: the RAM dumps its words to a file,
        :class:`~snpu.verif.tb.axi_ram.RamArray`)."""
        if self.kind == "axiram":
            return np.frombuffer(self.ram.read(0, n), np.uint8).copy()
        dump = Path(RamArray.DUMP_FILE)
        dump.unlink(missing_ok=True)
        self.dut.dump.value = 1  # registered once in the top, seen by the RAM an edge later
        await RisingEdge(self.dut.clk)
        self.dut.dump.value = 0
        await ClockCycles(self.dut.clk, 2)
        words = [line for line in dump.read_text().split()
                 if not line.startswith(("//", "@"))]
        if len(words) != self.size // 8:
            raise RuntimeError(f"the RAM dump {dump.resolve()} has {len(words)} words, "
                               f"expected {self.size // 8}")
        out = np.array([int(w, 16) for w in words[:(n + 7) // 8]], dtype="<u8")
        return out.view(np.uint8)[:n].copy()


def _field(raw: int, k: int, bits: int) -> int:
    return (raw >> (k * bits)) & ((1 << bits) - 1)


#: router port -> the golden network's link direction
_DIRECTION = {LOCAL: "L", NORTH: "N", EAST: "E", SOUTH: "S", WEST: "W"}


class LocalMemories:
    """The cores' local memories (``array.core_X_Y.local_mem.mem``), through the
    simulator's handles; only words that change are written."""

    def __init__(self, dut, mesh, local_bytes: int):
        self.mesh, self.words = mesh, local_bytes // 8
        w, h = mesh
        self.arrays = {(x, y): getattr(dut.array, f"core_{x}_{y}").local_mem.mem
                       for y in range(h) for x in range(w)}
        self.contents = {xy: np.zeros(self.words, "<u8") for xy in self.arrays}

    def load(self, xy, data: np.ndarray) -> None:
        words = np.asarray(data, np.uint8).view("<u8")
        for k in np.flatnonzero(words != self.contents[xy]):
            self.arrays[xy][int(k)].value = int(words[k])
        self.contents[xy] = words.copy()

    def read(self, xy) -> np.ndarray:
        arr = self.arrays[xy]
        out = np.fromiter((int(arr[k].value) for k in range(self.words)), "<u8", self.words)
        self.contents[xy] = out
        return out.view(np.uint8).copy()


class ArrayDriver:
    def __init__(self, dut, n: int):
        self.dut, self.n = dut, n

    async def reset(self):
        self.dut.start.value = 0
        self.dut.rom_base.value = 0
        self.dut.rom_words.value = 0
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 3)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 1)

    async def start(self, rom_bases: list[int], rom_words: list[int]):
        self.dut.rom_base.value = sum(b << (32 * k) for k, b in enumerate(rom_bases))
        self.dut.rom_words.value = sum(n << ((PC_BITS + 1) * k) for k, n in enumerate(rom_words))
        self.dut.start.value = 1
        await RisingEdge(self.dut.clk)
        self.dut.start.value = 0


class ArrayMonitor:
    def __init__(self, dut, mesh):
        self.dut, self.mesh = dut, mesh

    async def wait_done(self, budget_cycles: int) -> bool:
        try:
            await with_timeout(RisingEdge(self.dut.done), budget_cycles * CLOCK_NS, "ns")
        except cocotb.triggers.SimTimeoutError:
            return False
        return True

    def status(self) -> dict:
        """Per core (``"x,y"``): error, error_pc, counters and the router's flits per port."""
        w, h = self.mesh
        ew = ErrorCode.as_shape().width
        err, pcs = int(self.dut.error.value), int(self.dut.error_pc.value)
        counters, flits = int(self.dut.counters.value), int(self.dut.router_flits.value)
        cores = {}
        for y in range(h):
            for x in range(w):
                k = y * w + x
                c = {name: _field(counters, k * len(COUNTERS) + j, 64)
                     for j, name in enumerate(COUNTERS)}
                cores[f"{x},{y}"] = {
                    "error": ErrorCode(_field(err, k, ew)).name,
                    "error_pc": _field(pcs, k, PC_BITS), "counters": c,
                    "router_flits": {_DIRECTION[p]: _field(flits, k * PORTS + p, 32)
                                     for p in range(PORTS)}}
        return {"cores": cores}


class Checker:
    """Compares the RTL run with the golden model; returns a list of mismatches."""

    EXACT = {"pairs": "mac_pairs", "dense_pairs": "dense_pairs",
             "dma_read_bytes": "dma_read_bytes", "dma_write_bytes": "dma_write_bytes",
             "icache_hits": "icache_hits", "icache_misses": "icache_misses",
             "icache_prefetches": "icache_prefetches", "net_bytes_sent": "net_bytes_sent",
             "net_bytes_received": "net_bytes_received"}

    def compare(self, ext: np.ndarray, local: dict, status: dict, model,
                model_error: ExecutionError | IllegalInstruction | None) -> list[str]:
        """Faults: the golden model names the core, error code and ROM word the array must
        report (memory after a fault is not compared: the units stop part-way).  A program
        the golden model rejects without a code (a race, a deadlock...) is not a valid
        test."""
        problems = []
        cores = status["cores"]
        many = len(cores) > 1
        if model_error is not None:
            fault = getattr(model_error, "fault", None)
            xy = getattr(model_error, "core", (0, 0))
            s = cores[f"{xy[0]},{xy[1]}"]
            if fault is None:
                problems.append(f"the golden model rejects the program ({model_error}); the "
                                f"array's behaviour is undefined (RTL core {xy}: {s['error']} "
                                f"at ROM word {s['error_pc']})")
            elif (s["error"], s["error_pc"]) != (fault, model_error.address):
                problems.append(f"fault: golden {fault} at ROM word {model_error.address} "
                                f"({model_error}), RTL{f' core {xy}' if many else ''} "
                                f"{s['error']} at ROM word {s['error_pc']}")
            return problems
        for name, s in cores.items():
            if s["error"] != "NONE":
                where = f" core ({name})" if many else ""
                problems.append(f"RTL{where} reported {s['error']} at ROM word {s['error_pc']}")
        if problems:
            return problems
        diff = np.flatnonzero(ext != model.ext)
        if diff.size:
            a = int(diff[0])
            problems.append(f"external memory differs in {diff.size} bytes; first at 0x{a:x}: "
                            f"RTL {ext[a]} golden {model.ext[a]}")
        links = model.network.get("link_flits", {})
        for xy, core in model.cores.items():
            name = f"{xy[0]},{xy[1]}"
            where = f"core ({name}) " if many else ""
            d = np.flatnonzero(local[xy] != core.machine.local)
            if d.size:
                a = int(d[0])
                problems.append(f"{where}local memory differs in {d.size} bytes; first at "
                                f"{a}: RTL {local[xy][a]} golden {core.machine.local[a]}")
            c = cores[name]["counters"]
            for rtl_name, gold_name in self.EXACT.items():
                if c[rtl_name] != getattr(core.stats, gold_name):
                    problems.append(f"{where}counter {rtl_name}: RTL {c[rtl_name]} golden "
                                    f"{getattr(core.stats, gold_name)}")
            for unit, n in core.stats.instructions.items():
                if c[f"{unit.lower()}_instructions"] != n:
                    problems.append(f"{where}{unit} instructions: RTL "
                                    f"{c[f'{unit.lower()}_instructions']} golden {n}")
            for d, n in cores[name]["router_flits"].items():
                want = links.get(f"{name}{d}", 0)
                if n != want:
                    problems.append(f"router ({name}) port {d}: RTL {n} flits, golden {want}")
        return problems


class Testbench:
    """Runs a sequence of jobs (one ROM per core, one memory image) on one simulator
    instance, resetting the array between them; external and local memories are
    rewritten only where the next run's contents differ."""

    def __init__(self, dut, job: dict):
        self.dut, self.job = dut, job
        self.config = CoreConfig.from_dict(job["config"])
        self.mesh = tuple(job.get("mesh", (1, 1)))
        self.coords = [(x, y) for y in range(self.mesh[1]) for x in range(self.mesh[0])]
        self.memory = MemoryPort(dut, job["memory"], job["mem_bytes"], job.get("stall", 0.0),
                                 job.get("seed", 0), job.get("error_range"))
        self.local = LocalMemories(dut, self.mesh, self.config.local_bytes)
        self.driver = ArrayDriver(dut, len(self.coords))
        self.monitor, self.checker = ArrayMonitor(dut, self.mesh), Checker()
        self._loaded: np.ndarray | None = None

    async def reset(self):
        await self.driver.reset()

    def start(self):
        cocotb.start_soon(Clock(self.dut.clk, CLOCK_NS, unit="ns").start())

    def stop(self):
        pass

    async def run(self, run: dict) -> dict:
        image = MemoryImage.load(run["mem"])
        data = image.data.copy()
        roms, bases, lengths = {}, [], []
        for xy, path, region in zip(self.coords, run["roms"], run["rom_regions"]):
            rom = read_rom(path)
            r = image.region(region)
            raw = b"".join(w.to_bytes(16, "little") for w in rom)
            if len(raw) > r.size:
                raise ValueError(f"core {xy}: ROM of {len(rom)} words does not fit region "
                                 f"{region!r}")
            if r.addr % 64:
                raise ValueError(f"core {xy}: the ROM at 0x{r.addr:x} is not 64-byte aligned "
                                 "(instruction-cache lines)")
            data[r.addr:r.addr + len(raw)] = np.frombuffer(raw, np.uint8)
            roms[xy] = rom
            bases.append(r.addr)
            lengths.append(len(rom))
        image.data[:] = data  # the model sees the same memory, ROMs included
        self.memory.load(data, previous=self._loaded)
        # the image's far region is slower (the RAM and the golden model agree on how much)
        far = (FarMemory.of_image(image, **self.job["far"])
               if self.job.get("far") is not None and self.memory.kind == "hdl" else None)
        self.memory.set_far(far)
        self._loaded = data
        initial_local = {xy: np.zeros(self.config.local_bytes, np.uint8) for xy in self.coords}
        for xy in self.coords:
            self.local.load(xy, initial_local[xy])
        await self.driver.start(bases, lengths)
        t0 = time.time()
        finished = await self.monitor.wait_done(run["budget_cycles"])
        wall = time.time() - t0
        status = self.monitor.status()
        ext = await self.memory.read(image.size)
        self._loaded = ext
        local = {xy: self.local.read(xy) for xy in self.coords}
        cycles = max(c["counters"]["cycles"] for c in status["cores"].values())
        result = {"finished": finished, "wall_s": wall, "cycles": cycles, **status,
                  "cycles_per_s": cycles / wall if wall > 0 else None}
        np.save(run["result"] + ".ext.npy", ext)
        np.save(run["result"] + ".local.npy", np.stack([local[xy] for xy in self.coords]))
        if not finished:
            result["problems"] = [f"no done within {run['budget_cycles']} cycles (hang)"]
            return result
        if self.job.get("check", True):
            model, model_error = None, None
            error_range = self.job.get("error_range")
            protect = [(r.addr, r.end) for r in image.regions.values() if r.kind == "rom"]
            try:
                model = run_mesh(roms, image.data, self.config, mesh=self.mesh,
                                 memory_ports=self.job.get("memory_ports"),
                                 protect=protect, local=initial_local,
                                 bus_error=tuple(error_range) if error_range else None,
                                 far=far)
            except (ExecutionError, IllegalInstruction) as e:  # the checker compares it
                model_error = e
            result["problems"] = self.checker.compare(ext, local, status, model, model_error)
            if model is not None:
                result["golden"] = {f"{x},{y}": c.stats.to_dict()
                                    for (x, y), c in model.cores.items()}
                result["golden_cycles"] = model.cycles
                result["network"] = model.network
        else:
            result["problems"] = []
        return result


@cocotb.test()
async def run_job(dut):
    with open(os.environ["SNPU_JOB"]) as f:
        job = json.load(f)
    tb = Testbench(dut, job)
    tb.start()
    failures = []
    for k, run in enumerate(job.get("runs") or [job]):
        await tb.reset()
        result = await tb.run(run)
        with open(run["result"], "w") as f:
            json.dump(result, f, indent=1)
        if not result["finished"] or result["problems"]:
            failures.append(f"run {k}: " + "; ".join(result["problems"]))
            if not result["finished"]:
                break  # a hung core: the remaining runs would start from a wedged state
    tb.stop()
    assert not failures, " | ".join(failures)
