"""The whole core in cocotb + Verilator, running ROM images, checked against the golden model.

The fast suite runs a few seeds per program kind; ``SNPU_REGRESSION=N`` runs ``N`` seeds per
kind (the long random regression, also selected by ``-m slow``).
"""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from snpu.config import CoreConfig
from snpu.rtl.status import ErrorCode
from snpu.verif import progen, rtl_sim
from snpu.verif.asm import assemble
from snpu.verif.image import MemoryImage
from snpu.verif.program import Program

pytestmark = pytest.mark.rtl

ROOT = Path(__file__).resolve().parents[2]
TEST_CORE = CoreConfig(lanes=4, nbuf_bytes=4096, nidx_bytes=1024, wbuf_bytes=4096,
                       widx_bytes=2048, acc_words=256, obuf_bytes=2048, param_rows=32)
KINDS = list(progen.GENERATORS)
REGRESSION = int(os.environ.get("SNPU_REGRESSION", "0"))


def _check(result: rtl_sim.RtlResult, seed=None):
    assert result.finished, f"seed={seed}: core did not finish (hang)"
    assert result.error == "NONE", f"seed={seed}: {result.error} at ROM word {result.error_pc}"
    assert not result.problems, f"seed={seed}: " + "; ".join(result.problems)


def test_example_program(tmp_path):
    sys.path.insert(0, str(ROOT / "examples"))
    import sparse_fc

    sparse_fc.build(tmp_path, TEST_CORE)
    words = assemble((tmp_path / "sparse_fc.s").read_text())
    result = rtl_sim.run(words, MemoryImage.load(tmp_path / "mem.bin"), TEST_CORE)
    _check(result)
    expected = np.load(tmp_path / "expected.npz")["y"]
    y = MemoryImage.load(tmp_path / "mem.bin").region("y")
    np.testing.assert_array_equal(result.ext[y.addr:y.addr + y.size].view(np.int8), expected)
    assert result.counters["pairs"] < result.counters["dense_pairs"] / 4


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(2))
def test_random_programs(kind, seed):
    p = progen.random_program(np.random.default_rng(1000 + seed), TEST_CORE, kind)
    _check(rtl_sim.run(p.place_rom(), p.image, TEST_CORE, seed=seed), seed)


@pytest.mark.parametrize("kind", ["fc", "conv"])
def test_axiram_with_random_backpressure(kind):
    """cocotbext-axi's AxiRam, pausing every channel 30 % of the time."""
    p = progen.random_program(np.random.default_rng(7), TEST_CORE, kind)
    _check(rtl_sim.run(p.place_rom(), p.image, TEST_CORE, memory="axiram", stall=0.3, seed=7))


def test_hdl_memory_with_backpressure():
    p = progen.random_program(np.random.default_rng(8), TEST_CORE, "fc")
    _check(rtl_sim.run(p.place_rom(), p.image, TEST_CORE, stall=0.4, seed=8))


@pytest.mark.slow
@pytest.mark.skipif(not REGRESSION, reason="set SNPU_REGRESSION=N for the long random regression")
@pytest.mark.parametrize("kind", KINDS)
def test_regression(kind):
    for seed in range(REGRESSION):
        rng = np.random.default_rng(10_000 + seed)
        p = progen.random_program(rng, TEST_CORE, kind)
        stall = float(rng.choice([0.0, 0.2, 0.5]))
        _check(rtl_sim.run(p.place_rom(), p.image, TEST_CORE, stall=stall, seed=seed), seed)


def _tiny_program():
    p = Program(TEST_CORE, mem_bytes=1 << 16, rom_bytes=1 << 12)
    x = p.data("x", np.arange(64, dtype=np.int8))
    p.emit("ld", buf="nbuf", ext=x, dst=0, cols=64)
    return p, x


@pytest.mark.parametrize("fault", ["illegal", "load_bus", "range", "store_bus"])
def test_faults_are_reported_not_hung(fault):
    p, x = _tiny_program()
    words = None
    error_range = None
    if fault == "illegal":
        p.emit("halt")
        words = p.place_rom()
        words.insert(1, 0x3F)  # ROM word 1: unknown opcode
        expected, pc = ErrorCode.ILLEGAL, 1
    elif fault == "load_bus":
        p.emit("halt")
        error_range, expected, pc = (x, x + 8), ErrorCode.LOAD_BUS, 0
    elif fault == "range":
        p.emit("ld", buf="wbuf", lane=0, ext=x, dst=TEST_CORE.wbuf_bytes - 8, cols=64)
        p.emit("halt")
        expected, pc = ErrorCode.RANGE, 1
    else:
        p.emit("cfg", reg="vx.src_stride", value=0)
        y = p.space("y", (64,))
        p.emit("st", src=0, ext=y, cols=64)
        p.emit("halt")
        error_range, expected, pc = (y, y + 8), ErrorCode.STORE_BUS, 2
    words = words or p.place_rom()
    if fault == "illegal":
        raw = b"".join(w.to_bytes(16, "little") for w in words)
        p.image.data[:len(raw)] = np.frombuffer(raw, np.uint8)
    result = rtl_sim.run(words, p.image, TEST_CORE, check=False, error_range=error_range,
                         budget_cycles=20_000)
    assert result.finished, "a fault must end the run, not hang it"
    assert (result.error, result.error_pc) == (expected.name, pc)
