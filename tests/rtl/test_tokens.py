"""Token channels: the registered ``wait_ok`` / ``signal_ok`` against a model of the counts."""

import random

import pytest

from snpu.rtl.microcode import UNITS
from snpu.rtl.tokens import TokenChannels
from snpu.verif.tb.amaranth_sim import seeded, simulate

N = len(UNITS)


def _mask(rng, u):
    """A random mask over the other units (often empty, sometimes several)."""
    return sum(1 << a for a in range(N) if a != u and rng.random() < 0.35)


@pytest.mark.parametrize("depth", [1, 2, 8])
@pytest.mark.parametrize("seed", range(3))
@seeded
def test_flags_are_the_counts_of_this_cycle(depth, seed):
    """Units take and give at random while their flags allow it and change their masks at
    random (the next cycle's masks announced a cycle ahead); every cycle, each unit's
    ``wait_ok`` is "every channel in its wait mask holds a token" and ``signal_ok`` "every
    channel in its signal mask has room", for the counts a Python model keeps."""
    rng = random.Random(seed)
    dut = TokenChannels(depth)
    seen = {"take": 0, "give": 0, "full": 0, "blocked": 0}

    async def bench(ctx):
        count = {(a, b): 0 for a in range(N) for b in range(N) if a != b}
        wm = [0] * N
        sm = [0] * N
        for _ in range(3000):
            takes, gives = [0] * N, [0] * N
            for u in range(N):
                want_w = all(count[a, u] > 0 for a in range(N) if wm[u] >> a & 1)
                want_s = all(count[u, b] < depth for b in range(N) if sm[u] >> b & 1)
                assert ctx.get(dut.wait_ok[u]) == want_w, (u, wm[u], count)
                assert ctx.get(dut.signal_ok[u]) == want_s, (u, sm[u], count)
                seen["blocked"] += not want_w
                seen["full"] += not want_s
                takes[u] = int(want_w and wm[u] != 0 and rng.random() < 0.5)
                gives[u] = int(want_s and sm[u] != 0 and rng.random() < 0.6)
            for (a, b) in count:
                count[a, b] += (gives[a] and sm[a] >> b & 1) - (takes[b] and wm[b] >> a & 1)
                assert 0 <= count[a, b] <= depth
            seen["take"] += sum(takes)
            seen["give"] += sum(gives)
            new_wm = [_mask(rng, u) if rng.random() < 0.3 else wm[u] for u in range(N)]
            new_sm = [_mask(rng, u) if rng.random() < 0.3 else sm[u] for u in range(N)]
            for u in range(N):
                ctx.set(dut.wait_mask[u], wm[u])
                ctx.set(dut.signal_mask[u], sm[u])
                ctx.set(dut.wait_mask_next[u], new_wm[u])
                ctx.set(dut.signal_mask_next[u], new_sm[u])
                ctx.set(dut.take[u], takes[u])
                ctx.set(dut.give[u], gives[u])
            await ctx.tick()
            wm, sm = new_wm, new_sm
        assert ctx.get(dut.empty) == all(c == 0 for c in count.values())

    simulate(dut, bench)
    # the run went through takes, gives, empty channels and full ones
    assert min(seen.values()) > 50, seen
