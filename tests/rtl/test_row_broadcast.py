"""RowBroadcast: every lane gets exactly the rounds it has rows for, in order, under random
back-pressure per lane, and an item reaches all the lanes that take it in the same cycle."""

import random

import pytest

from snpu.rtl.row_broadcast import RowBroadcast
from snpu.verif.tb.amaranth_sim import seeded, simulate


def _items(rows, lanes, nvec, per_row, rng):
    """The source's items: per vector, ceil(rows / lanes) rounds of ``per_row`` items, the
    last of each round flagged; each item's value tells (vector, round, position)."""
    rounds = -(-rows // lanes)
    out = []
    for v in range(nvec):
        for k in range(rounds):
            n = per_row if per_row else rng.randrange(1, 4)
            out += [((v * 64 + k) * 16 + j, int(j == n - 1), k) for j in range(n)]
    return out


@pytest.mark.parametrize("lanes", [1, 4])
@pytest.mark.parametrize("merge", [0, 1])
@pytest.mark.parametrize("seed", range(3))
@seeded
def test_each_lane_gets_its_rounds(lanes, merge, seed):
    rng = random.Random(seed)
    rows = rng.choice([1, lanes, lanes + 1, 3 * lanes - 1, 2 * lanes])
    nvec = rng.randrange(1, 4)
    items = _items(rows, lanes, nvec, rng.choice([0, 1, 3]), rng)
    dut = RowBroadcast(lanes)
    src = dut.i_entries if merge else dut.i_chunks
    outs = dut.items     # (an entry travels in the chunk layout, its base in the chunk's)
    field = "base"  # the item's identity travels in its value base (in both layouts)
    got = {g: [] for g in range(lanes)}
    moved_at = {}  # item value -> cycle it reached each lane that took it

    async def bench(ctx):
        ctx.set(dut.rows, rows)
        ctx.set(dut.merge, merge)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        pending, cycle = list(items), 0
        while pending or cycle < 5:
            value, last, _ = pending[0] if pending else (0, 0, 0)
            ctx.set(src.valid, int(bool(pending) and rng.random() < 0.8))
            ctx.set(getattr(src.payload, field), value)
            ctx.set(src.payload.last, last)
            # an entry's value and `none` travel in the item's bits 0..8
            low = value * 37 % 512
            if merge:
                ctx.set(src.payload.value, low & 0xFF)
                ctx.set(src.payload.none, low >> 8)
            else:
                ctx.set(src.payload.bits, low)
            for o in outs:
                ctx.set(o.ready, int(rng.random() < 0.6))
            _, _, ready, *sampled = await ctx.tick().sample(
                src.ready, *[o.valid for o in outs], *[o.ready for o in outs],
                *[getattr(o.payload, field) for o in outs], *[o.payload.bits for o in outs],
                *[o.payload.last for o in outs])
            valids = sampled[:lanes]
            readies = sampled[lanes:2 * lanes]
            values = sampled[2 * lanes:3 * lanes]
            lows = sampled[3 * lanes:4 * lanes]
            lasts = sampled[4 * lanes:]
            moving = bool(pending) and ctx.get(src.valid) and ready
            for g in range(lanes):
                if valids[g]:
                    assert readies[g], "a lane saw valid without room"
                    assert moving, "a lane took an item the source did not give up"
                    assert values[g] == value
                    assert lows[g] & 0x1FF == low and lasts[g] == last
                    got[g].append(value)
                    moved_at.setdefault(value, set()).add(cycle)
            if moving:
                pending.pop(0)
            cycle += 1
            assert cycle < 20_000

    simulate(dut, bench)
    for g in range(lanes):
        want = [v for v, _, k in items if k * lanes + g < rows]
        assert got[g] == want, g
    assert all(len(c) == 1 for c in moved_at.values())  # every item moved once, to all
