"""The bit helpers of rtl/bits.py against Python, on edge values and random words."""

import random

import pytest
from amaranth import Elaboratable, Module, Signal
from amaranth.sim import Simulator

from snpu.rtl.bits import (at_most_flags, at_most_one, at_most_two, below, lowest_set,
                            lowest_set_index, one_hots, set_count_flags, sum_below,
                            thermometer)
from snpu.rtl.skid import room_flag


class _Helpers(Elaboratable):
    """The helpers on one ``width``-bit input, as combinational outputs."""

    def __init__(self, width: int):
        self.value = Signal(width)
        self.one = Signal()
        self.two = Signal()
        # the same from four slices' flags (the connection unit's two stages, here unregistered)
        self.one_sliced = Signal()
        self.two_sliced = Signal()
        self.low = Signal(width)
        self.index = Signal(range(width))

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.one.eq(at_most_one(self.value)), self.two.eq(at_most_two(m, self.value)),
                     self.low.eq(lowest_set(self.value)),
                     self.index.eq(lowest_set_index(self.value))]
        if len(self.value) % 4 == 0:
            one, two = at_most_flags(m, set_count_flags(m, self.value, 4))
            m.d.comb += [self.one_sliced.eq(one), self.two_sliced.eq(two)]
        else:
            m.d.comb += [self.one_sliced.eq(self.one), self.two_sliced.eq(self.two)]
        return m


@pytest.mark.parametrize("width", [1, 2, 8, 64])
def test_helpers_match_python(width):
    rng = random.Random(width)
    values = {0, (1 << width) - 1, 1, 1 << (width - 1)}
    values |= {1 << k for k in range(width)}
    # two and three bits: every placement up to 16 bits; at 64, every placement among the
    # positions at the edges of the 16-bit slices (set_count_flags' slices) and where two
    # bits sit within four places of each other, and random placements besides
    edges = sorted({p for s in range(0, width, 16) for p in (s, s + 1, s + 14, s + 15)
                    if p < width}) if width > 16 else range(width)
    values |= {(1 << k) | (1 << j) for k in edges for j in edges if j < k}
    values |= {(1 << k) | (1 << j) | (1 << i) for k in edges for j in edges for i in edges
               if i < j < k}
    values |= {(1 << k) | (1 << (k - d)) for k in range(width) for d in range(1, 5) if k >= d}
    values |= {sum(1 << p for p in rng.sample(range(width), n)) for n in (2, 3)
               for _ in range(200 if width > 16 else 0)}
    values |= {rng.getrandbits(width) for _ in range(300)}
    dut = _Helpers(width)
    sim = Simulator(dut)
    failures = []

    async def bench(ctx):
        for v in sorted(values):
            ctx.set(dut.value, v)
            low = v & -v
            n = bin(v).count("1")
            want = (n <= 1, n <= 2, n <= 1, n <= 2, low, low.bit_length() - 1 if v else width - 1)
            got = (bool(ctx.get(dut.one)), bool(ctx.get(dut.two)), bool(ctx.get(dut.one_sliced)),
                   bool(ctx.get(dut.two_sliced)), ctx.get(dut.low), ctx.get(dut.index))
            if got != want:
                failures.append((v, got, want))

    sim.add_testbench(bench)
    sim.run()
    assert not failures, failures[:5]


def test_lowest_set_index_needs_a_power_of_two_width():
    with pytest.raises(ValueError, match="not a power of two"):
        lowest_set_index(Signal(12))


@pytest.mark.parametrize("width", [2, 8, 16, 64])
def test_thermometer_and_one_hots_match_python(width):
    """Every value of :func:`thermometer`; :func:`one_hots` of up to four offsets, each
    enabled or not, on random draws and on all offsets equal."""
    bits = (width - 1).bit_length()
    value = Signal(bits)
    offsets = [Signal(bits, name=f"off{k}") for k in range(4)]
    enables = Signal(4)
    m = Module()
    therm = thermometer(m, value, width)
    hots = one_hots(m, offsets, enables, width)
    sim = Simulator(m)
    rng = random.Random(width)
    failures = []

    async def bench(ctx):
        for v in range(1 << bits):
            ctx.set(value, v)
            want = (1 << (v + 1)) - 1 if v < width else (1 << width) - 1
            if ctx.get(therm) != want:
                failures.append(("thermometer", v, ctx.get(therm), want))
        draws = [[rng.randrange(width) for _ in range(4)] for _ in range(200)]
        draws += [[o] * 4 for o in range(width)]
        for offs in draws:
            en = rng.getrandbits(4)
            for s, o in zip(offsets, offs):
                ctx.set(s, o)
            ctx.set(enables, en)
            want = 0
            for k, o in enumerate(offs):
                if en >> k & 1:
                    want |= 1 << o
            if ctx.get(hots) != want:
                failures.append(("one_hots", offs, en, ctx.get(hots), want))

    sim.add_testbench(bench)
    sim.run()
    assert not failures, failures[:5]


@pytest.mark.parametrize("width", [1, 3, 6])
def test_below_matches_python(width):
    """:func:`below` for every value of a ``width``-bit signal and every bound from below 0
    to past the largest value."""
    value = Signal(width)
    bounds = list(range(-1, (1 << width) + 2))
    m = Module()
    flags = [Signal(name=f"below{i}") for i in range(len(bounds))]
    m.d.comb += [f.eq(below(value, k)) for f, k in zip(flags, bounds)]
    sim = Simulator(m)
    failures = []

    async def bench(ctx):
        for v in range(1 << width):
            ctx.set(value, v)
            for f, k in zip(flags, bounds):
                if ctx.get(f) != (v < k):
                    failures.append((v, k, ctx.get(f)))

    sim.add_testbench(bench)
    sim.run()
    assert not failures, failures[:5]
    with pytest.raises(ValueError, match="up to 6 bits"):
        below(Signal(7), 3)


def test_sum_below_matches_python():
    """:func:`sum_below` of a 3-bit base and three one-bit terms (one of them subtracted,
    as its complement with the bound one higher), for every input and several bounds."""
    base, terms = Signal(3), Signal(3)
    bounds = list(range(0, 12))
    m = Module()
    flags = [Signal(name=f"sum_below{i}") for i in range(len(bounds))]
    m.d.comb += [f.eq(sum_below(base, [terms[0], terms[1], ~terms[2]], k + 1))
                 for f, k in zip(flags, bounds)]
    sim = Simulator(m)
    failures = []

    async def bench(ctx):
        for b in range(8):
            for t in range(8):
                ctx.set(base, b)
                ctx.set(terms, t)
                total = b + (t & 1) + (t >> 1 & 1) - (t >> 2 & 1)
                for f, k in zip(flags, bounds):
                    if ctx.get(f) != (total < k):
                        failures.append((b, t, k, ctx.get(f)))

    sim.add_testbench(bench)
    sim.run()
    assert not failures, failures[:5]


@pytest.mark.parametrize("depth", [1, 2, 4, 5])
def test_room_flag_counts_pushes_and_pops(depth):
    """:func:`~snpu.rtl.skid.room_flag` against a counter, on random pushes and pops that
    keep the count in 0..depth (pushes only while the flag is up, as its users do)."""
    push, pop = Signal(), Signal()
    m = Module()
    flag = room_flag(m, depth, push, pop)
    sim = Simulator(m)
    sim.add_clock(1e-6)
    rng = random.Random(depth)
    failures = []

    async def bench(ctx):
        held = 0
        for cycle in range(400):
            if ctx.get(flag) != (held < depth):
                failures.append((cycle, held, ctx.get(flag)))
            p = int(held < depth and rng.random() < 0.6)
            q = int(held + p > 0 and rng.random() < 0.5) if held > 0 else 0
            ctx.set(push, p)
            ctx.set(pop, q)
            await ctx.tick()
            held += p - q

    sim.add_testbench(bench)
    sim.run()
    assert not failures, failures[:5]
