"""Direct -> stride index converter (the direct side of seed 000 claim 10)."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .bits import encode_onehot, lowest_set
from .layouts import ADDR, CHUNK, chunk_layout, entry_layout

ESCAPE = 255


class DirectToStride(wiring.Component):
    """Turns a row's direct-index chunks into its stride-index entries.

    For each set bit, lowest position first, the entry is the distance from the previous kept
    position (the first from position 0); a distance of 255 or more is written as escapes
    (255, moving 255 positions) followed by the remainder, exactly as
    :func:`snpu.verif.index.stride_entries`.  After the row's last chunk one terminator entry
    (``none = 1, last = 1``) closes the list.  Every entry carries the ``base`` of the row's
    first chunk (where the row's values start).

    Throughput one entry per cycle; a chunk without set bits takes one cycle.  Latency 1.
    """

    i: In(stream.Signature(chunk_layout()))
    o: Out(stream.Signature(entry_layout()))

    def elaborate(self, platform):
        m = Module()
        out_free = Signal()
        m.d.comb += out_free.eq(~self.o.valid | self.o.ready)

        busy = Signal()            # holding a chunk
        rem = Signal(CHUNK)        # its bits not yet emitted
        last = Signal()
        chunk_lo = Signal(17)      # position of the held chunk's bit 0
        prev = Signal(18)          # position the next distance is measured from
        row_base = Signal(ADDR)
        first_chunk = Signal(init=1)

        low = Signal(CHUNK)
        m.d.comb += low.eq(lowest_set(rem))
        offset = encode_onehot(m, low, name="offset")
        gap = Signal(18)
        m.d.comb += gap.eq(chunk_lo + offset - prev)

        m.d.comb += self.i.ready.eq(out_free & ~busy)
        with m.If(out_free):
            m.d.sync += self.o.valid.eq(0)
            with m.If(~busy):
                with m.If(self.i.valid):
                    m.d.sync += [busy.eq(1), rem.eq(self.i.payload.bits),
                                 last.eq(self.i.payload.last), first_chunk.eq(0)]
                    with m.If(first_chunk):
                        m.d.sync += [row_base.eq(self.i.payload.base), chunk_lo.eq(0)]
                    with m.Else():
                        m.d.sync += chunk_lo.eq(chunk_lo + CHUNK)
            with m.Elif(rem != 0):
                m.d.sync += [self.o.valid.eq(1), self.o.payload.base.eq(row_base),
                             self.o.payload.none.eq(0), self.o.payload.last.eq(0)]
                with m.If(gap >= ESCAPE):
                    m.d.sync += [self.o.payload.value.eq(ESCAPE), prev.eq(prev + ESCAPE)]
                with m.Else():
                    m.d.sync += [self.o.payload.value.eq(gap), prev.eq(chunk_lo + offset),
                                 rem.eq(rem & ~low)]
            with m.Else():
                m.d.sync += busy.eq(0)
                with m.If(last):
                    m.d.sync += [self.o.valid.eq(1), self.o.payload.none.eq(1),
                                 self.o.payload.last.eq(1), self.o.payload.value.eq(0),
                                 self.o.payload.base.eq(row_base),
                                 prev.eq(0), first_chunk.eq(1)]
        return m
