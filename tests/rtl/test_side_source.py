"""Index source: every format, both sides, both outputs, against the golden layouts."""

import random

import numpy as np
import pytest
from amaranth import Elaboratable, Module

from snpu.rtl.side_source import Fmt, SideSource
from snpu.verif import index as ix
from snpu.verif import layout

from .harness import WithMemory, words_of
from snpu.verif.tb.amaranth_sim import seeded, simulate, stream_get

FMTS = {"dense": Fmt.DENSE, "direct": Fmt.DIRECT, "stride": Fmt.STRIDE}


def _expected_chunks(mask, base, packed):
    n = mask.size
    nch = max(1, -(-n // 64))
    padded = np.zeros(64 * nch, bool)
    padded[:n] = mask
    out = []
    for c in range(nch):
        seg = padded[64 * c:64 * c + 64]
        b = base + (int(padded[:64 * c].sum()) if packed else 64 * c)
        out.append((sum(int(x) << j for j, x in enumerate(seg)), b, int(c == nch - 1)))
    return out


def _expected_entries(mask, base, addressed=False):
    """A row's entries and terminator as (value, base, last): ``base`` on each, or
    (``addressed``, a weight source's) each entry's value address, ``base`` plus the row's
    elements before it (an escape and the terminator: the next element's)."""
    out, rank = [], 0
    for e in ix.stride_entries(ix.direct_to_stride(mask)):
        out.append((int(e), base + rank * addressed, 0))
        rank += int(e) != ix.STRIDE_ESCAPE
    return out + [(0, base + rank * addressed, 1)]


# a lane's weight source converts nothing: stride rows leave as entries, the others as chunks
WEIGHT_OUTPUTS = [("dense", 0), ("direct", 0), ("stride", 1)]


class _SharedShape(Elaboratable):
    """A source taking its row shape from another (``owner``, started with it on the same
    ``n``, as a lane's weight source takes the neuron source's): ``dut`` is the first."""

    def __init__(self, dut, owner):
        self.dut, self.owner = dut, owner

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut, m.submodules.owner = self.dut, self.owner
        m.d.comb += self.dut.shape.eq(self.owner.shape)
        return m


@pytest.mark.parametrize("fmt,to_entries", WEIGHT_OUTPUTS)
@pytest.mark.parametrize("seed", range(7))  # (seeds 5, 6: 700-long rows; 6 with escapes)
@pytest.mark.parametrize("shared", [0, 1])
@seeded
def test_weight_side(fmt, to_entries, seed, shared):
    """A lane's weight source: chunks of dense and direct rows, stride rows' raw entries;
    with ``shared``, its row shape from another source (the neuron source's, in a lane)."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    n = rng.choice([1, 64, 100, 200, 700])
    rows, nvec = rng.randrange(1, 5), 2
    w = nrng.integers(-128, 128, (rows, n)).astype(np.int8)
    # (a 700-long row at 0.995 zeros has gaps of 255 and more: escapes)
    w[nrng.random(w.shape) < rng.choice([0.0, 0.3, 0.9, 0.995, 1.0])] = 0
    bank = layout.encode_weight_tile(w, fmt, 1, 64)[0]
    idx_base, val_base = 8 * rng.randrange(4), rng.randrange(100)
    mem = bytes(idx_base) + bank.widx
    src = SideSource(convert=False, shared_shape=bool(shared))
    owner = SideSource(convert=False) if shared else None
    top = WithMemory(_SharedShape(src, owner) if shared else src,
                     {"mem": words_of(mem, len(mem) // 8 + 2)},
                     {"mem": (src.mem_addr, src.mem_en, src.mem_data)})
    packed = int(fmt != "dense")
    masks = (w != 0) if fmt != "dense" else np.ones_like(w, bool)
    want = []
    for _ in range(nvec):
        vb = val_base
        for r in range(rows):
            want += (_expected_entries(masks[r], vb, addressed=True) if to_entries
                     else _expected_chunks(masks[r], vb, packed))
            vb += int(masks[r].sum()) if packed else n
    got = []

    async def driver(ctx):
        for k, v in dict(fmt=FMTS[fmt], packed=packed, to_entries=to_entries, rows_follow=1,
                         n=n, nvec=nvec, rows=rows, idx_base=idx_base, val_base=val_base,
                         idx_vec_stride=0, val_vec_stride=0).items():
            ctx.set(getattr(src, k), v)
            if owner is not None:   # (the owner reads no memory and its outputs wait)
                ctx.set(getattr(owner, k), v)
        started = [s for s in (src, owner) if s is not None]
        for s in started:
            ctx.set(s.start, 1)
        await ctx.tick()
        for s in started:
            ctx.set(s.start, 0)
        port = src.entries if to_entries else src.chunks
        while len(got) < len(want):
            p = await stream_get(ctx, port, rng, 0.3)
            got.append((p.value, p.base, p.last) if to_entries else (p.bits, p.base, p.last))
        await ctx.tick().repeat(5)
        assert not ctx.get(src.busy) and not ctx.get(src.error)

    simulate(top, driver)
    assert got == want


@pytest.mark.parametrize("fmt", ["direct", "stride"])
@pytest.mark.parametrize("packed", [0, 1])
@pytest.mark.parametrize("seed", range(2))
@seeded
def test_neuron_side_rereads_each_vector(fmt, packed, seed):
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    n, nvec, rows = rng.choice([5, 64, 130]), 3, 3
    masks = nrng.random((nvec, n)) < rng.choice([0.1, 0.5, 1.0])
    istride = 8 * rng.randrange(3, 8) if fmt == "direct" else 200
    mem = bytearray(istride * nvec + 16)
    for v in range(nvec):
        enc = ix.encode_direct(masks[v], 64) if fmt == "direct" else \
            ix.encode_stride(ix.direct_to_stride(masks[v]))
        mem[v * istride:v * istride + len(enc)] = enc
    src = SideSource()
    top = WithMemory(src, {"mem": words_of(bytes(mem), len(mem) // 8 + 2)},
                     {"mem": (src.mem_addr, src.mem_en, src.mem_data)})
    vstride = 256
    want = []
    for v in range(nvec):
        for _ in range(rows):
            want += _expected_chunks(masks[v], 40 + v * vstride, packed)
    got = []

    async def driver(ctx):
        for k, val in dict(fmt=FMTS[fmt], packed=packed, to_entries=0, rows_follow=0, n=n,
                           nvec=nvec, rows=rows, idx_base=0, val_base=40,
                           idx_vec_stride=istride, val_vec_stride=vstride).items():
            ctx.set(getattr(src, k), val)
        ctx.set(src.start, 1)
        await ctx.tick()
        ctx.set(src.start, 0)
        while len(got) < len(want):
            p = await stream_get(ctx, src.chunks, rng, 0.2)
            got.append((p.bits, p.base, p.last))

    simulate(top, driver)
    assert got == want


def _direct_rows(w):
    """A neuron-side source over the direct index of the rows ``w``, in a memory, and an
    async function starting it on them."""
    rows, n = w.shape
    bank = layout.encode_weight_tile(w, "direct", 1, 64)[0]
    src = SideSource()
    top = WithMemory(src, {"mem": words_of(bank.widx, len(bank.widx) // 8 + 1)},
                     {"mem": (src.mem_addr, src.mem_en, src.mem_data)})

    async def start(ctx):
        for k, v in dict(fmt=Fmt.DIRECT, packed=1, to_entries=0, rows_follow=1, n=n, nvec=1,
                         rows=rows, idx_base=0, val_base=0, idx_vec_stride=0,
                         val_vec_stride=0).items():
            ctx.set(getattr(src, k), v)
        ctx.set(src.start, 1)
        await ctx.tick()
        ctx.set(src.start, 0)

    return src, top, start


def test_direct_chunks_at_one_per_cycle():
    rows = 4
    src, top, start = _direct_rows(np.ones((rows, 640), np.int8))
    span = {}

    async def driver(ctx):
        await start(ctx)
        ctx.set(src.chunks.ready, 1)
        t, first, count = 0, None, 0
        while count < rows * 10:
            _, _, valid = await ctx.tick().sample(src.chunks.valid)
            t += 1
            if valid:
                first = t if first is None else first
                count += 1
        span["cycles"] = t - first + 1

    simulate(top, driver)
    assert span["cycles"] == rows * 10


def test_direct_chunks_survive_long_stalls():
    """The output held off for long stretches, again and again: the issue credit must stop
    the reads before the FIFO (and the reads in flight) would overflow, and resume them at
    one chunk per cycle; every chunk arrives, in order."""
    w = np.ones((4, 640), np.int8)
    w[:, ::3] = 0
    src, top, start = _direct_rows(w)
    want = []
    vb = 0
    for row in w != 0:
        want += _expected_chunks(row, vb, 1)
        vb += int(row.sum())
    got = []

    async def driver(ctx):
        await start(ctx)
        t = 0
        while len(got) < len(want):
            ready = (t // 3) % 2 if t < 60 else t % 25 < 4  # short, then long stalls
            ctx.set(src.chunks.ready, ready)
            _, _, valid, p = await ctx.tick().sample(src.chunks.valid, src.chunks.payload)
            if valid and ready:
                got.append((p.bits, p.base, p.last))
            t += 1

    simulate(top, driver)
    assert got == want


def _stride_neurons(mask, rows, replay_chunks, nvec=1):
    """A neuron-side source over ``nvec`` copies of the stride index of ``mask``, its
    expected chunks for ``rows`` rows of each vector, and an async function starting it."""
    n = mask.size
    enc = ix.encode_stride(ix.direct_to_stride(mask))
    istride = -(-len(enc) // 8) * 8
    mem = b"".join(enc + bytes(istride - len(enc)) for _ in range(nvec))
    src = SideSource(4, replay_chunks=replay_chunks)
    top = WithMemory(src, {"mem": words_of(mem, len(mem) // 8 + 2)},
                     {"mem": (src.mem_addr, src.mem_en, src.mem_data)})
    want = []
    for v in range(nvec):
        want += _expected_chunks(mask, 8 + 1000 * v, 1) * rows

    async def start(ctx):
        for k, val in dict(fmt=Fmt.STRIDE, packed=1, to_entries=0, rows_follow=0, n=n,
                           nvec=nvec, rows=rows, idx_base=0, val_base=8,
                           idx_vec_stride=istride, val_vec_stride=1000).items():
            ctx.set(getattr(src, k), val)
        ctx.set(src.start, 1)
        await ctx.tick()
        ctx.set(src.start, 0)

    return src, top, want, start


@pytest.mark.parametrize("replay_chunks", [2, 4, 512])
@seeded
def test_stride_rows_replayed_or_converted_again(replay_chunks):
    """Rows of 4 chunks with a replay memory of 2 (too small: every row converted again), 4
    (just fits) and 512: the same chunks, in order, under back-pressure, over 2 vectors."""
    rng = random.Random(replay_chunks)
    mask = np.random.default_rng(3).random(230) < 0.4
    src, top, want, start = _stride_neurons(mask, rows=3, replay_chunks=replay_chunks, nvec=2)
    got = []

    async def driver(ctx):
        await start(ctx)
        while len(got) < len(want):
            p = await stream_get(ctx, src.chunks, rng, 0.3)
            got.append((p.bits, p.base, p.last))
        for _ in range(20):  # and it finishes
            if not ctx.get(src.busy):
                break
            await ctx.tick()
        assert not ctx.get(src.busy)

    simulate(top, driver)
    assert got == want


def test_replayed_stride_rows_at_one_chunk_per_cycle():
    """A dense stride row of 10 chunks takes 640 entries: 160 cycles at 4 entries per cycle
    to convert, once; the other 3 rows leave at one chunk per cycle, the hand-over to the
    replay costing at most a few cycles."""
    rows = 4
    src, top, want, start = _stride_neurons(np.ones(640, bool), rows, 512)
    times = []

    async def driver(ctx):
        await start(ctx)
        ctx.set(src.chunks.ready, 1)
        t = 0
        while len(times) < len(want):
            _, _, valid = await ctx.tick().sample(src.chunks.valid)
            t += 1
            if valid:
                times.append(t)

    simulate(top, driver)
    first_row, replayed = times[:10], times[10:]
    assert first_row[-1] - first_row[0] >= 9 * 16 - 4  # the converter's pace: 64 entries a chunk
    assert replayed[-1] - replayed[0] == len(replayed) - 1  # back to back
    assert replayed[0] - first_row[-1] <= 9  # (the words engine's five stages fill)
