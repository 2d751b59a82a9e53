"""The bit helpers of rtl/bits.py against Python, on edge values and random words."""

import random

import pytest
from amaranth import Elaboratable, Module, Signal
from amaranth.sim import Simulator

from snpu.rtl.bits import at_most_one, lowest_set, lowest_set_index


class _Helpers(Elaboratable):
    """The helpers on one ``width``-bit input, as combinational outputs."""

    def __init__(self, width: int):
        self.value = Signal(width)
        self.one = Signal()
        self.low = Signal(width)
        self.index = Signal(range(width))

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.one.eq(at_most_one(self.value)), self.low.eq(lowest_set(self.value)),
                     self.index.eq(lowest_set_index(self.value))]
        return m


@pytest.mark.parametrize("width", [1, 2, 8, 64])
def test_helpers_match_python(width):
    rng = random.Random(width)
    values = {0, (1 << width) - 1, 1, 1 << (width - 1)}
    values |= {1 << k for k in range(width)} | {(1 << k) | (1 << j) for k in range(width)
                                                for j in range(k)}
    values |= {rng.getrandbits(width) for _ in range(300)}
    dut = _Helpers(width)
    sim = Simulator(dut)
    failures = []

    async def bench(ctx):
        for v in sorted(values):
            ctx.set(dut.value, v)
            low = v & -v
            want = (bin(v).count("1") <= 1, low, low.bit_length() - 1 if v else width - 1)
            got = (bool(ctx.get(dut.one)), ctx.get(dut.low), ctx.get(dut.index))
            if got != want:
                failures.append((v, got, want))

    sim.add_testbench(bench)
    sim.run()
    assert not failures, failures[:5]


def test_lowest_set_index_needs_a_power_of_two_width():
    with pytest.raises(ValueError, match="not a power of two"):
        lowest_set_index(Signal(12))
