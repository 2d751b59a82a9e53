"""Dispatcher: the RTL legality check agrees with the ISA's decoder on random words, and legal
words become the microinstruction of the right unit."""


from hypothesis import given, settings
from hypothesis import strategies as st

from snpu.errors import IllegalInstruction
from snpu.rtl.dispatch import Dispatcher
from snpu.rtl.microcode import UNITS, op_codes
from snpu.rtl.status import ErrorCode
from snpu.verif import isa

from ..verif.strategies import legal_instr
from snpu.verif.tb.amaranth_sim import simulate


def _dispatch(words):
    """Feed words; return [(unit, micro)] until an error; and the error (code, pc)."""
    dut = Dispatcher()
    out = []
    res = {}

    async def driver(ctx):
        ctx.set(dut.units_idle, 1)
        for u in UNITS:
            ctx.set(dut.queue(u).ready, 1)
        for pc, w in enumerate(words):
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, {"word": w, "pc": pc, "error": 0})
            await ctx.tick()
            if ctx.get(dut.error) != ErrorCode.NONE:
                break
        ctx.set(dut.i.valid, 0)
        await ctx.tick().repeat(2)
        res["error"], res["pc"] = ctx.get(dut.error), ctx.get(dut.error_pc)

    async def monitor(ctx):
        while True:
            _, _, *v = await ctx.tick().sample(*[dut.queue(u).valid for u in UNITS],
                                               *[dut.queue(u).payload for u in UNITS])
            for k, u in enumerate(UNITS):
                if v[k]:
                    out.append((u, v[len(UNITS) + k]))

    simulate(dut, driver, processes=[monitor], deadline_cycles=10 * len(words) + 100)
    return out, res


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.integers(0, (1 << 128) - 1),
                          legal_instr().map(isa.encode)), min_size=1, max_size=12))
def test_legality_matches_the_isa(words):
    expected = []
    first_bad = None
    for pc, w in enumerate(words):
        try:
            ins = isa.decode(w)
        except IllegalInstruction:
            first_bad = pc
            break
        if ins.op == "halt":
            break
        if ins.unit is not None:
            expected.append(ins)
    out, res = _dispatch(words)
    if first_bad is not None:
        assert res == {"error": ErrorCode.ILLEGAL, "pc": first_bad}
    else:
        assert res["error"] == ErrorCode.NONE
    assert [u for u, _ in out] == [i.unit for i in expected]
    for (u, micro), ins in zip(out, expected):
        assert micro.op == op_codes(u)[ins.op]
        assert micro.wait == sum(1 << int(x) for x in ins.wait)
        assert micro.signal == sum(1 << int(x) for x in ins.signal)
        if ins.op == "cfg":
            reg = isa.REGISTER_BY_NUMBER[ins.reg]
            assert (micro.args.cfg.index, micro.args.cfg.value) == (reg.index, ins.value)
        else:
            member = getattr(micro.args, ins.op)
            for f in ins.opcode.fields:
                assert getattr(member, f.name) == ins.args[f.name], f.name
