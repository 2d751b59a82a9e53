"""Helpers for block tests with the Amaranth simulator (async testbenches).

Producers and consumers are separate testbenches; :func:`stream_put` / :func:`stream_get`
move one payload with optional random idle cycles (the ``rng`` argument), so every stream is
exercised under random back-pressure.  Every random test takes a seed and prints it on
failure (see :func:`seeded`).
"""

from __future__ import annotations

import functools
import os
import random

from amaranth.sim import Simulator


async def stream_put(ctx, s, payload, rng: random.Random | None = None, idle: float = 0.0):
    if rng is not None and idle:
        while rng.random() < idle:
            await ctx.tick()
    ctx.set(s.valid, 1)
    ctx.set(s.payload, payload)
    await ctx.tick().until(s.ready)
    ctx.set(s.valid, 0)


async def stream_get(ctx, s, rng: random.Random | None = None, idle: float = 0.0):
    if rng is not None and idle:
        while rng.random() < idle:
            await ctx.tick()
    ctx.set(s.ready, 1)
    payload, = await ctx.tick().sample(s.payload).until(s.valid)
    ctx.set(s.ready, 0)
    return payload


class SimTimeout(AssertionError):
    pass


def simulate(dut, *testbenches, processes=(), vcd: str | None = None, deadline_cycles: int = 200_000):
    """Run testbenches on ``dut`` with a 1 GHz clock until they all return.

    A watchdog fails the test if they take more than ``deadline_cycles`` (a hang)."""
    sim = Simulator(dut)
    sim.add_clock(1e-9)
    for tb in testbenches:
        sim.add_testbench(tb)
    for p in processes:
        sim.add_process(p)

    async def watchdog(ctx):
        await ctx.delay(deadline_cycles * 1e-9)
        raise SimTimeout(f"testbench did not finish within {deadline_cycles} cycles")

    sim.add_process(watchdog)
    vcd = vcd or os.environ.get("SNPU_VCD")
    if vcd:
        with sim.write_vcd(vcd):
            sim.run()
    else:
        sim.run()


def seeded(test):
    """Decorator: print the seed of a failing random test so it can be replayed."""

    @functools.wraps(test)
    def wrapper(*args, **kwargs):
        seed = kwargs.get("seed")
        try:
            return test(*args, **kwargs)
        except BaseException:
            print(f"\nreplay with seed={seed} ({test.__name__})")
            raise

    return wrapper
