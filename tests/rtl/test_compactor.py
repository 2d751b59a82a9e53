"""Compactor: the pairs it emits equal the index library's compaction, at any density."""

import random

import numpy as np
import pytest

from snpu.rtl.compactor import Compactor
from snpu.rtl.layouts import pair_count_flags
from snpu.verif import index as ix

from snpu.verif.tb.amaranth_sim import seeded, simulate, stream_get, stream_put

CH = 64


def _bits(mask):
    return sum(int(b) << k for k, b in enumerate(mask))


def _reference(items, n_packed, w_packed):
    """Expected pairs per row from the golden index library."""
    rows, cur = [], []
    for it in items:
        if it["stride"]:
            if it["pair"]:
                cur.append((it["n_base"], it["w_base"]))
        else:
            nb = np.array([(it["n_bits"] >> k) & 1 for k in range(CH)], bool)
            wb = np.array([(it["w_bits"] >> k) & 1 for k in range(CH)], bool)
            comb = nb & wb
            pos = np.flatnonzero(comb)
            nr = ix.ranks(ix.Index.direct(nb), pos) if n_packed else pos
            wr = ix.ranks(ix.Index.direct(wb), pos) if w_packed else pos
            cur += [(it["n_base"] + int(a), it["w_base"] + int(b)) for a, b in zip(nr, wr)]
        if it["last"]:
            rows.append(cur)
            cur = []
    return rows


@pytest.mark.parametrize("lanes", [1, 2, 4])
@pytest.mark.parametrize("seed", range(3))
@seeded
def test_pairs_match_index_library(lanes, seed):
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    n_packed, w_packed = rng.randrange(2), rng.randrange(2)
    dut = Compactor(lanes)
    items = []
    for _ in range(30):
        kind = rng.random()
        if kind < 0.15:
            # (a stride item's chunk fields are unspecified: the connection unit leaves
            # the joined chunk's there, so they are arbitrary here)
            items.append(dict(stride=1, n_bits=rng.getrandbits(CH), w_bits=rng.getrandbits(CH),
                              pairs_le1=rng.randrange(2), pairs_le2=rng.randrange(2),
                              n_base=rng.randrange(1000), w_base=rng.randrange(1000),
                              pair=rng.randrange(2), last=rng.randrange(2)))
            continue
        d_n, d_w = rng.choice([0, 0.05, 0.3, 1.0]), rng.choice([0, 0.1, 0.5, 1.0])
        nb = nrng.random(CH) < d_n
        wb = nrng.random(CH) < d_w
        if kind > 0.9:  # edge cases: only first / only last
            nb[:] = wb[:] = False
            nb[0 if kind > 0.95 else -1] = wb[0 if kind > 0.95 else -1] = True
        items.append(dict(stride=0, n_bits=_bits(nb), w_bits=_bits(wb),
                          **pair_count_flags(_bits(nb), _bits(wb)),
                          n_base=rng.randrange(1000), w_base=rng.randrange(1000), pair=0,
                          last=int(rng.random() < 0.3)))
    items[-1]["last"] = 1
    want = _reference(items, n_packed, w_packed)
    rows, cur = [], []

    async def producer(ctx):
        ctx.set(dut.n_packed, n_packed)
        ctx.set(dut.w_packed, w_packed)
        for it in items:
            await stream_put(ctx, dut.i, it, rng, 0.2)

    async def consumer(ctx):
        nonlocal cur
        while len(rows) < len(want):
            beat = await stream_get(ctx, dut.o, rng, 0.3)
            for j in range(lanes):
                if beat.valid >> j & 1:
                    cur.append((beat.n_addr[j], beat.w_addr[j]))
            if beat.last:
                rows.append(cur)
                cur = []

    simulate(dut, producer, consumer)
    assert rows == want


@pytest.mark.parametrize("lanes,set_bits", [(1, CH), (2, CH), (1, 1), (1, 2), (1, 3)])
def test_one_pair_per_lane_per_cycle_when_pairs_are_available(lanes, set_bits):
    """Full throughput: a stream of chunks with `set_bits` pairs each (dense, or one, two or
    three) yields `lanes` pairs every cycle, with no cycle between chunks."""
    dut = Compactor(lanes)
    n_items = 6
    cycles = {}
    bits = (1 << CH) - 1 if set_bits == CH else sum(1 << (7 + 13 * j) for j in range(set_bits))

    async def producer(ctx):
        for k in range(n_items):
            await stream_put(ctx, dut.i, dict(stride=0, n_bits=bits, w_bits=(1 << CH) - 1,
                                              **pair_count_flags(bits, (1 << CH) - 1),
                                              n_base=0, w_base=0, pair=0, last=int(k == n_items - 1)))

    async def consumer(ctx):
        ctx.set(dut.o.ready, 1)
        pairs = 0
        first = None
        t = 0
        while True:
            _, _, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            t += 1
            if valid:
                first = t if first is None else first
                pairs += bin(payload.valid).count("1")
                if payload.last:
                    break
        cycles["span"] = t - first + 1
        cycles["pairs"] = pairs

    simulate(dut, producer, consumer)
    assert cycles["pairs"] == n_items * set_bits
    assert cycles["span"] == n_items * set_bits // lanes
