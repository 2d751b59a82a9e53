"""MX unit (controller + lanes + accumulators) against the golden fc, with accumulation."""

import numpy as np
import pytest
from amaranth import *

from snpu.config import CoreConfig
from snpu.errors import ExecutionError
from snpu.rtl.acc import Accumulators
from snpu.rtl.mx_unit import MatrixController
from snpu.rtl.status import ErrorCode
from snpu.verif import gen, isa
from snpu.verif.golden import Machine

from snpu.verif.tb.amaranth_sim import seeded, simulate

CFG = CoreConfig(lanes=4, nbuf_bytes=2048, nidx_bytes=512, wbuf_bytes=2048, widx_bytes=1024,
                 acc_words=64, obuf_bytes=256, param_rows=4)


class MxHarness(Elaboratable):
    def __init__(self, c, acc0):
        self.mx = MatrixController(c)
        self.acc = Accumulators(c)
        for g, bank in enumerate(self.acc._banks):
            bank.init = [int(v) for v in acc0.reshape(-1, c.lanes)[:, g]]

    def elaborate(self, platform):
        m = Module()
        m.submodules.mx, m.submodules.acc = self.mx, self.acc
        from amaranth.lib import wiring
        for g in range(len(self.acc._banks)):
            wiring.connect(m, self.mx.acc_w[g], self.acc.mx_w[g])
            wiring.connect(m, self.mx.acc_rd[g], self.acc.mx_rd[g])
            m.d.comb += self.mx.acc_rd_data[g].eq(self.acc.mx_rd_data[g])
        return m


async def _load(ctx, mx, case):
    for name in ("nbuf", "nidx"):
        port = getattr(mx, f"{name}_w")
        full = (1 << len(port.en)) - 1
        for a, w in enumerate(np.ascontiguousarray(getattr(case, name)).view("<u8")):
            if w:
                ctx.set(port.addr, a)
                ctx.set(port.data, int(w))
                ctx.set(port.en, full)
                await ctx.tick()
        ctx.set(port.en, 0)
    for name in ("wbuf", "widx"):
        port = getattr(mx, f"{name}_w")
        for g in range(case.config.lanes):
            ctx.set(mx.w_lane, g)
            for a, w in enumerate(np.ascontiguousarray(getattr(case, name)[g]).view("<u8")):
                if w:
                    ctx.set(port.addr, a)
                    ctx.set(port.data, int(w))
                    ctx.set(port.en, 0xFF)
                    await ctx.tick()
            ctx.set(port.en, 0)


async def _take(ctx, mx, args) -> None:
    """As the unit's front end does: the register file's last cfg write is seen a cycle
    (the cfg's SIGNAL cycle) before the fc is taken (``taking``, ``taken``, in IDLE), and
    the fc starts the cycle after at the earliest (WAIT)."""
    await ctx.tick()
    ctx.set(mx.taken, args)
    ctx.set(mx.taking, 1)
    await ctx.tick()
    ctx.set(mx.taking, 0)
    ctx.set(mx.args, args)


def _regs(case):
    r = case.regs
    return {"nfmt": r["mx.nfmt"], "npacked": r["mx.npacked"], "wfmt": r["mx.wfmt"],
            "nvec": r["mx.nvec"], "nstride": r["mx.nstride"], "nidx_stride": r["mx.nidx_stride"],
            "acc_stride": r["mx.acc_stride"], "mixed": r["mx.mixed"]}


@pytest.mark.parametrize("accumulate", [0, 1])
@pytest.mark.parametrize("seed", range(3))
@seeded
def test_fc_with_accumulation(accumulate, seed):
    rng = np.random.default_rng(seed)
    fmts = [("direct", "direct"), ("direct", "stride"), ("stride", "stride")][seed]
    case = gen.random_fc_case(rng, CFG, nfmt=fmts[0], wfmt=fmts[1], npacked=int(fmts[0] == "stride"),
                              mixed=int(fmts == ("direct", "stride")),
                              n_in=int(rng.integers(20, 150)), rows=int(rng.integers(1, 12)), nvec=2)
    acc0 = rng.integers(-2**31, 2**31, CFG.acc_elems).astype(np.int32)
    instr = isa.make("fc", **{**case.instr.args, "acc": 8, "accumulate": accumulate})
    h = MxHarness(CFG, acc0)
    out = {}

    async def driver(ctx):
        await _load(ctx, h.mx, case)
        ctx.set(h.mx.regs, _regs(case))
        ctx.set(h.mx.regs_file, _regs(case))
        await _take(ctx, h.mx, instr.args)
        ctx.set(h.mx.start, 1)
        await ctx.tick()
        ctx.set(h.mx.start, 0)
        await ctx.tick().until(h.mx.done)
        out["error"] = ctx.get(h.mx.error)
        await ctx.tick()   # (the pair counters add the instruction's the cycle after done)
        out["pairs"], out["dense"] = ctx.get(h.mx.pairs), ctx.get(h.mx.dense_pairs)
        acc = np.zeros(CFG.acc_elems, np.int64)
        for g, bank in enumerate(h.acc._banks):
            for row in range(CFG.acc_words):
                acc[row * CFG.lanes + g] = ctx.get(bank.data[row])
        out["acc"] = acc.astype(np.int32)

    simulate(h, driver)
    gold = Machine(CFG, np.zeros(64, np.uint8))
    gold.nbuf[:], gold.nidx[:], gold.wbuf[:], gold.widx[:] = case.nbuf, case.nidx, case.wbuf, case.widx
    gold.acc[:] = acc0
    gold.regs.update(case.regs)
    gold.execute(instr)
    assert out["error"] == ErrorCode.NONE
    np.testing.assert_array_equal(out["acc"], gold.acc)
    assert out["pairs"] == gold.stats.mac_pairs and out["dense"] == gold.stats.dense_pairs


@pytest.mark.parametrize("bad,code", [("acc", ErrorCode.ALIGN), ("widx", ErrorCode.ALIGN),
                                      ("range", ErrorCode.RANGE), ("vectors", ErrorCode.RANGE),
                                      ("neurons", ErrorCode.RANGE),
                                      ("and_stride", ErrorCode.FORMAT),
                                      ("dense_stride", ErrorCode.FORMAT),
                                      ("merge_direct", ErrorCode.FORMAT)])
def test_operand_checks(bad, code):
    """Each check the MX unit makes at start; a weight index the lanes would have to convert
    (stride weights on the AND path, direct weights into the merge) is ``FORMAT``, before any
    other check (``acc`` misaligned too), as in the golden model."""
    rng = np.random.default_rng(0)
    fmts = {"dense_stride": ("dense", "stride", 0), "and_stride": ("direct", "stride", 0),
            "merge_direct": ("stride", "direct", 1)}.get(bad, ("direct", "direct", 0))
    case = gen.random_fc_case(rng, CFG, nfmt=fmts[0], wfmt=fmts[1], mixed=fmts[2], n_in=64,
                              rows=4, nvec=2 if bad == "vectors" else 1)
    args = dict(case.instr.args)
    if fmts[1:] != ("direct", 0):
        args["acc"] = 2
    if bad == "vectors":  # the last vector's outputs run past the accumulators
        case.regs["mx.acc_stride"] = CFG.acc_elems - 2 * CFG.lanes
        args["acc"] = 2 * CFG.lanes
    elif bad == "neurons":  # the vector's last 32 neurons lie past the neuron buffer
        args["nbuf"] = CFG.nbuf_bytes - 32
    elif bad == "acc":
        args["acc"] = 2
    elif bad == "widx":
        args["widx"] = 3
    else:
        args["acc"] = CFG.acc_elems - 2 * CFG.lanes
        args["rows"] = 3 * CFG.lanes
    h = MxHarness(CFG, np.zeros(CFG.acc_elems, np.int32))
    out = {}

    async def driver(ctx):
        ctx.set(h.mx.regs, _regs(case))
        ctx.set(h.mx.regs_file, _regs(case))
        await _take(ctx, h.mx, args)
        ctx.set(h.mx.start, 1)
        await ctx.tick()
        ctx.set(h.mx.start, 0)
        await ctx.tick().until(h.mx.done)
        out["error"] = ctx.get(h.mx.error)

    simulate(h, driver, deadline_cycles=5000)
    assert out["error"] == code
    gold = Machine(CFG, np.zeros(64, np.uint8))
    gold.regs.update(case.regs)
    with pytest.raises(ExecutionError) as e:
        gold.execute(isa.make("fc", **args))
    assert e.value.fault == code.name
