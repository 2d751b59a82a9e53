"""cocotb testbench of the whole core: runs one ROM image against one memory image.

Launched by :mod:`snpu.verif.tb.rtl_sim` through ``cocotb_tools.runner``; the job (paths, core
configuration, cycle budget, back-pressure) comes in the JSON file named by ``SNPU_JOB`` and
the result goes to the JSON file the job names.  Structure, as in cocotb's
``matrix_multiplier`` example:

* :class:`MemoryPort` (driver side of external memory): loads the ROM and the memory image
  into the design's AXI RAM (``hdl``) or into cocotbext-axi's ``AxiRam`` (``axiram``, with
  random pauses on all five channels), and reads memory back;
* :class:`CoreDriver`: reset, ``start``;
* :class:`CoreMonitor`: waits for ``done`` within the cycle budget (a watchdog turns a hang
  into a failure) and samples status and counters;
* the model: :func:`snpu.verif.golden.run` on the same images;
* :class:`Checker`: external memory bit for bit, the exact counters (pairs, DMA bytes,
  instructions per unit), and the error status;
* :class:`Testbench`: ``start`` / ``reset`` / ``run`` / ``stop``.
"""

from __future__ import annotations

import json
import os
import random
import time

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout

from snpu.config import CoreConfig
from snpu.errors import ExecutionError, IllegalInstruction
from snpu.rtl.core import COUNTERS
from snpu.rtl.status import ErrorCode
from snpu.verif import golden
from snpu.verif.image import MemoryImage, read_rom

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
            self.array = dut.ram.mem if hasattr(dut.ram, "mem") else dut.ram_mem
            dut.stall_rate.value = int(stall * 256) if stall < 1 else 255
            lo, hi = error_range or (0, 0)
            dut.err_lo.value = lo
            dut.err_hi.value = hi

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

    def read(self, n: int) -> np.ndarray:
        if self.kind == "axiram":
            return np.frombuffer(self.ram.read(0, n), np.uint8).copy()
        out = np.zeros(n // 8, dtype="<u8")
        for k in range(n // 8):
            out[k] = int(self.array[k].value)
        return out.view(np.uint8)


class CoreDriver:
    def __init__(self, dut):
        self.dut = dut

    async def reset(self):
        self.dut.start.value = 0
        self.dut.rom_base.value = 0
        self.dut.rom_words.value = 0
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 3)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 1)

    async def start(self, rom_base: int, rom_words: int):
        self.dut.rom_base.value = rom_base
        self.dut.rom_words.value = rom_words
        self.dut.start.value = 1
        await RisingEdge(self.dut.clk)
        self.dut.start.value = 0


class CoreMonitor:
    def __init__(self, dut):
        self.dut = dut

    async def wait_done(self, budget_cycles: int) -> bool:
        try:
            await with_timeout(RisingEdge(self.dut.done), budget_cycles * CLOCK_NS, "ns")
        except cocotb.triggers.SimTimeoutError:
            return False
        return True

    def status(self) -> dict:
        counters = self.dut.counters.value
        raw = int(counters)
        values = {name: (raw >> (64 * k)) & ((1 << 64) - 1) for k, name in enumerate(COUNTERS)}
        return {"error": ErrorCode(int(self.dut.error.value)).name,
                "error_pc": int(self.dut.error_pc.value), "counters": values}


class Checker:
    """Compares the RTL run with the golden model; returns a list of mismatches."""

    EXACT = {"pairs": "mac_pairs", "dense_pairs": "dense_pairs",
             "dma_read_bytes": "dma_read_bytes", "dma_write_bytes": "dma_write_bytes",
             "icache_hits": "icache_hits", "icache_misses": "icache_misses",
             "icache_prefetches": "icache_prefetches"}

    def compare(self, ext: np.ndarray, status: dict, model: golden.RunResult | None,
                model_error: ExecutionError | IllegalInstruction | None) -> list[str]:
        """Faults: the golden model names the error code and ROM word the core must report
        (the memory after a fault is not compared: the units stop part-way).  A program the
        golden model rejects without a code (a race, a deadlock...) is not a valid test."""
        problems = []
        if model_error is not None:
            fault = getattr(model_error, "fault", None)
            if fault is None:
                problems.append(f"the golden model rejects the program ({model_error}); the "
                                f"core's behaviour is undefined (RTL: {status['error']} at ROM "
                                f"word {status['error_pc']})")
            elif (status["error"], status["error_pc"]) != (fault, model_error.address):
                problems.append(f"fault: golden {fault} at ROM word {model_error.address} "
                                f"({model_error}), RTL {status['error']} at ROM word "
                                f"{status['error_pc']}")
            return problems
        if status["error"] != "NONE":
            problems.append(f"RTL reported {status['error']} at ROM word {status['error_pc']}")
            return problems
        diff = np.flatnonzero(ext != model.ext)
        if diff.size:
            a = int(diff[0])
            problems.append(f"external memory differs in {diff.size} bytes; first at 0x{a:x}: "
                            f"RTL {ext[a]} golden {model.ext[a]}")
        c = status["counters"]
        for rtl_name, gold_name in self.EXACT.items():
            if c[rtl_name] != getattr(model.stats, gold_name):
                problems.append(f"counter {rtl_name}: RTL {c[rtl_name]} golden "
                                f"{getattr(model.stats, gold_name)}")
        for unit, n in model.stats.instructions.items():
            if c[f"{unit.lower()}_instructions"] != n:
                problems.append(f"{unit} instructions: RTL {c[f'{unit.lower()}_instructions']} "
                                f"golden {n}")
        return problems


class Testbench:
    """Runs a sequence of (ROM, memory image) jobs on one simulator instance, resetting the
    core between them; external memory is rewritten only where the next image differs."""

    def __init__(self, dut, job: dict):
        self.dut, self.job = dut, job
        self.config = CoreConfig.from_dict(job["config"])
        self.memory = MemoryPort(dut, job["memory"], job["mem_bytes"], job.get("stall", 0.0),
                                 job.get("seed", 0), job.get("error_range"))
        self.driver, self.monitor, self.checker = CoreDriver(dut), CoreMonitor(dut), Checker()
        self._loaded: np.ndarray | None = None

    async def reset(self):
        await self.driver.reset()

    def start(self):
        cocotb.start_soon(Clock(self.dut.clk, CLOCK_NS, unit="ns").start())

    def stop(self):
        pass

    async def run(self, run: dict) -> dict:
        image = MemoryImage.load(run["mem"])
        rom = read_rom(run["rom"])
        rom_region = image.region(run.get("rom_region", "rom"))
        data = image.data.copy()
        raw = b"".join(w.to_bytes(16, "little") for w in rom)
        if len(raw) > rom_region.size:
            raise ValueError(f"ROM of {len(rom)} words does not fit the rom region")
        data[rom_region.addr:rom_region.addr + len(raw)] = np.frombuffer(raw, np.uint8)
        image.data[:] = data  # the model sees the same memory, ROM included
        self.memory.load(data, previous=self._loaded)
        self._loaded = data
        if rom_region.addr % 64:
            raise ValueError(f"the ROM at 0x{rom_region.addr:x} is not 64-byte aligned "
                             "(instruction-cache lines)")
        await self.driver.start(rom_region.addr, len(rom))
        t0 = time.time()
        finished = await self.monitor.wait_done(run["budget_cycles"])
        wall = time.time() - t0
        status = self.monitor.status()
        ext = self.memory.read(image.size)
        self._loaded = ext
        result = {"finished": finished, "wall_s": wall, **status}
        result["cycles_per_s"] = status["counters"]["cycles"] / wall if wall > 0 else None
        np.save(run["result"] + ".ext.npy", ext)
        if not finished:
            result["problems"] = [f"no done within {run['budget_cycles']} cycles (hang)"]
            return result
        if self.job.get("check", True):
            model, model_error = None, None
            error_range = self.job.get("error_range")
            try:
                model = golden.run_image(rom, image, self.config,
                                         bus_error=tuple(error_range) if error_range else None)
            except (ExecutionError, IllegalInstruction) as e:  # the checker compares it
                model_error = e
            result["problems"] = self.checker.compare(ext, status, model, model_error)
            if model is not None:
                result["golden"] = model.stats.to_dict()
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
