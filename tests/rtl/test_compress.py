"""Chunk compressor and expander (stc / ldc datapaths): the words they move equal the stream
act_compress specifies, at every density, with random stalls on both sides."""

import random

import numpy as np
import pytest

from snpu.rtl.compress import ChunkCompressor, ChunkExpander
from snpu.verif import act_compress as A
from snpu.verif.progen import sparse_int8
from snpu.verif.tb.amaranth_sim import seeded, simulate, stream_get, stream_put


def _rows(seed, n, c):
    rng = np.random.default_rng(seed)
    return np.concatenate([sparse_int8(rng, (1, c), d) for d in
                           rng.choice([0.0, 0.05, 0.3, 0.7, 1.0], n)]) if n else \
        np.zeros((0, c), np.int8)


def _shapes(test):
    """Run ``test`` for rows of part of a word, a word, one chunk, a chunk and a bit, and
    several chunks, two seeds each."""
    return pytest.mark.parametrize("c", [1, 8, 13, 64, 70, 200])(
        pytest.mark.parametrize("seed", range(2))(test))


def _words(raw: bytes) -> list[int]:
    return [int.from_bytes(raw[k:k + 8], "little") for k in range(0, len(raw), 8)]


@_shapes
@seeded
def test_compressor_writes_the_stream(c, seed):
    rng = random.Random(seed)
    rows = _rows(seed * 31 + c, 6, c)
    want = _words(A.encode_stream(rows)[A.HEADER:])
    dut = ChunkCompressor()
    got = []

    async def producer(ctx):
        for row in rows:
            raw = row.tobytes()
            for k in range(0, c, 8):
                part = raw[k:k + 8]
                await stream_put(ctx, dut.i, dict(data=int.from_bytes(part, "little"),
                                                  count=len(part), last=int(k + 8 >= c)),
                                 rng, 0.2)

    async def consumer(ctx):
        while len(got) < len(want):
            got.append(await stream_get(ctx, dut.o, rng, 0.3))
        for _ in range(4):
            await ctx.tick()
        assert ctx.get(dut.idle)

    simulate(dut, producer, consumer)
    assert got == want


def _with_ghosts(rows) -> bytes:
    """The stream of ``rows`` whose short last chunks also set mask bits past the row's
    end (at the row's end and at bit 63) with values of their own: decoders must drop them,
    and skip the value words they leave after the chunk's last dense word."""
    out = b""
    for row in rows:
        for lo in range(0, row.size, 64):
            chunk = row[lo:lo + 64]
            bits = list(np.flatnonzero(chunk))
            vals = list(chunk[bits].view(np.uint8))
            if chunk.size < 64:
                bits += [chunk.size, 63]
                vals += [0x5A] * 9 + [0xA5]   # more than a word: a whole word to skip
                bits = bits[:-1] + list(range(chunk.size + 1, chunk.size + 9)) + [63]
            mask = sum(1 << int(b) for b in bits)
            raw = bytes(int(v) for v in vals)
            out += mask.to_bytes(8, "little") + raw + bytes(-len(raw) % 8)
    return out


@_shapes
@seeded
def test_expander_restores_the_rows(c, seed):
    rng = random.Random(seed)
    rows = _rows(seed * 17 + c, 5, c)
    stream = _with_ghosts(rows) if c % 64 and seed else A.encode_stream(rows)[A.HEADER:]
    if len(stream) + A.HEADER <= A.stream_bound(len(rows), c):  # the golden model too
        back, _ = A.decode_stream(len(stream).to_bytes(8, "little") + stream, len(rows), c)
        np.testing.assert_array_equal(back, rows)
    words = _words(stream)
    dut = ChunkExpander()
    got = []

    async def producer(ctx):
        ctx.set(dut.rows, len(rows))
        ctx.set(dut.cols, c)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        for w in words:  # every word is taken, the last chunk's ghosts too
            await stream_put(ctx, dut.i, w, rng, 0.2)

    async def consumer(ctx):
        cur = b""
        while len(got) < len(rows):
            w = await stream_get(ctx, dut.o, rng, 0.3)
            n = bin(w.be).count("1")
            assert w.be == (1 << n) - 1
            cur += int(w.data).to_bytes(8, "little")[:n]
            if w.last:
                got.append(np.frombuffer(cur, np.int8))
                cur = b""
        for _ in range(40):
            await ctx.tick()
        assert ctx.get(dut.finished) and not ctx.get(dut.starving)

    simulate(dut, producer, consumer)
    np.testing.assert_array_equal(np.array(got).reshape(rows.shape), rows)


def test_expander_starves_visibly_on_a_short_stream():
    """A stream that ends inside a chunk leaves the expander waiting for a word: it says so
    (the LD unit turns that into an INDEX fault instead of hanging) and never finishes."""
    dut = ChunkExpander()
    words = [(1 << 64) - 1]  # a mask of 64 values, none of its value words

    async def bench(ctx):
        ctx.set(dut.rows, 1)
        ctx.set(dut.cols, 64)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        for w in words:
            await stream_put(ctx, dut.i, w)
        for _ in range(5):
            await ctx.tick()
        assert ctx.get(dut.starving) and not ctx.get(dut.finished)

    simulate(dut, bench)
