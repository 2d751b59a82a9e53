"""A behavioural AXI4 slave memory for Amaranth-simulator tests.

Read and write channels run as separate testbench coroutines with random idle cycles on every
handshake (``idle`` probability), so every DMA path is exercised under back-pressure.
Addresses in ``error_ranges`` answer SLVERR.
"""

from __future__ import annotations

import random
from collections import deque


class AxiMemory:
    def __init__(self, bus, data: bytearray, rng: random.Random, idle: float = 0.3,
                 error_ranges=(), id_bits=True, beat_bytes: int = 8):
        self.bus, self.mem, self.rng, self.idle = bus, data, rng, idle
        self.beat = beat_bytes
        self.error_ranges = list(error_ranges)
        self.reads: deque = deque()
        self.writes: deque = deque()
        self.read_bursts = 0
        self.write_bursts = 0
        self.has_id = id_bits

    def _error(self, addr: int) -> bool:
        return any(lo <= addr < hi for lo, hi in self.error_ranges)

    async def _idle(self, ctx):
        while self.rng.random() < self.idle:
            await ctx.tick()

    def processes(self):
        return [self.ar, self.r, self.aw, self.w]

    async def ar(self, ctx):
        b = self.bus
        while True:
            await self._idle(ctx)
            ctx.set(b.arready, 1)
            _, _, valid, addr, length, rid = await ctx.tick().sample(
                b.arvalid, b.araddr, b.arlen, b.arid if self.has_id else b.arvalid)
            ctx.set(b.arready, 0)
            if valid:
                n = self.beat
                assert addr % n == 0 and (addr % 4096) + (length + 1) * n <= 4096, \
                    f"burst {addr:#x}+{length + 1} beats crosses 4 KiB or is unaligned"
                assert length < 16
                self.reads.append((addr, length + 1, rid if self.has_id else 0))
                self.read_bursts += 1

    async def r(self, ctx):
        b = self.bus
        while True:
            if not self.reads:
                await ctx.tick()
                continue
            addr, beats, rid = self.reads.popleft()
            for k in range(beats):
                await self._idle(ctx)
                n = self.beat
                a = addr + n * k
                ctx.set(b.rvalid, 1)
                ctx.set(b.rdata, int.from_bytes(self.mem[a:a + n].ljust(n, b"\0"), "little"))
                ctx.set(b.rresp, 2 if self._error(a) else 0)
                ctx.set(b.rlast, int(k == beats - 1))
                if self.has_id:
                    ctx.set(b.rid, rid)
                await ctx.tick().until(b.rready)
                ctx.set(b.rvalid, 0)

    async def aw(self, ctx):
        b = getattr(self.bus, "awvalid", None)
        if b is None:
            return
        bus = self.bus
        while True:
            await self._idle(ctx)
            ctx.set(bus.awready, 1)
            _, _, valid, addr, length, wid = await ctx.tick().sample(
                bus.awvalid, bus.awaddr, bus.awlen, bus.awid if self.has_id else bus.awvalid)
            ctx.set(bus.awready, 0)
            if valid:
                assert addr % 8 == 0 and (addr % 4096) + (length + 1) * 8 <= 4096
                self.writes.append((addr, length + 1, wid if self.has_id else 0))
                self.write_bursts += 1

    async def w(self, ctx):
        if getattr(self.bus, "wvalid", None) is None:
            return
        bus = self.bus
        while True:
            if not self.writes:
                await ctx.tick()
                continue
            addr, beats, wid = self.writes.popleft()
            err = False
            for k in range(beats):
                await self._idle(ctx)
                ctx.set(bus.wready, 1)
                data, strb, last = await ctx.tick().sample(bus.wdata, bus.wstrb, bus.wlast).until(bus.wvalid)
                ctx.set(bus.wready, 0)
                assert last == (k == beats - 1), "wlast on the wrong beat"
                a = addr + 8 * k
                err |= self._error(a)
                for j in range(8):
                    if strb >> j & 1 and not self._error(a):
                        self.mem[a + j] = (data >> (8 * j)) & 0xFF
            await self._idle(ctx)
            ctx.set(bus.bvalid, 1)
            ctx.set(bus.bresp, 2 if err else 0)
            if self.has_id:
                ctx.set(bus.bid, wid)
            await ctx.tick().until(bus.bready)
            ctx.set(bus.bvalid, 0)
