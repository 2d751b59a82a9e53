"""A VX unit narrower than the MAC lanes (``vx_lanes``), in cocotb + Verilator: the small
core with one VX lane, so every accumulator word is walked in four slices (pooling windows
restarted per slice, ``vew`` reading a and b again, ``req`` writing single bytes into the
output cache and single elements into the accumulators).  Random programs of every kind and
a compiled network run from ROM images, checked against the golden model (one simulator
build)."""

import dataclasses

import numpy as np
import pytest

from snpu.compiler import check, runtime
from snpu.compiler.pipeline import CompileOptions, compile_model
from snpu.config import SMALL_CORE
from snpu.verif import progen
from snpu.verif.tb import rtl_sim

from ..compiler.models import inputs, tiny_cnn

pytestmark = pytest.mark.rtl

CORE = dataclasses.replace(SMALL_CORE, vx_lanes=1)
KINDS = list(progen.GENERATORS)


def test_every_program_kind_with_one_vx_lane():
    assert CORE.vx_slices == 4
    for seed, stall in ((0, 0.0), (1, 0.3)):
        programs = [progen.random_program(np.random.default_rng(5000 + seed), CORE, kind)
                    for kind in KINDS]
        results = rtl_sim.run_many([rtl_sim.Job(p.place_rom(), p.image) for p in programs],
                                   CORE, stall=stall, seed=seed)
        for kind, r in zip(KINDS, results):
            assert r.finished, f"{kind} seed={seed}: core did not finish (hang)"
            assert r.error == "NONE", f"{kind} seed={seed}: {r.error} at ROM word {r.error_pc}"
            assert not r.problems, f"{kind} seed={seed}: " + "; ".join(r.problems)
    ops = {i.op for p in programs for i in p.instrs}
    assert {"vred", "vew", "req"} <= ops, ops


def test_a_compiled_network_with_one_vx_lane():
    """The compiler's ROM image for a small CNN (convolutions, pooling, fc), bit-exact on
    the RTL with the golden model and the compiler's int8 reference; the golden model's
    VX cycles are the slices' (four reads per word)."""
    m = tiny_cnn(4)
    c = compile_model(m, CompileOptions(config=CORE, density=0.5))
    xs = inputs(m, 2)
    golden = runtime.run_batch(c, xs, sim="golden")
    rtl = runtime.run_batch(c, xs, sim="rtl")  # raises on any counter / memory mismatch
    for g, r in zip(golden, rtl):
        for k in g.outputs_int8:
            np.testing.assert_array_equal(r.outputs_int8[k], g.outputs_int8[k])
    assert check.compare(c, xs, rtl, onnxruntime=False).bit_exact == len(xs)
    wide = compile_model(m, CompileOptions(config=SMALL_CORE, density=0.5))
    assert runtime.run_batch(wide, xs[:1], sim="golden")[0].core_cycles < golden[0].core_cycles
