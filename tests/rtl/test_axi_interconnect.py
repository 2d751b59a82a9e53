"""The AXI4 interconnect under random traffic from several masters and random back-pressure
on every channel: every read returns its own master's data, every write lands whole and is
answered to its master with its ID, write data follows the address order, and no master
waits for more than ``n - 1`` grants to others (round-robin, no starvation)."""

import random

import pytest

from snpu.rtl.axi import ID_BITS
from snpu.rtl.axi_interconnect import AxiInterconnect
from snpu.verif.tb.amaranth_sim import seeded, simulate

from .axi_model import AxiMemory

REGION = 4096  #: bytes of external memory per master, for reads and again for writes


class Master:
    """One master: random read bursts of a read-only region (checked against its known
    contents) and random write bursts into its own region, each on its own coroutines."""

    def __init__(self, k, port, mem, rng, idle, bursts):
        self.k, self.port, self.mem, self.rng, self.idle = k, port, mem, rng, idle
        self.bursts = bursts
        self.expected_reads = []          # (id, data words) in issue order
        self.reads_done = self.writes_done = 0
        self.written = {}                 # address -> byte, what this master wrote

    def read_base(self):
        return self.k * REGION

    def write_base(self):
        return (8 + self.k) * REGION

    async def _idle(self, ctx):
        while self.rng.random() < self.idle:
            await ctx.tick()

    async def ar(self, ctx):
        p = self.port
        for _ in range(self.bursts):
            beats = self.rng.randint(1, 16)
            addr = self.read_base() + 8 * self.rng.randrange(0, REGION // 8 - beats + 1)
            if (addr % 4096) + beats * 8 > 4096:
                addr -= (addr % 4096) + beats * 8 - 4096
            rid = self.rng.getrandbits(ID_BITS)
            words = [int.from_bytes(self.mem[addr + 8 * i:addr + 8 * i + 8], "little")
                     for i in range(beats)]
            self.expected_reads.append((rid, words))
            await self._idle(ctx)
            ctx.set(p.arvalid, 1)
            ctx.set(p.araddr, addr)
            ctx.set(p.arlen, beats - 1)
            ctx.set(p.arid, rid)
            await ctx.tick().until(p.arready)
            ctx.set(p.arvalid, 0)

    async def r(self, ctx):
        p = self.port
        for n in range(self.bursts):
            while len(self.expected_reads) <= n:
                await ctx.tick()
            rid, words = self.expected_reads[n]
            for i, want in enumerate(words):
                await self._idle(ctx)
                ctx.set(p.rready, 1)
                data, last, got_id, resp = await ctx.tick().sample(
                    p.rdata, p.rlast, p.rid, p.rresp).until(p.rvalid)
                ctx.set(p.rready, 0)
                assert (data, got_id, resp) == (want, rid, 0), \
                    f"master {self.k}: burst {n} beat {i} wrong"
                assert last == (i == len(words) - 1), f"master {self.k}: rlast misplaced"
            self.reads_done += 1

    async def w(self, ctx):
        p = self.port
        for n in range(self.bursts):
            beats = self.rng.randint(1, 16)
            addr = self.write_base() + 8 * self.rng.randrange(0, REGION // 8 - beats + 1)
            if (addr % 4096) + beats * 8 > 4096:
                addr -= (addr % 4096) + beats * 8 - 4096
            wid = self.rng.getrandbits(ID_BITS)
            await self._idle(ctx)
            ctx.set(p.awvalid, 1)
            ctx.set(p.awaddr, addr)
            ctx.set(p.awlen, beats - 1)
            ctx.set(p.awid, wid)
            await ctx.tick().until(p.awready)
            ctx.set(p.awvalid, 0)
            for i in range(beats):
                data = self.rng.getrandbits(64)
                strb = self.rng.getrandbits(8)
                for j in range(8):
                    if strb >> j & 1:
                        self.written[addr + 8 * i + j] = (data >> (8 * j)) & 0xFF
                await self._idle(ctx)
                ctx.set(p.wvalid, 1)
                ctx.set(p.wdata, data)
                ctx.set(p.wstrb, strb)
                ctx.set(p.wlast, int(i == beats - 1))
                await ctx.tick().until(p.wready)
                ctx.set(p.wvalid, 0)
            await self._idle(ctx)
            ctx.set(p.bready, 1)
            got_id, resp = await ctx.tick().sample(p.bid, p.bresp).until(p.bvalid)
            ctx.set(p.bready, 0)
            assert (got_id, resp) == (wid, 0), f"master {self.k}: write response wrong"
            self.writes_done += 1


def _fairness_monitor(dut, n, channel):
    """While a master holds ``<channel>valid`` without its ready, at most n - 1 other
    masters may complete a handshake on that channel."""
    waits = [0] * n

    async def monitor(ctx):
        signals = [getattr(dut.s[k], f"{channel}{s}") for s in ("valid", "ready")
                   for k in range(n)]
        while True:  # (not `async for`: its generator would be closed mid-tick at exit)
            _, _, *values = await ctx.tick().sample(*signals)
            valids, readys = values[:n], values[n:]
            done = [valids[k] and readys[k] for k in range(n)]
            for k in range(n):
                if valids[k] and not readys[k]:
                    waits[k] += sum(done)
                    assert waits[k] <= n - 1, \
                        f"master {k} waited for {waits[k]} {channel} grants to others"
                else:
                    waits[k] = 0
    return monitor


def _stable_monitor(bus, channel, fields):
    """AXI: once the shared port raises ``<channel>valid``, it and the request stay put
    until ``<channel>ready``."""
    async def monitor(ctx):
        held = None
        signals = [getattr(bus, f"{channel}valid"), getattr(bus, f"{channel}ready")] + \
            [getattr(bus, f"{channel}{f}") for f in fields]
        while True:
            _, _, valid, ready, *values = await ctx.tick().sample(*signals)
            if held is not None:
                assert valid and values == held, f"{channel} request changed before ready"
            held = values if valid and not ready else None
    return monitor


@pytest.mark.parametrize("n, index_bits", [(1, None), (2, None), (4, None), (3, 3)])
@pytest.mark.parametrize("seed", range(2))
@seeded
def test_random_traffic(n, index_bits, seed):
    """``index_bits`` wider than ``n`` needs: an array's port groups share one ID width."""
    rng = random.Random(seed * 31 + n)
    dut = AxiInterconnect(n, index_bits=index_bits)
    if index_bits is not None:
        assert dut.m.signature.id_bits == ID_BITS + index_bits
    mem = bytearray(rng.getrandbits(8) for _ in range(16 * REGION))
    initial = bytes(mem)
    slave = AxiMemory(dut.m, mem, rng, idle=0.3)
    masters = [Master(k, dut.s[k], mem, random.Random(rng.random()), 0.3, 12) for k in range(n)]

    async def finish(ctx):
        while not all(m.reads_done == m.bursts and m.writes_done == m.bursts for m in masters):
            await ctx.tick()

    procs = [p for m in masters for p in (m.ar, m.r, m.w)]
    simulate(dut, finish, *procs, processes=slave.processes()
             + [_fairness_monitor(dut, n, "ar"), _fairness_monitor(dut, n, "aw"),
                _stable_monitor(dut.m, "ar", ["addr", "len", "id"]),
                _stable_monitor(dut.m, "aw", ["addr", "len", "id"])],
             deadline_cycles=60_000)
    for m in masters:
        for a in range(m.write_base(), m.write_base() + REGION):
            assert mem[a] == m.written.get(a, initial[a]), f"master {m.k}: byte {a:#x}"
        lo = m.read_base()
        assert mem[lo:lo + REGION] == initial[lo:lo + REGION]


def test_index_bits_must_cover_the_masters():
    with pytest.raises(ValueError, match="5 masters need 3 index bits, got 2"):
        AxiInterconnect(5, index_bits=2)


def test_saturating_masters_share_evenly():
    """Four masters that always want the bus get equal shares of read-address grants."""
    n = 4
    dut = AxiInterconnect(n)
    mem = bytearray(16 * REGION)
    slave = AxiMemory(dut.m, mem, random.Random(1), idle=0.0)
    grants = [0] * n
    stop = []

    def saturate(k):
        async def run(ctx):
            p = dut.s[k]
            ctx.set(p.rready, 1)
            ctx.set(p.arvalid, 1)
            ctx.set(p.araddr, k * REGION)
            ctx.set(p.arlen, 0)
            while not stop:
                *_, ready = await ctx.tick().sample(p.arready)
                grants[k] += ready
            ctx.set(p.arvalid, 0)
        return run

    async def count(ctx):
        await ctx.tick().repeat(400)
        stop.append(True)
        while slave.reads:  # let the slave finish answering
            await ctx.tick()
        await ctx.tick().repeat(20)

    simulate(dut, count, processes=slave.processes() + [saturate(k) for k in range(n)])
    assert max(grants) - min(grants) <= 1 and min(grants) > 10, grants
