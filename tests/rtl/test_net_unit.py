"""The NET unit's arrival counters and ``recv`` against a model of the counts.

The mesh tests (test_array) run send / recv programs end to end; these drive the unit's
router port and instruction hand-off directly, so arrivals and recvs meet in every
relative cycle, including the ones the counters' registered read-modify-write has to get
right (a recv taking its bytes in the cycle an arrival writes the same counter)."""

import random

import pytest
from amaranth import Module, Signal

from snpu.config import CoreConfig
from snpu.rtl.net_unit import CODES, NetUnit
from snpu.rtl.status import ErrorCode
from snpu.verif.tb.amaranth_sim import seeded, simulate

CFG = CoreConfig(lanes=1)


def _head(tag: int, nbytes: int, addr: int = 0) -> int:
    """A head flit's data: x = y = 0, the destination address, the tag and the length."""
    return (addr << 8) | (tag << 28) | (nbytes << 32)


def _idle_inputs(ctx, dut):
    """The inputs the arrivals do not drive (the router's inject port always takes, local
    memory never answers a read: no send runs here).  The eject port is the arrival
    bench's alone: both benches start in the same cycle."""
    for sig, v in [(dut.start, 0), (dut.op, 0), (dut.inject.ready, 1), (dut.mem_rd.ready, 1), (dut.mem_rdata, 0), (dut.mem_rvalid, 0),
                   (dut.mem_wr.ready, 1), (dut.x, 0), (dut.y, 0), (dut.w, 1), (dut.h, 1),
                   (dut.regs.packet_log2, 0)]:
        ctx.set(sig, v)


async def _recv(ctx, dut, tag: int, nbytes: int, limit: int) -> int | None:
    """Start ``recv tag, bytes`` and wait for ``done``: the cycles it took, None if it did
    not finish within ``limit`` (the unit then still waits)."""
    ctx.set(dut.op, CODES["recv"])
    ctx.set(dut.args.recv.tag, tag)
    ctx.set(dut.args.recv.dst, 0)
    ctx.set(dut.args.recv.bytes, nbytes)
    ctx.set(dut.start, 1)
    await ctx.tick()
    ctx.set(dut.start, 0)
    for cycles in range(1, limit + 1):
        done, error = ctx.get(dut.done), ctx.get(dut.error)
        await ctx.tick()
        if done:
            assert error == ErrorCode.NONE, f"recv tag {tag} bytes {nbytes}: error {error}"
            return cycles
    return None


async def _packet(ctx, dut, tag: int, nbytes: int, rng: random.Random | None = None,
                  idle: float = 0.0) -> None:
    """One packet into the eject port: the head, then ceil(bytes / 8) data flits (with
    ``rng``, random gaps between flits and local memory taking a word at random); returns
    once its last flit is taken."""
    flits = [_head(tag, nbytes)] + [rng.getrandbits(64) if rng else 0
                                    for _ in range(-(-nbytes // 8))]
    for i, data in enumerate(flits):
        while rng is not None and rng.random() < idle:
            await ctx.tick()
        ctx.set(dut.eject.valid, 1)
        ctx.set(dut.eject.payload.data, data)
        ctx.set(dut.eject.payload.last, i == len(flits) - 1)
        while True:
            if rng is not None:   # local memory takes a word at random
                ctx.set(dut.mem_wr.ready, rng.random() < 0.7)
            taken = ctx.get(dut.eject.ready)
            await ctx.tick()
            if taken:
                break
        ctx.set(dut.eject.valid, 0)


def test_zero_byte_recv_in_every_cycle_around_an_arrival():
    """A tag's first packet arrives while a zero-byte recv on the tag starts at every offset
    from four cycles before to four after: the recv finishes, and then the packet's bytes
    are all there (a recv of them finishes, one byte more does not)."""
    dut = NetUnit(CFG)
    offsets = range(-4, 5)
    period = 60
    # a free-running cycle count both benches read, so they meet at chosen cycles
    top = Module()
    top.submodules.dut = dut
    cycle = Signal(16)
    top.d.sync += cycle.eq(cycle + 1)

    async def wait_until(ctx, when):
        assert when > ctx.get(cycle), "the previous step ran past this one's cycle"
        await ctx.tick().repeat(when - ctx.get(cycle))

    async def arrivals(ctx):
        for k, _ in enumerate(offsets):
            await wait_until(ctx, k * period + period // 2)
            await _packet(ctx, dut, tag=k, nbytes=16)   # 3 flits: head, 2 data

    async def recvs(ctx):
        _idle_inputs(ctx, dut)
        for k, d in enumerate(offsets):
            await wait_until(ctx, k * period + period // 2 + d)
            assert await _recv(ctx, dut, k, 0, limit=10) is not None, f"offset {d}"
            await ctx.tick().repeat(12)
            took = await _recv(ctx, dut, k, 16, limit=20)
            assert took is not None, f"offset {d}: the packet's 16 bytes were not counted"
        assert await _recv(ctx, dut, 0, 1, limit=40) is None, "a byte counted twice"

    simulate(top, arrivals, recvs, deadline_cycles=period * (len(offsets) + 2))


@pytest.mark.parametrize("seed", range(3))
@seeded
def test_random_arrivals_and_recvs_against_a_model(seed):
    """Packets on four tags arrive with random lengths (head-only ones too) and random gaps,
    local memory taking their words at random; recvs split each tag's total into random
    parts (zero-byte ones too), interleaved across tags.  Every recv finishes, none before
    the model holds its bytes, and at the end each counter holds exactly what is left."""
    rng = random.Random(seed)
    dut = NetUnit(CFG)
    tags = 4
    packets = [(rng.randrange(tags), rng.choice([0, 1, 7, 8, 9, 16, 24, 40])) for _ in range(40)]
    total = [sum(b for t, b in packets if t == tag) for tag in range(tags)]
    parts = []
    for tag in range(tags):
        left = total[tag]
        while left > 0 or rng.random() < 0.3:
            take = min(left, rng.choice([0, 1, 8, 12, 30]))
            parts.append((tag, take))
            left -= take
    rng.shuffle(parts)
    taken = [0] * tags
    for tag, b in parts:
        taken[tag] += b
    model = [0] * tags
    state = {"arrived": 0}

    async def arrivals(ctx):
        for tag, nbytes in packets:
            await _packet(ctx, dut, tag, nbytes, rng, idle=0.4)
            model[tag] += nbytes
        state["arrived"] = 1

    async def recvs(ctx):
        _idle_inputs(ctx, dut)
        for tag, b in parts:
            for _ in range(rng.randrange(4)):
                await ctx.tick()
            took = await _recv(ctx, dut, tag, b, limit=20_000)
            assert took is not None, f"recv tag {tag} bytes {b} never finished ({model}, {state})"
            assert model[tag] >= b, f"recv tag {tag} bytes {b} finished with {model[tag]} there"
            model[tag] -= b
        while not state["arrived"]:
            await ctx.tick()
        await ctx.tick().repeat(4)
        for tag in range(tags):
            assert model[tag] == total[tag] - taken[tag] == 0
        # every counter is empty now: one byte more on any tag must wait
        assert await _recv(ctx, dut, rng.randrange(tags), 1, limit=40) is None

    simulate(dut, arrivals, recvs, deadline_cycles=60_000)
