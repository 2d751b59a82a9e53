"""The whole core in cocotb + Verilator, running ROM images, checked against the golden model.

The fast suite runs a few seeds per program kind; ``SNPU_REGRESSION=N`` runs ``N`` seeds per
kind (the long random regression, also selected by ``-m slow``).
"""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from snpu.config import SMALL_CORE
from snpu.rtl.status import ErrorCode
from snpu.verif import progen
from snpu.verif.tb import rtl_sim
from snpu.verif.asm import assemble
from snpu.verif.image import MemoryImage
from snpu.verif import isa
from snpu.verif.isa import Unit
from snpu.verif.program import Program

pytestmark = pytest.mark.rtl

ROOT = Path(__file__).resolve().parents[2]
TEST_CORE = SMALL_CORE
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


@pytest.mark.parametrize("in_params", [False, True], ids=["vew", "vewp"])
def test_scaled_add_with_its_multipliers_in_the_word_or_the_parameters(in_params):
    """A residual add with its multipliers in the instruction (``vew``) or in a parameter
    row loaded beside the requantisation's (``vewp``)."""
    p = progen.eltwise_program(np.random.default_rng(5), TEST_CORE, in_params=in_params)
    assert any(i.op == ("vewp" if in_params else "vew") for i in p.instrs)
    _check(rtl_sim.run(p.place_rom(), p.image, TEST_CORE, seed=5), 5)


@pytest.mark.parametrize("kind", ["fc", "conv", "pool"])
def test_register_operands(kind):
    """``fc``'s nvec and the strides of ``vred``, ``req`` and ``st`` in register operands
    while the registers hold decoys: the core computes what the golden model does (which the golden model's own
    tests check against the same program reading the registers)."""
    make = getattr(progen, f"{kind}_program")
    for seed in range(11, 100):
        try:
            p = make(np.random.default_rng(seed), TEST_CORE, operands=True)
            break
        except ValueError:  # shapes that do not fit the core
            continue
    assert any(isa.register_operands(i) for i in p.instrs)
    _check(rtl_sim.run(p.place_rom(), p.image, TEST_CORE, seed=seed), seed)


def test_cfg_words_of_three_registers():
    """A random convolution with its register writes merged up to three to a word (the
    compiler's pass) runs on the core as the golden model runs it."""
    from snpu.compiler.passes.pair_cfg import pair_cfg
    p = progen.conv_program(np.random.default_rng(4), TEST_CORE)
    p.instrs = pair_cfg(p.instrs)
    assert any(i.op == "cfg" and i.args["three"] for i in p.instrs)
    _check(rtl_sim.run(p.place_rom(), p.image, TEST_CORE, seed=4))


@pytest.mark.parametrize("seed", range(2))
def test_rotated_loops(seed):
    """A loop whose first iteration enters its body (``entry``), nested in two more."""
    p = progen.loop_program(np.random.default_rng(2000 + seed), TEST_CORE, rotated=True,
                            flip=False)
    assert any(i.op == "loop" and i.args["entry"] for i in p.instrs)
    _check(rtl_sim.run(p.place_rom(), p.image, TEST_CORE, seed=seed), seed)


@pytest.mark.parametrize("seed", range(2))
def test_flip_loops(seed):
    """A software-pipelined loop over the halves of acc and obuf (``flip``): each
    iteration requantises what the one before loaded into the other half."""
    p = progen.loop_program(np.random.default_rng(2100 + seed), TEST_CORE, flip=True)
    assert any(i.op == "loop" and i.args["flip"] for i in p.instrs)
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


def _program():
    p = Program(TEST_CORE, mem_bytes=1 << 16, rom_bytes=1 << 12)
    x = p.data("x", np.arange(64, dtype=np.int8))
    p.emit("ld", buf="nbuf", ext=x, dst=0, cols=64)  # ROM word 0
    return p, x


def _stride_weights(p: Program, n_in: int) -> None:
    """Lane 0's weight index: one row whose stride entry points at position n_in (beyond
    its row); the weight bytes after it."""
    idx = p.data("widx", np.frombuffer(bytes([1, 0, n_in & 0xFF]), np.uint8).copy())
    p.emit("ld", buf="widx", lane=0, ext=idx, dst=0, cols=3, signal=[Unit.MX])


def _restrided(before: int, after: int):
    """A builder: two vectors with mx.acc_stride ``before``, then a cfg making it ``after``
    and at once an fc (ROM word 4).  The MX unit's range check uses a product of the
    register file computed ahead: it must be current.  The fc's neurons lie past the ld's
    bytes (no token orders the two)."""
    return lambda p, x: (p.cfgs(mx__nvec=2, mx__acc_stride=before),
                         p.cfgs(mx__acc_stride=after),
                         p.emit("fc", nbuf=128, nidx=0, wbuf=0, widx=0, acc=0, n_in=8, rows=4))


FAULTS = {
    # name: (builder(p, x) -> error_range, expected error, faulting ROM word)
    "illegal": (lambda p, x: None, ErrorCode.ILLEGAL, 1),  # word 1 replaced below
    "load_bus": (lambda p, x: (x, x + 8), ErrorCode.LOAD_BUS, 0),
    "range-ld": (lambda p, x: p.emit("ld", buf="wbuf", lane=0, ext=x,
                                     dst=TEST_CORE.wbuf_bytes - 8, cols=64), ErrorCode.RANGE, 1),
    "range-ld-lane": (lambda p, x: p.emit("ld", buf="acc", lane=1, ext=x, dst=0, cols=8),
                      ErrorCode.RANGE, 1),
    "align-ld-group": (lambda p, x: (p.cfgs(ld__nidx_mode=1, ld__group_log2=3),
                                     p.emit("ld", buf="nbuf", ext=x, dst=4, cols=16)),
                       ErrorCode.ALIGN, 3),
    "align-vred": (lambda p, x: p.emit("vred", mode="max", dst=0, src=2, n_o=1, n_i=1),
                   ErrorCode.ALIGN, 1),
    "range-vew": (lambda p, x: p.emit("vew", dst=0, a=0, b=TEST_CORE.acc_elems, n_i=1),
                  ErrorCode.RANGE, 1),
    "range-req-param": (lambda p, x: p.emit("req", dst=0, src=0, param=TEST_CORE.param_rows,
                                            n_i=1), ErrorCode.RANGE, 1),
    "align-fc": (lambda p, x: p.emit("fc", nbuf=0, nidx=0, wbuf=0, widx=0, acc=2, n_in=8,
                                     rows=4), ErrorCode.ALIGN, 1),
    "range-fc": (lambda p, x: p.emit("fc", nbuf=TEST_CORE.nbuf_bytes - 4, nidx=0, wbuf=0,
                                     widx=0, acc=0, n_in=8, rows=4), ErrorCode.RANGE, 1),
    # an fc right after the cfg that changes its accumulator stride
    "range-fc-just-restrided": (_restrided(TEST_CORE.lanes, TEST_CORE.acc_elems),
                                ErrorCode.RANGE, 4),
    "fc-fits-just-restrided": (_restrided(TEST_CORE.acc_elems, TEST_CORE.lanes),
                               ErrorCode.NONE, 0),
    "index-fc": (lambda p, x: (_stride_weights(p, 8), p.cfgs(mx__wfmt=2, mx__nfmt=1, mx__mixed=1),
                               p.emit("fc", nbuf=0, nidx=0, wbuf=0, widx=0, acc=0, n_in=8,
                                      rows=1, wait=[Unit.LD])), ErrorCode.INDEX, 5),
    # stride weights off the merge (dense neurons): the lanes cannot expand them
    "format-fc": (lambda p, x: (_stride_weights(p, 8), p.cfgs(mx__wfmt=2),
                                p.emit("fc", nbuf=0, nidx=0, wbuf=0, widx=0, acc=2, n_in=8,
                                       rows=1, wait=[Unit.LD])), ErrorCode.FORMAT, 3),
    # direct weights into the merge: the lanes cannot turn them into entries
    "format-fc-merge": (lambda p, x: (p.cfgs(mx__nfmt=2, mx__wfmt=1, mx__mixed=1),
                                      p.emit("fc", nbuf=0, nidx=0, wbuf=0, widx=0, acc=0, n_in=8,
                                             rows=1)), ErrorCode.FORMAT, 4),
    "store_bus": (lambda p, x: (p.emit("st", src=0, ext=p.space("y", (64,)), cols=64),
                                (p.image.region("y").addr, p.image.region("y").addr + 8))[1],
                  ErrorCode.STORE_BUS, 1),
    "range-st": (lambda p, x: p.emit("st", src=TEST_CORE.obuf_bytes - 8, ext=p.space("y", (64,)),
                                     cols=16), ErrorCode.RANGE, 1),
    # compressed activations: alignment, ranges, malformed streams, bus errors
    "align-stc": (lambda p, x: p.emit("stc", src=4, ext=p.space("y", (64,), align=8), cols=8),
                  ErrorCode.ALIGN, 1),
    "range-stc": (lambda p, x: p.emit("stc", src=TEST_CORE.obuf_bytes - 8,
                                      ext=p.space("y", (64,), align=8), cols=16),
                  ErrorCode.RANGE, 1),
    "align-ldc": (lambda p, x: p.emit("ldc", buf="acc", dst=4, ext=x, cols=8), ErrorCode.ALIGN, 1),
    "range-ldc": (lambda p, x: p.emit("ldc", buf="nbuf", dst=TEST_CORE.nbuf_bytes - 8, ext=x,
                                      cols=16), ErrorCode.RANGE, 1),
    "index-ldc-header": (lambda p, x: p.emit("ldc", buf="acc", dst=0, ext=x, cols=8),
                         ErrorCode.INDEX, 1),
    "index-ldc-short": (lambda p, x: p.emit("ldc", buf="nbuf", dst=0, cols=64, ext=p.data(
        "s", np.frombuffer((8).to_bytes(8, "little") + bytes([255] * 8), np.uint8), align=8)),
                        ErrorCode.INDEX, 1),
    "load_bus-ldc": (lambda p, x: (p.emit("ldc", buf="acc", dst=0, cols=8, ext=p.data(
        "s", np.frombuffer((16).to_bytes(8, "little") + bytes([1] + [0] * 7) + bytes([9] + [0] * 7),
                           np.uint8), align=8)),
                                   (p.image.region("s").addr + 8, p.image.region("s").addr + 16))[1],
                     ErrorCode.LOAD_BUS, 1),
    "store_bus-stc": (lambda p, x: (p.emit("stc", src=0, ext=p.space("y", (64,), align=8), cols=64),
                                    (p.image.region("y").addr, p.image.region("y").addr + 8))[1],
                      ErrorCode.STORE_BUS, 1),
    # no fault: an instruction with no work, and an illegal word after halt
    "empty-vred": (lambda p, x: p.emit("vred", mode="max", dst=3, src=5, n_o=0), ErrorCode.NONE, 0),
    "empty-ld": (lambda p, x: p.emit("ld", buf="wbuf", lane=9, ext=x, dst=1 << 19, cols=0),
                 ErrorCode.NONE, 0),
    "empty-fc": (lambda p, x: p.emit("fc", nbuf=0, nidx=0, wbuf=0, widx=0, acc=1, n_in=8,
                                     rows=0), ErrorCode.NONE, 0),
    # loops: nested too deep, leaving the enclosing body, running past the ROM; no halt
    "loop-too-deep": (lambda p, x: [p.emit("loop", count=2, body=isa.LOOP_DEPTH + 1 - k)
                                    for k in range(isa.LOOP_DEPTH + 1)] +
                      [p.emit("cfg", reg="vx.k1_stride", value=0)], ErrorCode.ILLEGAL,
                      isa.LOOP_DEPTH + 1),
    "loop-leaves-body": (lambda p, x: (p.emit("loop", count=2, body=2),
                                       p.emit("loop", count=2, body=2),
                                       p.emit("cfg", reg="vx.k1_stride", value=0),
                                       p.emit("cfg", reg="vx.k2_stride", value=0)),
                         ErrorCode.ILLEGAL, 2),
    "loop-past-rom": (lambda p, x: p.emit("loop", count=2, body=5), ErrorCode.ILLEGAL, 1),
    "no-halt": (lambda p, x: "no halt", ErrorCode.ILLEGAL, 1),
    "loop-zero-body": (lambda p, x: p.emit("loop", count=2, body=1), ErrorCode.ILLEGAL, 1),
    # the NET unit and local memory
    "send-outside-mesh": (lambda p, x: p.emit("send", x=1, y=0, src=0, dst=0, bytes=8, tag=0),
                          ErrorCode.RANGE, 1),
    "send-misaligned": (lambda p, x: p.emit("send", x=0, y=0, src=4, dst=0, bytes=8, tag=0),
                        ErrorCode.ALIGN, 1),
    "send-past-local": (lambda p, x: p.emit("send", x=0, y=0, src=0,
                                            dst=TEST_CORE.local_bytes - 8, bytes=16, tag=0),
                        ErrorCode.RANGE, 1),
    "recv-past-local": (lambda p, x: p.emit("recv", tag=1, dst=TEST_CORE.local_bytes, bytes=8),
                        ErrorCode.RANGE, 1),
    "ld-past-local": (lambda p, x: p.emit("ld", buf="acc", ext=isa.LOCAL_BASE + TEST_CORE.local_bytes,
                                          dst=0, cols=8), ErrorCode.LOAD_BUS, 1),
    "st-past-local": (lambda p, x: p.emit("st", src=0, ext=isa.LOCAL_BASE + TEST_CORE.local_bytes - 8,
                                          cols=16), ErrorCode.STORE_BUS, 1),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_faults_match_the_golden_model(fault):
    """Every fault the golden model specifies (code and ROM word) is what the core reports,
    and a fault ends the run instead of hanging it."""
    build, expected, pc = FAULTS[fault]
    p, x = _program()
    ret = build(p, x)
    error_range = ret if isinstance(ret, tuple) and len(ret) == 2 and isinstance(ret[0], int) \
        else None
    if ret != "no halt":
        p.emit("halt")
    words = p.place_rom()
    if fault == "illegal":
        words[1] = 0x3F  # ROM word 1 (halt): an unknown opcode
    if fault == "empty-vred":
        words.append(0x3F)  # after halt: never dispatched
    if fault == "loop-zero-body":  # clear the body field: an illegal word
        loop = isa.OPCODE_BY_NAME["loop"]
        words[1] &= ~(((1 << loop.field("body").width) - 1) << loop.offsets["body"])
    raw = b"".join(w.to_bytes(16, "little") for w in words)
    rom = p.image.region("rom")
    p.image.data[rom.addr:rom.addr + len(raw)] = np.frombuffer(raw, np.uint8)
    result = rtl_sim.run(words, p.image, TEST_CORE, error_range=error_range, budget_cycles=20_000)
    assert result.finished, "a fault must end the run, not hang it"
    assert not result.problems, result.problems
    assert (result.error, result.error_pc if expected != ErrorCode.NONE else 0) == \
        (expected.name, pc)
