"""Vector ALU against the golden model's vred / vew semantics."""

import random

import numpy as np
import pytest

from snpu.rtl.vector_alu import AluOp, VectorAlu
from snpu.verif import numerics

from snpu.verif.tb.amaranth_sim import seeded, simulate, stream_get, stream_put

L = 4


@pytest.mark.parametrize("seed", range(3))
@seeded
def test_reductions_and_eltwise(seed):
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    jobs = []  # (op, beats, ma, mb, relu)
    for _ in range(15):
        op = rng.choice([AluOp.MAX, AluOp.SUM, AluOp.EW])
        k = rng.randrange(1, 6) if op != AluOp.EW else 1
        big = rng.random() < 0.3
        lo, hi = (-2**31, 2**31) if big else (-1000, 1000)
        beats = [(nrng.integers(lo, hi, L), nrng.integers(lo, hi, L)) for _ in range(k)]
        jobs.append((op, beats, rng.randrange(-2**15, 2**15), rng.randrange(-2**15, 2**15),
                     rng.randrange(2)))
    got = []

    async def producer(ctx):
        for op, beats, ma, mb, relu in jobs:
            for j, (a, b) in enumerate(beats):
                await stream_put(ctx, dut.i, {"op": op, "a": [int(v) for v in a],
                                              "b": [int(v) for v in b], "ma": ma, "mb": mb,
                                              "relu": relu, "first": int(j == 0),
                                              "last": int(j == len(beats) - 1)}, rng, 0.3)

    async def consumer(ctx):
        for _ in jobs:
            got.append([int(v) for v in (await stream_get(ctx, dut.o, rng, 0.3)).v])

    dut = VectorAlu(L)
    simulate(dut, producer, consumer)
    for (op, beats, ma, mb, relu), out in zip(jobs, got):
        a = np.stack([x for x, _ in beats]).astype(np.int64)
        if op == AluOp.MAX:
            want = a.max(axis=0)
        elif op == AluOp.SUM:
            want = numerics.wrap32(a.sum(axis=0))
        else:
            b = beats[0][1].astype(np.int64)
            want = numerics.wrap32(a[0] * ma + b * mb)
            if relu:
                want = np.maximum(want, 0)
        assert out == [int(v) for v in want], (op, ma, mb, relu)
