"""DMA reader + realigner: any source and destination alignment, bursts, back-pressure."""

import random

import pytest
from amaranth import *

from snpu.rtl.dma_reader import DmaReader
from snpu.rtl.realign import Realigner

from .axi_model import AxiMemory
from snpu.verif.tb.amaranth_sim import seeded, simulate, stream_get, stream_put


class ReadPath(Elaboratable):
    def __init__(self, beat_bytes: int = 8, decode=None):
        self.reader = DmaReader(data_bits=8 * beat_bytes, decode=decode)
        self.realign = Realigner(beat_bytes)

    def elaborate(self, platform):
        m = Module()
        m.submodules.reader, m.submodules.realign = self.reader, self.realign
        from amaranth.lib import wiring
        wiring.connect(m, self.reader.beats, self.realign.i)
        return m


@pytest.mark.parametrize("seed,beat", [(s, 8) for s in range(5)] + [(5, 16), (6, 16), (7, 32)])
@seeded
def test_rows_arrive_at_their_destination_lanes(seed, beat):
    """Rows of any length from any address to any destination lane, on a 64-bit bus and
    on the wider ones (128 and 256 bits: beats and destination words of 16 / 32 bytes)."""
    rng = random.Random(seed)
    mem = bytearray(rng.randrange(256) for _ in range(16384))
    top = ReadPath(beat)
    rd = top.reader
    axi = AxiMemory(rd, mem, rng, idle=0.3, id_bits=False, beat_bytes=beat)
    rows = []
    for _ in range(25):
        length = rng.choice([1, 2, 7, 8, 9, 15, 16, 17, 33, 64, 200, rng.randrange(1, 700)])
        addr = rng.choice([rng.randrange(0, 16000 - length), 4096 - rng.randrange(1, 30)])
        rows.append((addr, length, rng.randrange(beat)))
    got = []

    async def producer(ctx):
        for addr, length, dst in rows:
            await stream_put(ctx, rd.req, {"addr": addr, "length": length, "tag": dst}, rng, 0.2)

    async def consumer(ctx):
        for addr, length, dst in rows:
            out = bytearray()
            lane = dst
            words = 0
            while True:
                w = await stream_get(ctx, top.realign.o, rng, 0.3)
                words += 1
                for j in range(beat):
                    if w.be >> j & 1:
                        assert j == lane % beat, "bytes not consecutive"
                        out.append((w.data >> (8 * j)) & 0xFF)
                        lane += 1
                if w.last:
                    break
            assert words == (dst + length + beat - 1) // beat, (dst, length, words)
            got.append(bytes(out))

    simulate(top, producer, consumer, processes=[axi.ar, axi.r])
    assert got == [bytes(mem[a:a + n]) for a, n, _ in rows]


def test_decode_follows_every_burst_address():
    """``ardecode`` is the decode of ``araddr`` in every cycle a burst is offered: loaded
    with a request's first address and with each following burst's (here the 4 KiB page's
    parity, which changes between a request's bursts)."""
    rng = random.Random(3)
    mem = bytearray(rng.randrange(256) for _ in range(3 * 4096))
    top = ReadPath(decode=lambda addr: addr[12])
    rd = top.reader
    axi = AxiMemory(rd, mem, rng, idle=0.3, id_bits=False)
    rows = [(4096 - 24, 600), (100, 5000), (8190, 3), (0, 8), (4000, 200)]
    offered = []

    async def producer(ctx):
        for addr, length in rows:
            await stream_put(ctx, rd.req, {"addr": addr, "length": length, "tag": 0}, rng, 0.2)

    async def consumer(ctx):
        for _ in rows:
            while not (await stream_get(ctx, top.realign.o, rng, 0.3)).last:
                pass

    async def monitor(ctx):
        async for _, _, arvalid, araddr, decoded in ctx.tick().sample(rd.arvalid, rd.araddr,
                                                                      rd.ardecode):
            if arvalid:
                offered.append((araddr, decoded))

    simulate(top, producer, consumer, processes=[axi.ar, axi.r, monitor])
    assert len({a >> 12 for a, _ in offered}) == 3, "the bursts should span several pages"
    assert all(d == (a >> 12) & 1 for a, d in offered), offered


def test_read_error_is_reported_and_data_still_flows():
    rng = random.Random(1)
    mem = bytearray(4096)
    top = ReadPath()
    rd = top.reader
    axi = AxiMemory(rd, mem, rng, idle=0.0, error_ranges=[(64, 72)], id_bits=False)
    result = {}

    async def bench(ctx):
        await stream_put(ctx, rd.req, {"addr": 40, "length": 100, "tag": 0})
        while True:
            w = await stream_get(ctx, top.realign.o)
            if w.last:
                break
        await ctx.tick()
        result["error"] = ctx.get(rd.error)
        result["bytes"] = ctx.get(rd.bytes_read)

    simulate(top, bench, processes=[axi.ar, axi.r])
    assert result == {"error": 1, "bytes": 100}


@pytest.mark.parametrize("beat_log2", [3, 5])
def test_burst_helpers_follow_the_axi_rules(beat_log2):
    """rtl/axi.py's burst arithmetic against the rule it shortens: at most 16 beats, none
    past a 4 KiB boundary, the last burst when the beats left fit, the next address after
    the burst, the limit at the address after a full burst, and the beats a byte range
    touches."""
    from amaranth.sim import Simulator

    from snpu.rtl.axi import (beats_spanned, burst_last_beat, burst_last_beat_after_full,
                              burst_len, burst_limit, burst_limit_after_full, burst_size,
                              last_beat_spanned, next_burst_address)

    B = 1 << beat_log2
    m = Module()
    addr, left, length = Signal(32), Signal(14), Signal(17)
    limit = burst_limit(m, addr, beat_log2)
    burst, last = burst_size(m, left, limit)
    after = next_burst_address(m, addr, burst, beat_log2)
    limit_after_full = burst_limit_after_full(m, addr, beat_log2)
    span = Signal(14)
    m.d.comb += span.eq(beats_spanned(addr, length, beat_log2))
    # the forms the DMA reader keeps: indices of last beats (counts minus one)
    last_beat = burst_last_beat(m, addr, beat_log2)
    last_beat_after_full = burst_last_beat_after_full(m, addr, beat_log2)
    left_m1, span_m1 = Signal(14), Signal(14)
    m.d.comb += [left_m1.eq(left - 1), span_m1.eq(last_beat_spanned(addr, length, beat_log2))]
    arlen, last_m1 = burst_len(m, left_m1, last_beat)
    rng = random.Random(beat_log2)
    cases = [(page * 4096 + off, rng.choice([1, 2, 15, 16, 17, 300, rng.randrange(1, 1 << 13)]))
             for page in (0, 1, 0xFFFFE) for off in range(0, 4096, B)]
    failures = []

    async def bench(ctx):
        for a, n in cases:
            ctx.set(addr, a)
            ctx.set(left, n)
            ctx.set(length, n)
            want_limit = min(16, (4096 - a % 4096) // B)
            want_burst = min(n, want_limit)
            full_end = a + want_limit * B  # where a burst of `want_limit` beats ends
            want = (want_limit, want_burst, n <= want_limit, (a + want_burst * B) % 2**32,
                    ((a % B) + n + B - 1) // B, min(16, (4096 - full_end % 4096) // B))
            got = (ctx.get(limit), ctx.get(burst), bool(ctx.get(last)), ctx.get(after),
                   ctx.get(span), ctx.get(limit_after_full))
            if got != want:
                failures.append((a, n, got, want))
            want_m1 = (want_limit - 1, want_burst - 1, n <= want_limit, want[4] - 1, want[5] - 1)
            got_m1 = (ctx.get(last_beat), ctx.get(arlen), bool(ctx.get(last_m1)),
                      ctx.get(span_m1), ctx.get(last_beat_after_full))
            if got_m1 != want_m1:
                failures.append((a, n, "minus one", got_m1, want_m1))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert not failures, failures[:5]
