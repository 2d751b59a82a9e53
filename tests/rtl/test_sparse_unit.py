"""Sparse processing unit against the golden model's thresholding and group pruning."""

import random

import numpy as np
import pytest

from snpu.rtl.sparse_unit import SparseProcessingUnit
from snpu.verif import index as ix

from snpu.verif.tb.amaranth_sim import seeded, simulate, stream_get, stream_put


@pytest.mark.parametrize("seed", range(4))
@seeded
def test_threshold_and_groups_match_golden(seed):
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    dut = SparseProcessingUnit()
    cases = []
    for _ in range(40):
        g = rng.choice([0, 1, 2, 3])
        x = nrng.integers(-128, 128, 8).astype(np.int8)
        x[nrng.random(8) < rng.random()] = 0
        be = rng.choice([0xFF, 0x0F, 0xF0, 0x00, rng.randrange(256)]) if g == 0 else \
            rng.choice([0xFF, 0x00, 0xF0 if g <= 2 else 0xFF])
        cases.append((x, be, rng.randrange(128), g, rng.randrange(128), rng.randrange(9)))
    got = []

    async def producer(ctx):
        for x, be, t, g, t3, t4 in cases:
            ctx.set(dut.thresh, t)
            ctx.set(dut.group_log2, g)
            ctx.set(dut.t3, t3)
            ctx.set(dut.t4, t4)
            word = int.from_bytes(x.tobytes(), "little")
            # the configuration is sampled with the beat
            await stream_put(ctx, dut.i, {"data": word, "be": be, "addr": 5}, rng, 0.3)

    async def consumer(ctx):
        for _ in cases:
            p = await stream_get(ctx, dut.o, rng, 0.3)
            got.append((p.bits, p.be, p.addr))

    simulate(dut, producer, consumer)
    for (x, be, t, g, t3, t4), (bits, obe, addr) in zip(cases, got):
        want = ix.threshold(x, t)
        if g:
            want &= ix.group_prune(x, 1 << g, t3, t4)
        enables = np.array([(be >> k) & 1 for k in range(8)], bool)
        want &= enables
        assert bits == sum(int(b) << k for k, b in enumerate(want)), (x, be, t, g, t3, t4)
        assert obe == be and addr == 5


def test_threshold_at_every_value_and_edge():
    """Every int8 value against thresholds at the edges (``|x| == t``, ``x = -128``, t = 0
    and 127): the one-comparator ``|x| > t`` of both signs."""
    dut = SparseProcessingUnit()
    values = np.arange(-128, 128, dtype=np.int16).astype(np.int8).reshape(-1, 8)
    cases = [(x, t) for t in (0, 1, 2, 63, 64, 126, 127) for x in values]
    got = []

    async def producer(ctx):
        ctx.set(dut.group_log2, 0)
        for x, t in cases:
            ctx.set(dut.thresh, t)
            word = int.from_bytes(x.tobytes(), "little")
            await stream_put(ctx, dut.i, {"data": word, "be": 0xFF, "addr": 0}, None, 0)

    async def consumer(ctx):
        for _ in cases:
            got.append((await stream_get(ctx, dut.o, None, 0)).bits)

    simulate(dut, producer, consumer)
    for (x, t), bits in zip(cases, got):
        want = ix.threshold(x, t)
        assert bits == sum(int(b) << k for k, b in enumerate(want)), (x, t)
