"""Direct -> stride and stride merge against the index library (claims 8 and 10)."""

import random

import numpy as np
import pytest

from snpu.rtl.direct_to_stride import DirectToStride
from snpu.rtl.stride_merge import StrideMerge
from snpu.verif import index as ix

from snpu.verif.tb.amaranth_sim import seeded, simulate, stream_get, stream_put


def _rows(rng, nrng, k):
    rows = []
    for _ in range(k):
        n = rng.choice([1, 63, 64, 65, 200, 700])
        bits = nrng.random(n) < rng.choice([0.0, 0.005, 0.1, 0.6, 1.0])
        rows.append(bits)
    return rows


def _chunks(bits):
    n = bits.size
    padded = np.zeros(64 * max(1, -(-n // 64)), bool)
    padded[:n] = bits
    out = []
    for c in range(padded.size // 64):
        out.append({"bits": sum(int(x) << j for j, x in enumerate(padded[64 * c:64 * c + 64])),
                    "base": 7 if c == 0 else 999, "last": int(c == padded.size // 64 - 1)})
    return out


@pytest.mark.parametrize("seed", range(4))
@seeded
def test_direct_to_stride_entries(seed):
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    rows = _rows(rng, nrng, 6)
    dut = DirectToStride()
    got = []

    async def producer(ctx):
        for r, bits in enumerate(rows):
            for ch in _chunks(bits):
                # (each row's own base, taken from its first chunk: a row's entries still
                # in the pipeline keep theirs while the next row's first chunk is taken)
                await stream_put(ctx, dut.i, {**ch, "base": ch["base"] + 100 * r}, rng, 0.3)

    async def consumer(ctx):
        for r, _ in enumerate(rows):
            entries = []
            while True:
                e = await stream_get(ctx, dut.o, rng, 0.3)
                assert e.base == 7 + 100 * r
                if e.none:
                    assert e.last
                    break
                entries.append(e.value)
            got.append(entries)

    simulate(dut, producer, consumer)
    for bits, entries in zip(rows, got):
        assert entries == ix.stride_entries(ix.direct_to_stride(bits)).tolist()


def test_direct_to_stride_escapes():
    """Distances around one, two and three escapes (254 ... 766 positions, the first from
    position 0 too), inside a chunk and across many empty ones, under back-pressure."""
    rows = []
    for positions, n in [([254], 300), ([255], 300), ([256], 300), ([0, 255, 510, 511], 600),
                         ([509, 1019, 1530], 1600), ([3, 769], 800), ([1999], 2000),
                         ([60, 63, 64, 318, 319, 575], 640)]:
        bits = np.zeros(n, bool)
        bits[positions] = True
        rows.append(bits)
    rng = random.Random(5)
    dut = DirectToStride()
    got = []

    async def producer(ctx):
        for bits in rows:
            for ch in _chunks(bits):
                await stream_put(ctx, dut.i, ch, rng, 0.3)

    async def consumer(ctx):
        for _ in rows:
            entries = []
            while True:
                e = await stream_get(ctx, dut.o, rng, 0.5)
                if e.none:
                    break
                entries.append(e.value)
            got.append(entries)

    simulate(dut, producer, consumer)
    for bits, entries in zip(rows, got):
        want = ix.stride_entries(ix.direct_to_stride(bits)).tolist()
        assert entries == want, np.flatnonzero(bits).tolist()


def _entries(bits, base, addressed=False):
    """A row's stride entries and terminator, each with ``base`` -- or (``addressed``)
    each element with its own value address ``base + rank`` (escapes and the terminator
    with the next element's)."""
    es, rank = [], 0
    for v in ix.stride_entries(ix.direct_to_stride(bits)):
        es.append({"value": int(v), "base": base + rank * addressed, "none": 0, "last": 0})
        rank += int(v) != ix.STRIDE_ESCAPE
    return es + [{"value": 0, "base": base + rank * addressed, "none": 1, "last": 1}]


@pytest.mark.parametrize("b_addressed", [False, True])
@pytest.mark.parametrize("seed", range(4))
@seeded
def test_stride_merge_selects_the_common_positions(seed, b_addressed):
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    pairs_of_rows = []
    for _ in range(6):
        n = rng.choice([1, 64, 300, 900])
        a = nrng.random(n) < rng.choice([0.0, 0.01, 0.3, 1.0])
        b = nrng.random(n) < rng.choice([0.0, 0.01, 0.3, 1.0])
        pairs_of_rows.append((a, b))
    n_packed, w_packed = rng.randrange(2), rng.randrange(2)
    dut = StrideMerge(b_addressed=b_addressed)
    got = []

    async def feed(ctx, port, side):
        for row in pairs_of_rows:
            for e in _entries(row[side], 1000 * (side + 1), addressed=b_addressed and side == 1):
                await stream_put(ctx, port, e, rng, 0.3)

    async def feed_a(ctx):
        ctx.set(dut.n_packed, n_packed)
        ctx.set(dut.w_packed, w_packed)
        await feed(ctx, dut.a, 0)

    async def feed_b(ctx):
        await feed(ctx, dut.b, 1)

    async def consumer(ctx):
        for _ in pairs_of_rows:
            row = []
            while True:
                it = await stream_get(ctx, dut.o, rng, 0.3)
                assert it.stride
                if it.last:
                    assert not it.pair
                    break
                row.append((it.n_base, it.w_base))
            got.append(row)

    simulate(dut, feed_a, feed_b, consumer)
    for (a, b), row in zip(pairs_of_rows, got):
        common = ix.positions_from_stride(ix.merge_stride(ix.direct_to_stride(a), ix.direct_to_stride(b)))
        na = ix.ranks(ix.Index.direct(a), common) if n_packed else common
        # (addressed weight entries: their addresses are the ranks, whatever w_packed says)
        wb = ix.ranks(ix.Index.direct(b), common) if w_packed or b_addressed else common
        assert row == [(1000 + int(x), 2000 + int(y)) for x, y in zip(na, wb)]


@pytest.mark.parametrize("seed", range(3))
@seeded
def test_stride_merge_checks_the_weight_positions(seed):
    """With ``b_checked``, ``b_beyond`` pulses once for every weight element the merge takes
    at a position ``>= n`` (rows whose weight list runs past ``n``, escapes among them), and
    never for a neuron element or a well-formed row."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    n = rng.choice([8, 100, 300])
    rows = []
    for _ in range(6):
        span = n + rng.choice([0, 0, 5, 400])        # the weight list's positions: 0..span-1
        a = nrng.random(n) < rng.choice([0.0, 0.3, 1.0])
        b = nrng.random(span) < rng.choice([0.01, 0.3, 1.0])
        rows.append((a, b))
    dut = StrideMerge(b_addressed=True, b_checked=True)
    pulses = []

    async def feed_a(ctx):
        ctx.set(dut.n, n)
        ctx.set(dut.n_packed, 1)
        for a, _ in rows:
            for e in _entries(a, 1000):
                await stream_put(ctx, dut.a, e, rng, 0.3)

    async def feed_b(ctx):
        for _, b in rows:
            for e in _entries(b, 2000, addressed=True):
                await stream_put(ctx, dut.b, e, rng, 0.3)

    async def consumer(ctx):
        for _ in rows:
            while True:
                it = await stream_get(ctx, dut.o, rng, 0.3)
                if it.last:
                    break

    async def watch(ctx):
        while True:
            _, _, beyond = await ctx.tick().sample(dut.b_beyond)
            pulses.append(beyond)

    simulate(dut, feed_a, feed_b, consumer, processes=[watch])
    assert sum(pulses) == sum(int(b[n:].sum()) for _, b in rows)
