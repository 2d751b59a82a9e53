"""Instruction fetch: streams the ROM from external memory into the instruction cache."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from .axi import BOUNDARY, MAX_BURST, RESP_OKAY
from .microcode import PC_BITS

FETCHED = data.StructLayout({"word": 128, "pc": PC_BITS, "error": 1})


class InstructionFetch(wiring.Component):
    """Reads 128-bit instruction words from ``rom_base`` on, in order, and queues them.

    The instruction cache is a prefetch queue of ``depth`` words (the program has no
    branches): a burst of up to 8 words (16 beats, never across 4 KiB) is requested whenever
    the queue and the words in flight leave room for it.  A word whose beats answered an AXI
    error is queued with ``error`` set; it only matters if the dispatcher reaches it (the
    fetcher runs ahead of ``halt``).  ``stop`` ends fetching; data still in flight is
    dropped.

    Members
    -------
    start, rom_base : In
        Begin fetching (``rom_base`` is 16-byte aligned).
    o : Out(stream(FETCHED))
    ar*, r* :
        AXI read channels (``arid`` chosen by the core's arbiter).
    """

    def __init__(self, depth: int = 16):
        if depth < 16:
            raise ValueError("the instruction queue must hold at least two bursts (16 words)")
        self._queue = SyncFIFOBuffered(width=FETCHED.size, depth=depth)
        super().__init__({
            "start": In(1), "rom_base": In(32), "stop": In(1),
            "o": Out(stream.Signature(FETCHED)),
            "arvalid": Out(1), "arready": In(1), "araddr": Out(32), "arlen": Out(8),
            "rvalid": In(1), "rready": Out(1), "rdata": In(64), "rresp": In(2), "rlast": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.queue = q = self._queue
        active = Signal()
        addr = Signal(32)
        words_inflight = Signal(range(q.depth + 1))
        dropping = Signal()
        burst_words = Signal(4)
        to_boundary = Signal(9)
        m.d.comb += to_boundary.eq((BOUNDARY - addr[:12]) >> 4)  # words to the 4 KiB line
        m.d.comb += burst_words.eq(Mux(to_boundary < MAX_BURST // 2, to_boundary, MAX_BURST // 2))
        room = Signal()
        m.d.comb += room.eq(q.level + words_inflight + burst_words <= q.depth)
        m.d.comb += [self.arvalid.eq(active & room), self.araddr.eq(addr),
                     self.arlen.eq((burst_words << 1) - 1)]
        accepted = self.arvalid & self.arready
        with m.If(self.start):
            m.d.sync += [active.eq(1), addr.eq(self.rom_base), dropping.eq(0)]
        with m.Elif(self.stop):
            m.d.sync += [active.eq(0), dropping.eq(1)]
        with m.Elif(accepted):
            m.d.sync += addr.eq(addr + (burst_words << 4))

        # Two beats make a word, low half first.
        low = Signal(64)
        low_err = Signal()
        half = Signal()
        pc = Signal(PC_BITS)
        m.d.comb += self.rready.eq(1)  # the room check guarantees space
        word = Signal(FETCHED)
        m.d.comb += [word.word.eq(Cat(low, self.rdata)), word.pc.eq(pc),
                     word.error.eq(low_err | (self.rresp != RESP_OKAY))]
        push = self.rvalid & half & ~dropping & ~self.stop
        m.d.comb += [q.w_en.eq(push), q.w_data.eq(word)]
        with m.If(self.start):
            m.d.sync += [half.eq(0), pc.eq(0)]
        with m.Elif(self.rvalid):
            m.d.sync += half.eq(~half)
            with m.If(~half):
                m.d.sync += [low.eq(self.rdata), low_err.eq(self.rresp != RESP_OKAY)]
            with m.Else():
                m.d.sync += pc.eq(pc + 1)
        completed = self.rvalid & half
        m.d.sync += words_inflight.eq(words_inflight + Mux(accepted, burst_words, 0) - completed)
        m.d.comb += [self.o.valid.eq(q.r_rdy & ~dropping), self.o.payload.eq(q.r_data),
                     q.r_en.eq(self.o.ready | dropping)]
        return m
