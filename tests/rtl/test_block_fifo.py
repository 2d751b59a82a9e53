"""BlockRamFIFO: a FIFO whose storage asks yosys for a block RAM, its output a register."""

import random

import pytest
from amaranth.back import rtlil
from amaranth.lib.fifo import SyncFIFOBuffered

from snpu.rtl.block_fifo import BlockRamFIFO
from snpu.verif.tb.amaranth_sim import seeded, simulate


@pytest.mark.parametrize("depth", [3, 18, 32])
@pytest.mark.parametrize("seed", range(2))
@seeded
def test_same_order_and_levels_as_a_python_queue(depth, seed):
    rng = random.Random(seed)
    fifo = BlockRamFIFO(width=16, depth=depth)
    model, got, want = [], [], []

    async def bench(ctx):
        for k in range(600):
            # (phases of mostly pushes and of mostly pops, so the queue runs full and empty)
            filling = (k // 50) % 2 == 0
            push = rng.random() < (0.8 if filling else 0.3)
            pop = rng.random() < (0.3 if filling else 0.8)
            value = rng.getrandbits(16)
            ctx.set(fifo.w_en, push)
            ctx.set(fifo.w_data, value)
            ctx.set(fifo.r_en, pop)
            assert ctx.get(fifo.level) == len(model)
            assert not ctx.get(fifo.w_rdy) or len(model) < depth
            assert not ctx.get(fifo.r_rdy) or model
            took = pop and ctx.get(fifo.r_rdy)
            if took:
                got.append(ctx.get(fifo.r_data))
                want.append(model.pop(0))
            if push and ctx.get(fifo.w_rdy):
                model.append(value)
            await ctx.tick()

    simulate(fifo, bench)
    assert got == want
    assert len(got) > 100


def test_storage_asks_for_a_block_ram():
    assert 'attribute \\ram_style "block"' in rtlil.convert(BlockRamFIFO(width=64, depth=32))
    plain = SyncFIFOBuffered(width=64, depth=32)
    assert "ram_style" not in rtlil.convert(plain, ports=[plain.w_data, plain.w_en, plain.w_rdy,
                                                          plain.r_data, plain.r_en, plain.r_rdy])


def test_refuses_a_depth_below_three():
    with pytest.raises(ValueError, match="at least 3 words"):
        BlockRamFIFO(width=8, depth=2)


@seeded
def test_one_word_per_cycle_both_ways():
    fifo = BlockRamFIFO(width=16, depth=18)
    got = []

    async def bench(ctx):
        ctx.set(fifo.r_en, 1)
        for k in range(200):
            ctx.set(fifo.w_en, 1)
            ctx.set(fifo.w_data, k)
            if ctx.get(fifo.r_rdy):
                got.append(ctx.get(fifo.r_data))
            await ctx.tick()

    simulate(fifo, bench)
    # (three cycles from a write to its word on r_data, then one word every cycle)
    assert got == list(range(197))
