"""Instruction cache: every access answered with the right word after any delay, and the
hit / miss / prefetch counts of the golden model's cache (verif/sequencer.py)."""

import random

import pytest

from amaranth import Elaboratable, Module

from snpu.rtl.icache import InstructionCache
from snpu.verif.sequencer import LINE_WORDS, InstructionCache as CacheModel
from snpu.verif.tb.amaranth_sim import seeded, simulate

from .axi_model import AxiMemory


class _WithDispatcherLoad(Elaboratable):
    """The cache with ``next_load`` driven as the dispatcher drives it: high as a word is
    taken (its ``go``; ``next_pc`` is then the next request) and at ``start``; and
    ``next_line``, the line after ``next_pc``'s."""

    def __init__(self, cache):
        self.cache = cache

    def elaborate(self, platform):
        m = Module()
        c = m.submodules.cache = self.cache
        m.d.comb += [c.next_load.eq((c.resp.valid & c.resp.ready) | c.start),
                     c.next_line.eq(c.next_pc // LINE_WORDS + 1)]
        return m


def _accesses(rng, rom_words, n):
    """Word indices a sequencer could ask for: straight runs, loops back, far jumps."""
    out, pc = [], 0
    while len(out) < n:
        kind = rng.random()
        if kind < 0.5:       # straight line
            run = rng.randrange(1, 12)
            out += [min(pc + k, rom_words - 1) for k in range(run)]
            pc = min(pc + run, rom_words - 1)
        elif kind < 0.8:     # a loop body a few times
            start, body = pc, rng.randrange(1, 10)
            for _ in range(rng.randrange(1, 4)):
                out += [min(start + k, rom_words - 1) for k in range(body)]
        else:                # anywhere (conflicts in the direct-mapped sets)
            pc = rng.randrange(rom_words)
    return out[:n]


@pytest.mark.parametrize("lines", [4, 16])
@pytest.mark.parametrize("seed", range(4))
@seeded
def test_words_and_counts_match_the_model(lines, seed):
    rng = random.Random(seed)
    rom_words = rng.randrange(20, 200)
    _check(lines, rom_words, _accesses(rng, rom_words, 150), rng)


def test_lines_in_every_tag_bank():
    """A 32-line cache keeps its tags in two banks of 16: lines that share a set in either
    bank evict each other (a stale tag in the other bank would make a hit of a miss)."""
    rng = random.Random(7)
    lines = [16, 48, 16, 0, 32, 0, 17, 49, 17, 20, 52, 20, 1, 33, 1, 63, 31, 63, 31]
    seq = [4 * ln + rng.randrange(4) for ln in lines]
    _check(32, 4 * 64, seq, rng)


def test_a_prefetch_evicting_the_next_words_line():
    """A hit's prefetch rewrites the tag of the set the next word's line sits in, the cycle
    before the next word is looked up: the lookup sees the new tag, and the next word is a
    miss (read again once its line is filled), not the evicted line's word."""
    # 4 lines of 4 words: line 5 shares line 1's set.  Word 0's first access prefetches
    # line 1, word 20's evicts it; word 0 again hits and prefetches line 1 over line 5,
    # and word 20 is asked for next.
    seq = [0, 5 * 4, 0, 5 * 4, 1, 5 * 4 + 1, 2 * 4, 6 * 4]
    for seed in range(3):
        _check(4, 8 * 4, seq, random.Random(seed), idle=0.0)


def _check(lines, rom_words, seq, rng, idle=0.3):
    """Ask a cache of ``lines`` lines for the words ``seq`` of a random ROM as the
    dispatcher does; the words must be the ROM's and the counts the model's."""
    base = 64 * rng.randrange(0, 32)
    mem = bytearray(rng.randrange(256) for _ in range(base + 16 * rom_words + 256))
    dut = InstructionCache(lines)
    axi = AxiMemory(dut, mem, rng, idle=idle, id_bits=False)
    got = []

    async def driver(ctx):
        ctx.set(dut.rom_base, base)
        ctx.set(dut.rom_words, rom_words)
        ctx.set(dut.start, 1)
        # as the dispatcher: while a word waits on resp (a few cycles at most), `next_pc`
        # is the request that follows it; the request is presented the cycle after the
        # word is taken and held until the cache takes it
        ctx.set(dut.next_pc, seq[0])
        await ctx.tick()
        ctx.set(dut.start, 0)
        for k, pc in enumerate(seq):
            ctx.set(dut.req.valid, 1)
            ctx.set(dut.req.payload, {"pc": pc})
            await ctx.tick().until(dut.req.ready)
            ctx.set(dut.req.valid, 0)
            ctx.set(dut.next_pc, seq[k + 1] if k + 1 < len(seq) else 0)
            # the word is taken in the cycle it arrives, as the dispatcher takes it (the
            # next request then comes the cycle after), or a few cycles later
            if rng.random() < 0.2:
                await ctx.tick().until(dut.resp.valid)
                await ctx.tick().repeat(rng.randrange(1, 4))
            ctx.set(dut.resp.ready, 1)
            while True:
                arrived, word, wpc = (await ctx.tick().sample(
                    dut.resp.valid, dut.resp.payload.word, dut.resp.payload.pc))[-3:]
                if arrived:
                    break
            ctx.set(dut.resp.ready, 0)
            got.append((wpc, word))
        await ctx.tick().until(dut.idle)
        counts = [ctx.get(getattr(dut, k)) for k in ("hits", "misses", "prefetches")]
        got.append(counts)

    simulate(_WithDispatcherLoad(dut), driver, processes=[axi.ar, axi.r], deadline_cycles=200_000)
    model = CacheModel(lines, rom_words)
    for pc in seq:
        model.access(pc, 0)
    words = [int.from_bytes(mem[base + 16 * pc:base + 16 * pc + 16], "little") for pc in seq]
    assert [(p, w) for p, w in got[:-1]] == list(zip(seq, words))
    assert got[-1] == [model.stats.hits, model.stats.misses, model.stats.prefetches]


def test_one_word_every_two_cycles_on_hits():
    """A body that sits in the cache is read at one word every two cycles, the dispatcher's
    rate (it asks for the next word as it takes the current one, from a register), and the
    jump back to its start costs no more than the next word."""
    dut = InstructionCache(8)
    mem = bytearray(range(256)) * 8
    axi = AxiMemory(dut, mem, random.Random(0), idle=0.0, id_bits=False)
    cycles = {}

    async def driver(ctx):
        ctx.set(dut.rom_words, 16)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        ctx.set(dut.resp.ready, 1)
        for rep in range(3):
            ticks = 0
            for pc in range(8):
                # as the dispatcher: a request from a register, the cycle after the last
                # word was taken (`next_pc` while that word waited)
                ctx.set(dut.req.valid, 1)
                ctx.set(dut.req.payload, {"pc": pc})
                while True:
                    _, _, taken = await ctx.tick().sample(dut.req.ready)
                    ticks += 1
                    if taken:
                        break
                ctx.set(dut.req.valid, 0)
                ctx.set(dut.next_pc, (pc + 1) % 8)
                while True:
                    _, _, got = await ctx.tick().sample(dut.resp.valid)
                    ticks += 1
                    if got:
                        break
            await ctx.tick().repeat(30)
            cycles["last pass"] = ticks

    simulate(_WithDispatcherLoad(dut), driver, processes=[axi.ar, axi.r], deadline_cycles=5000)
    # 8 words in 16 cycles: a request cycle and a read cycle each, the jump to word 0 too
    assert cycles["last pass"] == 16
