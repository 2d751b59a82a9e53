"""The tiled array in cocotb + Verilator: random multi-core programs (every traffic pattern)
on a 2 x 2 array of 4-lane cores, every core's local memory, the shared memory, the
per-core counters and the per-router flit counts checked against the golden model; faults
on one core of the array.  ``SNPU_REGRESSION=N`` adds N seeds per pattern on 1 x 4 and
3 x 3 arrays."""

import os

import numpy as np
import pytest

from snpu.verif import isa, meshgen
from snpu.verif.mesh_program import MeshProgram
from snpu.verif.tb import rtl_sim

from .test_core import TEST_CORE

pytestmark = pytest.mark.rtl
REGRESSION = int(os.environ.get("SNPU_REGRESSION", "0"))


def _ok(r, what):
    assert r.finished, f"{what}: the array did not finish (hang)"
    assert not r.problems, f"{what}: " + "; ".join(r.problems)


def _run(mesh, seeds, **options):
    jobs = [rtl_sim.MeshJob(meshgen.mesh_program(np.random.default_rng(seed), TEST_CORE, mesh,
                                                 pattern))
            for pattern in meshgen.PATTERNS for seed in seeds]
    results = rtl_sim.run_many(jobs, TEST_CORE, mesh=mesh, **options)
    assert len(results) == len(jobs)
    for j, r in zip(jobs, results):
        _ok(r, f"{j.program.meta['pattern']} on {mesh}")
        # the independent reference (numpy + requantize) agrees with the RTL's memory
        img = j.program.placed()
        for name, want in j.program.meta["expected"].items():
            reg = img.region(name)
            np.testing.assert_array_equal(r.ext[reg.addr:reg.addr + want.size].view(np.int8),
                                          want, err_msg=name)
    return jobs, results


def test_random_programs_2x2():
    jobs, results = _run((2, 2), range(2))
    # the NoC really carried traffic across routers, and every core ran
    flits = sum(n for c in results[0].cores.values() for d, n in c["router_flits"].items()
                if d != "L")
    assert flits > 0
    assert all(c["counters"]["cycles"] > 0 for r in results for c in r.cores.values())


def test_random_programs_2x2_with_memory_back_pressure():
    _run((2, 2), [7], stall=0.3, seed=7)


def _faulty(build):
    mp = MeshProgram.new(TEST_CORE, (2, 2), 1 << 18)  # the size the other tests use: one build
    build(mp)
    return mp.finish()


FAULTS = {
    # core (1, 1) sends outside the mesh while (0, 0) waits for its packet
    "send-outside-mesh": (lambda mp: (mp.core((0, 0)).emit("recv", tag=1, dst=0, bytes=8),
                                      mp.core((1, 1)).emit("send", x=2, y=0, src=0, dst=0,
                                                           bytes=8, tag=1)),
                          (1, 1), "RANGE", 0),
    "recv-past-local": (lambda mp: mp.core((0, 1)).emit("recv", tag=0, dst=TEST_CORE.local_bytes - 8,
                                                        bytes=16),
                        (0, 1), "RANGE", 0),
    "st-past-local": (lambda mp: (mp.core((1, 0)).emit("cfg", reg="net.packet_log2", value=2),
                                  mp.core((1, 0)).emit("st", src=0,
                                                       ext=isa.LOCAL_BASE + TEST_CORE.local_bytes,
                                                       cols=8)),
                      (1, 0), "STORE_BUS", 1),
}


def test_faults_name_the_core():
    names = list(FAULTS)
    jobs = [rtl_sim.MeshJob(_faulty(FAULTS[n][0]), budget_cycles=20_000) for n in names]
    results = rtl_sim.run_many(jobs, TEST_CORE, mesh=(2, 2))
    for name, r in zip(names, results):
        _, xy, fault, pc = FAULTS[name]
        assert r.finished, name
        assert not r.problems, f"{name}: {r.problems}"   # the checker compared with golden
        core = r.cores[f"{xy[0]},{xy[1]}"]
        assert (core["error"], core["error_pc"]) == (fault, pc), name


@pytest.mark.slow
@pytest.mark.skipif(not REGRESSION, reason="set SNPU_REGRESSION=N for larger meshes")
@pytest.mark.parametrize("mesh", [(1, 4), (3, 3)], ids=["1x4", "3x3"])
def test_random_programs_larger_meshes(mesh):
    _run(mesh, range(100, 100 + REGRESSION))
