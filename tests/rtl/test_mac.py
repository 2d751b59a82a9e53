"""MAC unit: row sums against numpy, lanes 1..8, with back-pressure."""

import random

import numpy as np
import pytest

from snpu.rtl.mac import MacUnit
from snpu.verif import numerics

from snpu.verif.tb.amaranth_sim import seeded, simulate, stream_get, stream_put


@pytest.mark.parametrize("lanes", [1, 2, 4, 8])
@pytest.mark.parametrize("seed", range(2))
@seeded
def test_row_sums(lanes, seed):
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    dut = MacUnit(lanes)
    rows = []
    for _ in range(12):
        beats = []
        for _ in range(rng.choice([1, 1, 2, 5])):
            n = nrng.integers(-128, 128, lanes)
            w = nrng.integers(-128, 128, lanes)
            valid = nrng.random(lanes) < rng.random()
            beats.append((n, w, valid))
        rows.append(beats)
    # a row whose every product is extreme, to exercise the adder widths
    rows.append([(np.full(lanes, -128), np.full(lanes, -128), np.ones(lanes, bool))] * 3)
    sums = []

    async def producer(ctx):
        for beats in rows:
            for k, (n, w, valid) in enumerate(beats):
                payload = {"n": [int(v) for v in n], "w": [int(v) for v in w],
                           "valid": sum(int(b) << j for j, b in enumerate(valid)),
                           "last": int(k == len(beats) - 1)}
                await stream_put(ctx, dut.i, payload, rng, 0.3)

    async def consumer(ctx):
        for _ in rows:
            sums.append((await stream_get(ctx, dut.o, rng, 0.4)).sum)

    simulate(dut, producer, consumer)
    want = [int(numerics.wrap32(sum(int((n * w * v).sum()) for n, w, v in beats))) for beats in rows]
    assert sums == want
