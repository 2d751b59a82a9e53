"""VX unit (with the real accumulator, parameter and output-cache memories) against the golden
model's vred / vew / vewp / req."""

import random

import numpy as np
import pytest
from amaranth import *

from snpu.config import CoreConfig
from snpu.errors import ExecutionError
from snpu.rtl.acc import Accumulators
from snpu.rtl.buffers import OutputCache, ParamMemory
from snpu.rtl.microcode import op_codes
from snpu.rtl.status import ErrorCode
from snpu.rtl.vx_unit import VectorUnit
from snpu.verif import isa, numerics
from snpu.verif.golden import Machine
from snpu.verif.isa import Unit

from snpu.verif.tb.amaranth_sim import seeded, simulate

CODES = op_codes(Unit.VX)
#: cycles the timing model counts for a VX instruction before the unit's start
DISPATCH = 3
REGS = ("src_stride", "dst_stride", "k1_stride", "k2_stride", "b_stride")


class VxHarness(Elaboratable):
    def __init__(self, c: CoreConfig, acc: np.ndarray, param: np.ndarray):
        self.c = c
        self.vx = VectorUnit(c)
        self.acc = Accumulators(c)
        self.prm = ParamMemory(c)
        self.obuf = OutputCache(c)
        P = c.lanes
        rows = acc.reshape(-1, P)
        for g, bank in enumerate(self.acc._banks):
            bank.init = [int(v) for v in rows[:, g]]
        words = param.view("<u8")
        for g, bank in enumerate(self.prm._banks):
            bank.init = [int(w) for w in words[g::P]]

    def elaborate(self, platform):
        m = Module()
        m.submodules.vx, m.submodules.acc = self.vx, self.acc
        m.submodules.prm, m.submodules.obuf = self.prm, self.obuf
        vx, acc, prm, ob = self.vx, self.acc, self.prm, self.obuf
        m.d.comb += [
            acc.vx_rd_en.eq(vx.acc_rd_en), acc.vx_rd_row.eq(vx.acc_rd_row),
            vx.acc_rd_data.eq(acc.vx_rd_data), acc.vx_wr_en.eq(vx.acc_wr_en), acc.vx_wr.eq(vx.acc_wr),
            prm.r_en.eq(vx.prm_en), prm.r_row.eq(vx.prm_row), vx.prm_data.eq(prm.r_data),
            ob.w_en.eq(vx.obuf_en), ob.w_addr.eq(vx.obuf_addr), ob.w_data.eq(vx.obuf_data),
        ]
        return m


def _read_state(ctx, h: VxHarness):
    """Final acc and obuf, read through the memories' simulation view."""
    c = h.c
    P = c.lanes
    acc = np.zeros(c.acc_elems, np.int64)
    for g, bank in enumerate(h.acc._banks):
        for row in range(c.acc_words):
            acc[row * P + g] = ctx.get(bank.data[row])
    obuf = np.zeros(c.obuf_bytes, np.uint8)
    nb = len(h.obuf._banks)
    for b, bank in enumerate(h.obuf._banks):
        for row in range(bank.depth):
            word = ctx.get(bank.data[row])
            w = row * nb + b
            obuf[8 * w:8 * w + 8] = np.frombuffer(int(word).to_bytes(8, "little"), np.uint8)
    return acc.astype(np.int32), obuf


def _random_op(rng, c: CoreConfig):
    P = c.lanes
    words = c.acc_words
    kind = rng.choice(["vred", "vew", "vewp", "req"])
    regs = {k: P * rng.randrange(0, 4) for k in REGS}
    if kind == "vred":
        n_o, n_i, k1, k2 = rng.randrange(1, 4), rng.randrange(1, 3), rng.randrange(1, 4), rng.randrange(1, 3)
        regs.update(src_stride=P * rng.randrange(0, 3), k1_stride=P * rng.randrange(1, 3),
                    k2_stride=P * rng.randrange(1, 5), dst_stride=P * n_i)
        src = 0
        dst = P * (words // 2)
        args = dict(mode=rng.randrange(2), dst=dst, src=src, n_o=n_o, n_i=n_i, k1=k1, k2=k2)
    elif kind == "vew":
        n_o, n_i = rng.randrange(1, 4), rng.randrange(1, 3)
        regs.update(dst_stride=P * n_i)
        args = dict(dst=P * (words // 2), a=0, b=P * rng.randrange(0, 8), n_o=n_o, n_i=n_i,
                    ma=rng.randrange(-300, 300), mb=rng.randrange(-300, 300), relu=rng.randrange(2))
    elif kind == "vewp":
        n_o, n_i = rng.randrange(1, 4), rng.randrange(1, 3)
        regs.update(dst_stride=P * n_i)
        args = dict(dst=P * (words // 2), a=0, b=P * rng.randrange(0, 8), n_o=n_o, n_i=n_i,
                    param=rng.randrange(c.param_rows), relu=rng.randrange(2))
    else:
        n_o, n_i = rng.randrange(1, 4), rng.randrange(1, 3)
        regs.update(dst_stride=P * n_i)
        args = dict(dst=P * rng.randrange(0, 4), src=P * rng.randrange(0, 8),
                    param=rng.randrange(0, c.param_rows - n_i + 1), n_o=n_o, n_i=n_i,
                    relu=rng.randrange(2))
    return kind, regs, args


@pytest.mark.parametrize("lanes,vx_lanes", [(4, 0), (8, 0), (16, 0),
                                            # a VX unit narrower than the lanes: slices
                                            (4, 1), (4, 2), (8, 2), (16, 4), (16, 8)])
@pytest.mark.parametrize("seed", range(3))
@seeded
def test_vector_ops_match_golden(lanes, vx_lanes, seed):
    rng = random.Random(seed)
    c = _config(lanes, vx_lanes)
    _check_ops(c, seed, [_random_op(rng, c) for _ in range(6)])


def _config(lanes, vx_lanes=0):
    return CoreConfig(lanes=lanes, nbuf_bytes=1024, nidx_bytes=256, wbuf_bytes=512,
                      widx_bytes=256, acc_words=32, obuf_bytes=512, param_rows=8,
                      vx_lanes=vx_lanes)


@pytest.mark.parametrize("k1,k2", [(2, 1), (3, 1), (1, 2), (2, 3), (3, 2)])
@pytest.mark.parametrize("mode,vx_lanes", [(0, 0), (1, 0), (0, 2), (1, 1)])
def test_pooling_windows_match_golden(k1, k2, mode, vx_lanes):
    """vred over every window shape up to 3 x 3, two outer iterations of two words (the
    window's counters wrap inside the word and word counters; with slices, inside the
    slice counter)."""
    c = _config(4, vx_lanes)
    P = c.lanes
    regs = {"src_stride": 3 * P, "dst_stride": 2 * P, "k1_stride": P, "k2_stride": 5 * P,
            "b_stride": 0}
    args = dict(mode=mode, dst=P * (c.acc_words // 2), src=0, n_o=2, n_i=2, k1=k1, k2=k2)
    _check_ops(c, 10 * k1 + k2, [("vred", regs, args)])


def _check_ops(c, seed, ops):
    """Run ``ops`` (kind, registers, operands) on the VX unit from random accumulators and
    parameters; its accumulators and output cache must equal the golden model's, and
    every instruction's cycles from its start to its ``done`` the timing model's less
    :data:`DISPATCH` (the cycles the timing model counts before the unit starts)."""
    lanes = c.lanes
    nrng = np.random.default_rng(seed)
    acc0 = nrng.integers(-2**20, 2**20, c.acc_elems).astype(np.int32)
    acc0[::7] = nrng.integers(-2**31, 2**31, acc0[::7].size)
    nch = c.param_rows * lanes
    param = numerics.pack_params(nrng.integers(-5000, 5000, nch), nrng.integers(-2**15, 2**15, nch),
                                 nrng.integers(0, 48, nch))
    # half the rows hold vewp multipliers (req reads them as well: bias ma | mb << 16)
    rb = c.param_row_bytes
    for row in range(0, c.param_rows, 2):
        param[row * rb:(row + 1) * rb] = numerics.pack_ew_multipliers(
            int(nrng.integers(-2**15, 2**15)), int(nrng.integers(-2**15, 2**15)), rb)
    h = VxHarness(c, acc0, param)
    vx = h.vx
    out = {}

    async def driver(ctx):
        errors, cycles = [], []
        for kind, regs, args in ops:
            ctx.set(vx.regs, regs)
            ctx.set(vx.op, CODES[kind])
            ctx.set(getattr(vx.args, kind), args)
            ctx.set(vx.start, 1)
            await ctx.tick()
            ctx.set(vx.start, 0)
            n = 1
            while not ctx.get(vx.done):
                await ctx.tick()
                n += 1
            await ctx.tick()
            cycles.append(n)
            errors.append(ctx.get(vx.error))
        out["errors"], out["cycles"] = errors, cycles
        out["acc"], out["obuf"] = _read_state(ctx, h)

    simulate(h, driver)
    gold = Machine(c, np.zeros(64, np.uint8))
    gold.acc[:] = acc0
    gold.param[:] = param
    gold_cycles = []
    for kind, regs, args in ops:
        for k, v in regs.items():
            gold.regs[f"vx.{k}"] = v
        gold_cycles.append(gold.execute(isa.make(kind, **args)).cycles)
    assert out["errors"] == [ErrorCode.NONE] * len(ops)
    assert [n + DISPATCH for n in out["cycles"]] == gold_cycles, [k for k, _, _ in ops]
    np.testing.assert_array_equal(out["acc"], gold.acc)
    np.testing.assert_array_equal(out["obuf"], gold.obuf)


@pytest.mark.parametrize("bad,code", [
    ("align", ErrorCode.ALIGN), ("range", ErrorCode.RANGE),
    # range faults found late: the destination at the second outer iteration, vew's b
    # operand at its second word, req's parameter row at its second word
    ("dst_range", ErrorCode.RANGE), ("b_range", ErrorCode.RANGE),
    ("param_range", ErrorCode.RANGE), ("vewp_param", ErrorCode.RANGE)])
def test_errors(bad, code):
    """Each fault is raised with the code the golden model gives it."""
    c = CoreConfig(lanes=4, nbuf_bytes=1024, nidx_bytes=256, wbuf_bytes=512, widx_bytes=256,
                   acc_words=32, obuf_bytes=512, param_rows=8)
    h = VxHarness(c, np.zeros(c.acc_elems, np.int32), np.zeros(c.param_bytes, np.uint8))
    vx = h.vx
    res = {}
    regs = {k: 0 for k in REGS}
    P, end = c.lanes, c.acc_elems
    if bad in ("align", "range"):
        op = "vred"
        args = dict(mode=0, dst=0, src=2 if bad == "align" else end - 4, n_o=1, n_i=2, k1=1,
                    k2=1)
    elif bad == "dst_range":
        op = "vred"
        regs["dst_stride"] = end - P  # o = 1 writes at P + end - P: past the end
        args = dict(mode=0, dst=P, src=0, n_o=2, n_i=1, k1=1, k2=1)
    elif bad == "b_range":
        op = "vew"
        args = dict(dst=0, a=0, b=end - P, n_o=1, n_i=2, ma=1, mb=1, relu=0)
    elif bad == "vewp_param":
        op = "vewp"
        args = dict(dst=0, a=0, b=P, n_o=1, n_i=1, param=c.param_rows, relu=0)
    else:
        op = "req"
        args = dict(dst=0, src=0, param=c.param_rows - 1, n_o=1, n_i=2, relu=0)
    gold = Machine(c, np.zeros(0, np.uint8))
    for k, v in regs.items():
        gold.regs[f"vx.{k}"] = v
    with pytest.raises(ExecutionError) as fault:
        gold.execute(isa.make(op, **args))
    assert fault.value.fault == code.name

    async def driver(ctx):
        ctx.set(vx.regs, regs)
        ctx.set(vx.op, CODES[op])
        ctx.set(getattr(vx.args, op), args)
        ctx.set(vx.start, 1)
        await ctx.tick()
        ctx.set(vx.start, 0)
        await ctx.tick().until(vx.done)
        res["error"] = ctx.get(vx.error)

    simulate(h, driver, deadline_cycles=2000)
    assert res["error"] == code
