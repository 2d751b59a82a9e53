"""Requantiser against verif.numerics, including the rounding and saturation edges."""

import random

import numpy as np
import pytest

from snpu.rtl.requant import Requantizer
from snpu.verif import numerics

from snpu.verif.tb.amaranth_sim import seeded, simulate, stream_get, stream_put

EDGES = [
    # acc, bias, mult, shift, relu
    (3, 0, 1, 1, 0),            # 1.5 -> 2 (half up)
    (-3, 0, 1, 1, 0),           # -1.5 -> -1 (half up, toward +inf)
    (2**31 - 1, 1, 1, 0, 0),    # bias add wraps to -2**31 -> saturates at -128
    (-5, 0, 1, 0, 1),           # ReLU
    (1000, 0, -32768, 8, 0),    # negative multiplier
    (2**31 - 1, 0, 32767, 47, 0),
    (127, 0, 1, 0, 0), (128, 0, 1, 0, 0), (-128, 0, 1, 0, 0), (-129, 0, 1, 0, 0),
]


@pytest.mark.parametrize("seed", range(3))
@seeded
def test_matches_golden_numerics(seed):
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    cases = list(EDGES)
    for _ in range(60):
        cases.append((int(nrng.integers(-2**31, 2**31)), int(nrng.integers(-2**31, 2**31)),
                      int(nrng.integers(-2**15, 2**15)), int(nrng.integers(0, 48)),
                      int(nrng.integers(0, 2))))
    dut = Requantizer()
    got = []

    async def producer(ctx):
        for acc, bias, mult, shift, relu in cases:
            await stream_put(ctx, dut.i, {"acc": acc, "bias": bias, "mult": mult, "shift": shift,
                                          "relu": relu}, rng, 0.3)

    async def consumer(ctx):
        for _ in cases:
            got.append((await stream_get(ctx, dut.o, rng, 0.3)).y)

    simulate(dut, producer, consumer)
    for (acc, bias, mult, shift, relu), y in zip(cases, got):
        want = int(numerics.requantize(np.array([acc]), bias, mult, shift, bool(relu))[0])
        assert y == want, (acc, bias, mult, shift, relu)


def test_rounding_and_saturation_edges_at_every_shift():
    """Products just around the rounding and saturation thresholds of every shift (the
    hardware keeps only ten bits of the shifted product and a range test, not the product
    shifted in full), with both multiplier signs, ReLU or not, and shifts above 47."""
    rng = random.Random(7)
    cases = []
    for shift in range(64):
        s = min(shift, numerics.SHIFT_MAX)
        half = (1 << s) >> 1
        for t in (127, 128, -128, -129, 0, -1, 255, 256, -256, -257, 511, 512, -513):
            for d in (-1, 0, 1):
                product = t * (1 << s) + rng.choice((0, half, -half)) + d
                mult = rng.choice((1, -1, 3, 32767, -32768))
                acc = max(-2**31, min(2**31 - 1, product // mult))
                cases.append((acc, 0, mult, shift, rng.randrange(2)))
    dut = Requantizer()
    got = []

    async def producer(ctx):
        for acc, bias, mult, shift, relu in cases:
            await stream_put(ctx, dut.i, {"acc": acc, "bias": bias, "mult": mult, "shift": shift,
                                          "relu": relu})

    async def consumer(ctx):
        for _ in cases:
            got.append((await stream_get(ctx, dut.o)).y)

    simulate(dut, producer, consumer)
    for (acc, bias, mult, shift, relu), y in zip(cases, got):
        want = int(numerics.requantize(np.array([acc]), bias, mult,
                                       min(shift, numerics.SHIFT_MAX), bool(relu))[0])
        assert y == want, (acc, bias, mult, shift, relu)
