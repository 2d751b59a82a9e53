"""The core on a 128- and a 256-bit AXI bus, running ROM images in cocotb + Verilator,
checked against the golden model: the LD unit's bus-wide beats and buffer writes (and its
sub-writes into the accumulators and the parameter memory, its upsizer from local memory,
an ``ldc`` stream cut into 8-byte words), narrow instruction fetch and ST bursts."""

import dataclasses
import os

import numpy as np
import pytest

from snpu.config import SMALL_CORE
from snpu.verif import progen
from snpu.verif.tb import rtl_sim

pytestmark = pytest.mark.rtl

KINDS = list(progen.GENERATORS)


def _check_all(results, jobs):
    for (kind, seed), r in zip(jobs, results):
        assert r.finished, f"{kind} seed={seed}: core did not finish (hang)"
        assert r.error == "NONE", f"{kind} seed={seed}: {r.error} at ROM word {r.error_pc}"
        assert not r.problems, f"{kind} seed={seed}: " + "; ".join(r.problems)


def test_every_program_kind_on_a_128_bit_bus():
    """Two seeds of every random-program kind, the second with back-pressure on every AXI
    channel (one simulator build, one run per stall setting)."""
    cfg = dataclasses.replace(SMALL_CORE, axi_data_bits=128)
    for seed, stall in ((0, 0.0), (1, 0.3)):
        programs = [progen.random_program(np.random.default_rng(3000 + seed), cfg, kind)
                    for kind in KINDS]
        jobs = [rtl_sim.Job(p.place_rom(), p.image) for p in programs]
        results = rtl_sim.run_many(jobs, cfg, stall=stall, seed=seed)
        _check_all(results, [(k, seed) for k in KINDS])
        assert sum(r.counters["dma_read_bytes"] for r in results) > 0


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("SNPU_REGRESSION"),
                    reason="set SNPU_REGRESSION=1 for the 256-bit bus (a simulator build of its own)")
def test_every_program_kind_on_a_256_bit_bus():
    """A 256-bit bus on an 8-lane core (a beat is 32 bytes: four accumulator rows, four
    parameter records in one write)."""
    cfg = dataclasses.replace(SMALL_CORE, lanes=8, axi_data_bits=256)
    programs = [progen.random_program(np.random.default_rng(4000), cfg, kind) for kind in KINDS]
    jobs = [rtl_sim.Job(p.place_rom(), p.image) for p in programs]
    results = rtl_sim.run_many(jobs, cfg, stall=0.2, seed=4)
    _check_all(results, [(k, 0) for k in KINDS])
