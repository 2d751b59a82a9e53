"""ST unit against the golden model's st: 3-D patterns, any alignment, bursts, bus errors."""

import random

import numpy as np

from snpu.rtl.microcode import op_codes
from snpu.verif.isa import Unit
import pytest

from snpu.config import CoreConfig
from snpu.rtl.st_unit import StoreUnit
from snpu.rtl.status import ErrorCode
from snpu.verif import isa
from snpu.verif.golden import Machine

from .axi_model import AxiMemory
from snpu.verif.tb.amaranth_sim import seeded, simulate

CFG = CoreConfig(lanes=4, nbuf_bytes=1024, nidx_bytes=256, wbuf_bytes=512, widx_bytes=256,
                 acc_words=64, obuf_bytes=1024, param_rows=8)


def _obuf_port(dut, obuf, reads):
    """The output cache: a word a cycle after its address; ``reads[0]`` counts the reads."""
    async def process(ctx):
        while True:
            _, _, addr, en = await ctx.tick().sample(dut.obuf_addr, dut.obuf_en)
            if en:
                reads[0] += 1
                ctx.set(dut.obuf_data, int.from_bytes(obuf[8 * addr:8 * addr + 8].tobytes(), "little"))
    return process


def _run(ops, obuf, mem, rng, error_ranges=(), reads_per_op=None):
    """Run ``ops`` on the unit; each op's error code.  ``reads_per_op``, if a list, gets
    the output-cache words each op read."""
    dut = StoreUnit(CFG)
    axi = AxiMemory(dut, mem, rng, idle=0.25, error_ranges=error_ranges, id_bits=False)
    errors = []
    reads = [0]

    async def driver(ctx):
        for regs, args in ops:
            ctx.set(dut.regs, regs)
            ctx.set(dut.op, op_codes(Unit.ST)["st"])
            ctx.set(dut.args.st, args)
            ctx.set(dut.start, 1)
            before = reads[0]
            await ctx.tick()
            ctx.set(dut.start, 0)
            await ctx.tick().until(dut.done)
            errors.append(ctx.get(dut.error))
            if reads_per_op is not None:
                reads_per_op.append(reads[0] - before)

    simulate(dut, driver, processes=[axi.aw, axi.w, _obuf_port(dut, obuf, reads)])
    return errors


def _check_against_golden(ops, obuf, mem, rng, reads_per_op=None):
    """Run ``ops`` (st's registers and operands each) on the unit and on the golden model
    from the same output cache: no fault, and the same external memory."""
    errors = _run(ops, obuf, mem, rng, reads_per_op=reads_per_op)
    assert errors == [ErrorCode.NONE] * len(ops)
    gold = Machine(CFG, np.zeros(len(mem), np.uint8))
    gold.obuf[:] = obuf
    for regs, args in ops:
        for k, v in regs.items():
            gold.regs[f"st.{k}"] = v
        gold.execute(isa.make("st", **args))
    np.testing.assert_array_equal(np.frombuffer(bytes(mem), np.uint8), gold.ext)


@pytest.mark.parametrize("seed", range(4))
@seeded
def test_stores_match_golden(seed):
    rng = random.Random(seed)
    obuf = np.array([rng.randrange(256) for _ in range(CFG.obuf_bytes)], np.uint8)
    mem = bytearray(8192)
    ops = []
    for _ in range(10):
        cols = rng.choice([1, 3, 8, 9, 16, 30, 100, 200, 300])
        rows, n3 = rng.randrange(1, 4), rng.randrange(1, 3)
        regs = {"src_stride": rng.randrange(0, 50), "src_stride3": rng.randrange(0, 200),
                "ext_stride": cols + rng.randrange(0, 40)}
        regs["ext_stride3"] = rows * regs["ext_stride"] + rng.randrange(0, 40)
        span_src = (n3 - 1) * regs["src_stride3"] + (rows - 1) * regs["src_stride"] + cols
        if span_src > CFG.obuf_bytes:
            n3, rows = 1, 1
            span_src = cols
        span_ext = (n3 - 1) * regs["ext_stride3"] + (rows - 1) * regs["ext_stride"] + cols
        # anywhere; just before the 4 KiB boundary; a full burst or two before it (the
        # burst after a full one is then cut at the boundary)
        ext = rng.choice([rng.randrange(0, 8192 - span_ext), 4096 - rng.randrange(1, 20),
                          4096 - 8 * rng.randrange(17, 33) - rng.randrange(8)])
        if ext + span_ext > 8192:
            ext = 8192 - span_ext
        ops.append((regs, dict(src=rng.randrange(0, CFG.obuf_bytes - span_src + 1), ext=ext,
                               n3=n3, rows=rows, cols=cols)))
    _check_against_golden(ops, obuf, mem, rng)


def test_short_rows_at_every_offset_and_length():
    """Rows of 1..17 bytes from each of the 8 byte offsets, two rows a plane: every bit of
    the rows' first- and second-beat-is-last flags, and every row ending exactly at a beat's
    end (cols + offset = 8 or 16).  Each row reads exactly the output-cache words it spans
    (a flag set one byte late would read a word of no bytes after the row's last)."""
    rng = random.Random(5)
    obuf = np.array([rng.randrange(256) for _ in range(CFG.obuf_bytes)], np.uint8)
    mem = bytearray(8192)
    ops = []
    for off in range(8):
        for cols in range(1, 18):
            regs = {"src_stride": 40, "src_stride3": 0, "ext_stride": 24, "ext_stride3": 0}
            ext = 48 * len(ops) + rng.randrange(8)
            ops.append((regs, dict(src=off + 8 * rng.randrange(4), ext=ext, n3=1, rows=2,
                                   cols=cols)))
    reads = []
    _check_against_golden(ops, obuf, mem, rng, reads)
    spanned = [2 * -(-(args["src"] % 8 + args["cols"]) // 8) for _, args in ops]
    assert reads == spanned


@pytest.mark.parametrize("case,code", [("range", ErrorCode.RANGE), ("range-late", ErrorCode.RANGE),
                                       ("range-plane", ErrorCode.RANGE),
                                       ("bus", ErrorCode.STORE_BUS)])
def test_errors(case, code):
    """A source row past the output cache faults RANGE, whether it is the first row, a later
    row of a plane or the first row of a later plane (each row's end is checked as the row
    before it is queued)."""
    rng = random.Random(0)
    obuf = np.zeros(CFG.obuf_bytes, np.uint8)
    regs = {"src_stride": 0, "src_stride3": 0, "ext_stride": 16, "ext_stride3": 48}
    args = dict(src=0, ext=64, n3=1, rows=1, cols=16)
    if case == "range":
        args["src"] = CFG.obuf_bytes - 8
    elif case == "range-late":     # plane 1's second row ends 8 bytes past the cache
        regs.update(src_stride=16, src_stride3=CFG.obuf_bytes - 24)
        args.update(n3=2, rows=2)
    elif case == "range-plane":    # plane 2's first row ends 1 byte past the cache
        regs.update(src_stride=0, src_stride3=CFG.obuf_bytes // 2 - 8)
        args.update(src=7, n3=3, rows=2)
    errors = _run([(regs, args)], obuf, bytearray(4096), rng,
                  error_ranges=[(64, 72)] if case == "bus" else ())
    assert errors == [code]
