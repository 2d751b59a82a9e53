"""Byte fetcher: any start address, any consumption pattern, restarts."""

import random

import pytest

from snpu.rtl.fetch import ByteFetcher, ByteShifter

from .harness import WithMemory, words_of
from snpu.verif.tb.amaranth_sim import seeded, simulate


@pytest.mark.parametrize("window", [1, 4, 8, "shifter"])
@pytest.mark.parametrize("seed", range(3))
@seeded
def test_stream_from_any_address(window, seed):
    rng = random.Random(seed)
    # (a quarter of the bytes 255 and a quarter 0: the escape and zero flags and the first
    # two bytes' zero flag are checked on every window)
    raw = bytes(rng.choice([0, 255, rng.randrange(256), rng.randrange(256)]) for _ in range(512))
    f = ByteShifter(word_addr_bits=6) if window == "shifter" else ByteFetcher(window, word_addr_bits=6)
    top = WithMemory(f, {"mem": words_of(raw, 64)}, {"mem": (f.mem_addr, f.mem_en, f.mem_data)})
    runs = [(rng.randrange(400), rng.randrange(1, 80)) for _ in range(6)]
    got = []

    async def consumer(ctx):
        for start, n in runs:
            ctx.set(f.start, 1)
            ctx.set(f.start_addr, start)
            ctx.set(f.take, 0)
            await ctx.tick()
            ctx.set(f.start, 0)
            out = []
            while len(out) < n:
                avail = ctx.get(f.avail)
                k = min(rng.randrange(0, avail + 1) if rng.random() < 0.3 else avail, n - len(out))
                window_bytes = ctx.get(f.bytes)
                escape = ctx.get(f.escape)
                assert avail <= f.window
                assert all(((escape >> i) & 1) == (window_bytes[i] == 255) for i in range(avail))
                zero = ctx.get(f.zero)
                assert all(((zero >> i) & 1) == (window_bytes[i] == 0) for i in range(avail))
                if avail >= 2:
                    assert ctx.get(f.pair_zero) == (window_bytes[0] == 0 == window_bytes[1])
                out += [window_bytes[i] for i in range(k)]
                ctx.set(f.take, k)
                await ctx.tick()
                ctx.set(f.take, 0)
            got.append(bytes(out))

    simulate(top, consumer)
    assert got == [raw[s:s + n] for s, n in runs]


def test_full_rate_after_the_first_word():
    raw = bytes(range(256))
    f = ByteFetcher(2, word_addr_bits=5)
    top = WithMemory(f, {"mem": words_of(raw, 32)}, {"mem": (f.mem_addr, f.mem_en, f.mem_data)})
    result = {}

    async def consumer(ctx):
        ctx.set(f.start, 1)
        ctx.set(f.start_addr, 3)
        await ctx.tick()
        ctx.set(f.start, 0)
        cycles, taken = 0, []
        while len(taken) < 100:
            a = ctx.get(f.avail)
            b = ctx.get(f.bytes)
            taken += [b[i] for i in range(a)]
            ctx.set(f.take, a)
            await ctx.tick()
            cycles += 1
        result["cycles"], result["bytes"] = cycles, bytes(taken[:100])

    simulate(top, consumer)
    assert result["bytes"] == raw[3:103]
    assert result["cycles"] <= 100 // 2 + 3


@pytest.mark.parametrize("start", [0, 5])
def test_shifter_one_byte_per_cycle(start):
    """The shifter shows a byte every cycle after its first (the next word moves in as the
    last byte of the current one is taken), 3 cycles after an aligned start."""
    raw = bytes(range(256))
    f = ByteShifter(word_addr_bits=5)
    top = WithMemory(f, {"mem": words_of(raw, 32)}, {"mem": (f.mem_addr, f.mem_en, f.mem_data)})
    result = {}

    async def consumer(ctx):
        ctx.set(f.start, 1)
        ctx.set(f.start_addr, start)
        ctx.set(f.take, 0)
        await ctx.tick()
        ctx.set(f.start, 0)
        cycles, taken, first = 0, [], None
        while len(taken) < 100:
            a = ctx.get(f.avail)
            if a and first is None:
                first = cycles
            taken += [ctx.get(f.bytes)[0]] if a else []
            ctx.set(f.take, a)
            await ctx.tick()
            cycles += 1
        result.update(first=first, cycles=cycles, bytes=bytes(taken))

    simulate(top, consumer)
    assert result["bytes"] == raw[start:start + 100]
    assert result["first"] == 2 + start          # (the first read issued with start)
    assert result["cycles"] == result["first"] + 100
