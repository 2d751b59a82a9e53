"""Stride -> direct converter fed by the byte fetcher, against the index library."""

import random

import numpy as np
import pytest

from amaranth import *

from snpu.rtl.fetch import ByteFetcher
from snpu.rtl.stride_to_direct import StrideToDirect
from snpu.verif import index as ix

from .harness import WithMemory, words_of
from snpu.verif.tb.amaranth_sim import seeded, simulate, stream_get


class FetchConvert(Elaboratable):
    def __init__(self, window):
        self.fetch = ByteFetcher(window)
        self.conv = StrideToDirect(window)

    def elaborate(self, platform):
        m = Module()
        m.submodules.fetch, m.submodules.conv = self.fetch, self.conv
        m.d.comb += [self.conv.bytes.eq(self.fetch.bytes), self.conv.escape.eq(self.fetch.escape),
                     self.conv.avail.eq(self.fetch.avail),
                     self.fetch.take.eq(self.conv.take)]
        return m


def _row(rng, nrng, n):
    density = rng.choice([0.0, 0.01, 0.1, 0.5, 1.0])
    bits = nrng.random(n) < density
    kind = rng.random()
    if kind < 0.1 and n:
        bits[:] = False
        bits[rng.choice([0, n - 1])] = True
    return bits


def _few(rng, n, k):
    """A row of ``n`` positions with exactly ``k`` elements."""
    bits = np.zeros(n, bool)
    bits[rng.sample(range(n), k)] = True
    return bits


@pytest.mark.parametrize("window", [1, 2, 3, 4])
@pytest.mark.parametrize("seed", range(4))
@seeded
def test_rows_match_index_library(window, seed):
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    rows = [_row(rng, nrng, rng.choice([0, 1, 63, 64, 65, 300, 700])) for _ in range(8)]
    _check_rows(window, rows, rng)


@pytest.mark.parametrize("window", [1, 2, 3, 4])
def test_every_small_count(window):
    """Rows of 0 to 10 elements: every count below, at and between the window's multiples
    (a row's first take is capped by its count)."""
    rng = random.Random(window)
    _check_rows(window, [_few(rng, 150, k) for k in range(11)], rng)


def _check_rows(window, rows, rng):
    blob, offsets = b"", []
    for bits in rows:
        offsets.append(len(blob))
        blob += ix.encode_stride(ix.direct_to_stride(bits))
    top = FetchConvert(window)
    f, c = top.fetch, top.conv
    mem = WithMemory(top, {"mem": words_of(blob, len(blob) // 8 + 2)},
                     {"mem": (f.mem_addr, f.mem_en, f.mem_data)})
    packed = [rng.randrange(2) for _ in rows]
    got = []

    async def driver(ctx):
        for bits, off, pk in zip(rows, offsets, packed):
            ctx.set(f.start, 1)
            ctx.set(f.start_addr, off + 2)  # skip the count; the side source reads it
            await ctx.tick()
            ctx.set(f.start, 0)
            count = int.from_bytes(blob[off:off + 2], "little")
            ctx.set(c.start, 1)
            ctx.set(c.n, bits.size)
            ctx.set(c.count, count)
            ctx.set(c.val_base, 100)
            ctx.set(c.packed, pk)
            await ctx.tick()
            ctx.set(c.start, 0)
            chunks = []
            while True:
                p = await stream_get(ctx, c.o, rng, 0.3)
                chunks.append((p.bits, p.base))
                if p.last:
                    break
            assert not ctx.get(c.error)
            got.append(chunks)

    simulate(mem, driver)
    for bits, pk, chunks in zip(rows, packed, got):
        n = bits.size
        assert len(chunks) == max(1, -(-n // 64))
        want_bits = np.zeros(64 * len(chunks), bool)
        want_bits[:n] = bits
        for k, (b, base) in enumerate(chunks):
            seg = want_bits[64 * k:64 * k + 64]
            assert b == sum(int(x) << j for j, x in enumerate(seg)), (n, k)
            assert base == 100 + (int(want_bits[:64 * k].sum()) if pk else 64 * k)


@pytest.mark.parametrize("positions, n", [
    ([10, 110], 64),      # past the last chunk
    ([10, 75], 70),       # inside the last chunk, past n
    ([60, 75], 70),       # in the same group as an element of the chunk before
    ([3], 0),             # an empty row
    ([5, 200, 300], 200),  # at n, two chunks on
])
@pytest.mark.parametrize("window", [2, 4])
def test_position_beyond_the_row_is_an_error_not_a_hang(positions, n, window):
    """A position at or past ``n``: the row still ends after its ``max(1, ceil(n / 64))``
    chunks, the last one marked, and ``error`` is set."""
    blob = ix.encode_stride(np.diff(np.array(positions), prepend=0))
    top = FetchConvert(window)
    f, c = top.fetch, top.conv
    mem = WithMemory(top, {"mem": words_of(blob, len(blob) // 8 + 2)},
                     {"mem": (f.mem_addr, f.mem_en, f.mem_data)})
    result = {"chunks": 0}

    async def driver(ctx):
        ctx.set(f.start, 1)
        ctx.set(f.start_addr, 2)
        await ctx.tick()
        ctx.set(f.start, 0)
        ctx.set(c.start, 1)
        ctx.set(c.n, n)
        ctx.set(c.count, int.from_bytes(blob[:2], "little"))
        await ctx.tick()
        ctx.set(c.start, 0)
        while True:
            p = await stream_get(ctx, c.o)
            result["chunks"] += 1
            if p.last:
                break
        await ctx.tick()
        result["error"] = ctx.get(c.error)
        result["busy"] = ctx.get(c.busy)

    simulate(mem, driver, deadline_cycles=1000)
    assert result == {"chunks": max(1, -(-n // 64)), "error": 1, "busy": 0}


@pytest.mark.parametrize("window", [2, 4])
def test_a_row_after_an_erroneous_one_starts_clean(window):
    """A row that ends early on an error (entries still untaken: [10, 110] in a row of
    64, with a long tail the window has begun to take) and a good row started at once after
    it: the good row's chunks are exact and its error clear (nothing of the first row's
    taken group leaks into the second's positions)."""
    bad = ix.encode_stride(np.diff(np.array([10, 110, 120, 130, 140, 150, 160]), prepend=0))
    good_bits = np.zeros(140, bool)
    good_bits[[0, 3, 63, 64, 100, 139]] = True
    good = ix.encode_stride(ix.direct_to_stride(good_bits))
    blob = bad + good
    top = FetchConvert(window)
    f, c = top.fetch, top.conv
    mem = WithMemory(top, {"mem": words_of(blob, len(blob) // 8 + 2)},
                     {"mem": (f.mem_addr, f.mem_en, f.mem_data)})
    result = {}

    async def row(ctx, off, n, count):
        ctx.set(f.start, 1)
        ctx.set(f.start_addr, off + 2)
        await ctx.tick()
        ctx.set(f.start, 0)
        ctx.set(c.start, 1)
        ctx.set(c.n, n)
        ctx.set(c.count, count)
        ctx.set(c.val_base, 0)
        ctx.set(c.packed, 0)
        await ctx.tick()
        ctx.set(c.start, 0)
        chunks = []
        while True:
            p = await stream_get(ctx, c.o)
            chunks.append(p.bits)
            if p.last:
                break
        while ctx.get(c.busy):
            await ctx.tick()
        return chunks, ctx.get(c.error)

    async def driver(ctx):
        result["bad"] = await row(ctx, 0, 64, int.from_bytes(bad[:2], "little"))
        result["good"] = await row(ctx, len(bad), 140, int.from_bytes(good[:2], "little"))

    simulate(mem, driver, deadline_cycles=2000)
    assert result["bad"][1] == 1
    want = [sum(int(x) << j for j, x in enumerate(np.pad(good_bits, (0, 52))[64 * k:64 * k + 64]))
            for k in range(3)]
    assert result["good"] == (want, 0)
