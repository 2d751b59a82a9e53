"""Byte fetcher: a byte stream from a 64-bit-wide memory, starting at any byte address."""

from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .layouts import ADDR

WORD_BYTES = 8


class ByteFetcher(wiring.Component):
    """Streams consecutive bytes of a memory whose words are 8 bytes wide.

    Pulse ``start`` with ``start_addr``: everything buffered is dropped and bytes from
    ``start_addr`` on become available.  Each cycle the window ``bytes`` holds the next
    ``avail`` bytes (at most ``window``); the consumer removes ``take <= avail`` of them in that
    cycle (``take`` may depend combinationally on the window).  Reads are issued ahead, so a
    consumer taking up to 8 bytes per cycle is never starved after the first word.

    Latency from ``start`` to the first bytes: 2 cycles.  The memory read port is synchronous
    (data the cycle after the address).

    Parameters
    ----------
    window:
        Bytes visible (and takeable) per cycle, 1..8.
    word_addr_bits:
        Width of the memory's word address.
    """

    def __init__(self, window: int = 4, word_addr_bits: int = ADDR - 3):
        if not 1 <= window <= WORD_BYTES:
            raise ValueError(f"window must be in 1..{WORD_BYTES}, got {window}")
        self._window = window
        super().__init__({
            "start": In(1),
            "start_addr": In(ADDR),
            "bytes": Out(data.ArrayLayout(8, window)),
            "avail": Out(range(window + 1)),
            "take": In(range(window + 1)),
            "mem_addr": Out(word_addr_bits),
            "mem_en": Out(1),
            "mem_data": In(64),
        })

    @property
    def window(self) -> int:
        return self._window

    def elaborate(self, platform):
        m = Module()
        cap = 3 * WORD_BYTES
        buf = Signal(8 * cap)
        fill = Signal(range(cap + 1))
        next_word = Signal(len(self.mem_addr))
        inflight = Signal()  # a read issued last cycle returns now
        skip = Signal(3)  # bytes to drop from the next arriving word (first word after start)

        m.d.comb += [
            self.avail.eq(Mux(fill > self._window, self._window, fill)),
            self.bytes.eq(buf[:8 * self._window]),
        ]

        after_take = Signal(range(cap + 1))
        m.d.comb += after_take.eq(fill - self.take)
        # Issue a read if, after this cycle, the data in flight will still fit.
        room = Signal()
        m.d.comb += room.eq(after_take + Mux(inflight, WORD_BYTES, 0) + WORD_BYTES <= cap)
        m.d.comb += [
            self.mem_en.eq(self.start | room),
            self.mem_addr.eq(Mux(self.start, self.start_addr[3:], next_word)),
        ]

        arriving = self.mem_data >> (skip << 3)
        count = Signal(4)
        m.d.comb += count.eq(WORD_BYTES - skip)
        shifted = Signal(8 * cap)
        m.d.comb += shifted.eq(buf >> (self.take << 3))
        with m.If(self.start):
            m.d.sync += [
                fill.eq(0), buf.eq(0), inflight.eq(1),
                next_word.eq(self.start_addr[3:] + 1),
                skip.eq(self.start_addr[:3]),
            ]
        with m.Else():
            m.d.sync += inflight.eq(room)
            with m.If(room):
                m.d.sync += next_word.eq(next_word + 1)
            with m.If(inflight):
                m.d.sync += [
                    buf.eq(shifted | (arriving << (after_take << 3))),
                    fill.eq(after_take + count),
                    skip.eq(0),
                ]
            with m.Else():
                m.d.sync += [buf.eq(shifted), fill.eq(after_take)]
        return m
