"""Predecoder: its verdict on a word equals the ISA decoder's, on legal words, on legal words
with a bit flipped (a field out of range, a reserved bit, a token, a cfg register or value)
and on random words; the two-stage version gives the same outputs a cycle later."""

import pytest
from amaranth import Elaboratable, Module, Signal
from hypothesis import given, settings
from hypothesis import strategies as st

from snpu.errors import IllegalInstruction
from snpu.rtl.microcode import UNITS
from snpu.rtl.predecode import Kind, Predecoder
from snpu.verif import isa
from snpu.verif.tb.amaranth_sim import simulate

from ..verif.strategies import legal_instr

_FIELDS = ("legal", "kind", "target", "to_unit", "loop", "wait_idle", "halt")


def _words():
    near = st.tuples(legal_instr().map(isa.encode), st.integers(0, 127)).map(
        lambda t: t[0] ^ (1 << t[1]))
    return st.lists(st.one_of(legal_instr().map(isa.encode), near,
                              st.integers(0, (1 << 128) - 1)), min_size=50, max_size=300)


class _Clocked(Elaboratable):
    """The predecoder in a design with a clock (the combinational one has no register)."""

    def __init__(self, latency):
        self.pre = Predecoder(latency)

    def elaborate(self, platform):
        m = Module()
        m.submodules.pre = self.pre
        tick = Signal()
        m.d.sync += tick.eq(~tick)
        return m


def _run(words, latency):
    """The predecoder's outputs for ``words``, one word a cycle."""
    top = _Clocked(latency)
    dut = top.pre
    got = []

    async def bench(ctx):
        for w in words + [0] * latency:
            ctx.set(dut.word, w)
            values = {f: ctx.get(getattr(dut.out, f)) for f in _FIELDS}
            got.append({f: getattr(v, "value", v) for f, v in values.items()})
            await ctx.tick()

    simulate(top, bench, deadline_cycles=len(words) + 10)
    return got[latency:]


def _expected(w):
    """(legal, kind, unit) of ``w`` by the ISA decoder."""
    try:
        ins = isa.decode(w)
    except IllegalInstruction:
        return False, None, None
    kind = {"loop": Kind.LOOP, "sync": Kind.SYNC, "halt": Kind.HALT}.get(ins.op, Kind.UNIT)
    return True, kind, ins.unit


@settings(max_examples=6, deadline=None)
@given(_words())
def test_the_verdict_is_the_isa_decoders(words):
    for w, out in zip(words, _run(words, 0)):
        legal, kind, unit = _expected(w)
        assert bool(out["legal"]) == legal, f"word {w:#034x}: legal {out['legal']}"
        if not legal:
            assert out["to_unit"] == 0 and not (out["loop"] or out["wait_idle"] or out["halt"])
            continue
        assert out["kind"] == kind.value
        if kind == Kind.UNIT:
            assert out["to_unit"] == 1 << UNITS.index(unit) and out["target"] == UNITS.index(unit)
        assert out["loop"] == (kind == Kind.LOOP)
        assert out["wait_idle"] == (kind in (Kind.SYNC, Kind.HALT))
        assert out["halt"] == (kind == Kind.HALT)


@settings(max_examples=4, deadline=None)
@given(_words())
def test_two_stages_give_the_same_outputs_a_cycle_later(words):
    assert _run(words, 1) == _run(words, 0)


def test_latency_is_checked():
    with pytest.raises(ValueError, match="latency must be 0 or 1, got 2"):
        Predecoder(2)
