"""Direct -> stride index converter (the direct side of seed 000 claim 10)."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .bits import at_most_one, lowest_set, lowest_set_index
from .layouts import ADDR, CHUNK, chunk_layout, entry_layout

from snpu.verif.index import STRIDE_ESCAPE as ESCAPE


class DirectToStride(wiring.Component):
    """Turns a row's direct-index chunks into its stride-index entries.

    For each set bit, lowest position first, the entry is the distance from the previous kept
    position (the first from position 0); a distance of 255 or more is written as escapes
    (255, moving 255 positions) followed by the remainder, exactly as
    :func:`snpu.verif.index.stride_entries`.  After the row's last chunk one terminator entry
    (``none = 1, last = 1``) closes the list.  Every entry carries the ``base`` of the row's
    first chunk (where the row's values start).

    Three stages: a position extractor (one set bit per cycle, lowest first: its position, the
    held chunk's number beside the bit's offset, a concatenation), the distances (the
    position less the previous one, from registers) and a stride encoder (escapes, from the
    registered distance).  Throughput one entry per cycle within a chunk; a chunk with
    ``k`` set bits takes ``k + 2`` cycles (taking it, its entries, letting it go), which the
    merge path hides (its merger takes one entry of either list per cycle, and the lanes
    queue the entries).  Latency 3 cycles.
    """

    i: In(stream.Signature(chunk_layout()))
    o: Out(stream.Signature(entry_layout()))

    def elaborate(self, platform):
        m = Module()
        POS = 18
        CB = (CHUNK - 1).bit_length()
        # ---- Stage 1: positions, one set bit per cycle.
        position = data.StructLayout({"pos": POS, "end": 1, "base": ADDR})
        p_valid = Signal()
        p = Signal(position)
        p_ready = Signal()

        busy = Signal()           # holding a chunk
        rem = Signal(CHUNK)
        rem_any = Signal()        # rem != 0, a register worked out with rem's next value
                                  # (rem's enable waits for no 64-bit OR of itself)
        last = Signal()
        row_base = Signal(ADDR)
        chunk_no = Signal(POS - CB)   # the held chunk's number in its row
        first_chunk = Signal(init=1)
        low = Signal(CHUNK)
        m.d.comb += low.eq(lowest_set(rem))
        # (its index from a multiplexer tree on rem, beside the carry chain of `low`)
        offset = Signal(range(CHUNK))
        m.d.comb += offset.eq(lowest_set_index(rem))

        # a chunk is taken whenever none is held, whether or not the position register is
        # free (taking one writes no position): the input's ready is a register, and no path
        # runs from the stride encoder's escape decision back into the chunk queue
        m.d.comb += self.i.ready.eq(~busy)
        with m.If(p_ready):
            m.d.sync += p_valid.eq(0)
        with m.If(~busy):
            with m.If(self.i.valid):
                m.d.sync += [busy.eq(1), rem.eq(self.i.payload.bits),
                             rem_any.eq(self.i.payload.bits.any()),
                             last.eq(self.i.payload.last), first_chunk.eq(0)]
                with m.If(first_chunk):
                    m.d.sync += [row_base.eq(self.i.payload.base), chunk_no.eq(0)]
                with m.Else():
                    m.d.sync += chunk_no.eq(chunk_no + 1)
        with m.Elif(p_ready):
            with m.If(rem_any):
                m.d.sync += [p_valid.eq(1), p.pos.eq(Cat(offset, chunk_no)), p.end.eq(0),
                             p.base.eq(row_base), rem.eq(rem & ~low),
                             rem_any.eq(~at_most_one(rem))]
            with m.Else():
                m.d.sync += busy.eq(0)
                with m.If(last):
                    m.d.sync += [p_valid.eq(1), p.end.eq(1), p.base.eq(row_base),
                                 first_chunk.eq(1)]

        # ---- Stage 2: a position as its distance from the previous one (the first from
        # position 0): one subtraction of registers.
        token = data.StructLayout({"gap": POS, "end": 1, "base": ADDR})
        t_valid = Signal()
        t = Signal(token)
        t_ready = Signal()
        prev = Signal(POS)        # the row's previous position (0 before its first)
        t_free = Signal()
        m.d.comb += [t_free.eq(~t_valid | t_ready), p_ready.eq(~p_valid | t_free)]
        # whether the token's entry is an escape (gap >= 255, not the end), a register
        # worked out with the gap, so the stages' readies wait for no comparison
        escape = Signal()
        gap = Signal(POS)
        m.d.comb += gap.eq(p.pos - prev)
        with m.If(t_free):
            m.d.sync += t_valid.eq(p_valid)
            with m.If(p_valid):
                m.d.sync += [t.end.eq(p.end), t.base.eq(p.base), t.gap.eq(gap),
                             escape.eq(~p.end & (gap >= ESCAPE))]
                m.d.sync += prev.eq(Mux(p.end, 0, p.pos))

        # ---- Stage 3: escapes.
        out_free = Signal()
        m.d.comb += out_free.eq(~self.o.valid | self.o.ready)
        m.d.comb += t_ready.eq(out_free & ~escape)
        with m.If(out_free):
            m.d.sync += self.o.valid.eq(t_valid)
            with m.If(t_valid):
                m.d.sync += [self.o.payload.base.eq(t.base), self.o.payload.none.eq(t.end),
                             self.o.payload.last.eq(t.end)]
                with m.If(t.end):
                    m.d.sync += self.o.payload.value.eq(0)
                with m.Elif(escape):
                    # the token stays (t_ready is low) with 255 positions fewer to go
                    m.d.sync += [self.o.payload.value.eq(ESCAPE), t.gap.eq(t.gap - ESCAPE),
                                 escape.eq(t.gap >= 2 * ESCAPE)]
                with m.Else():
                    m.d.sync += self.o.payload.value.eq(t.gap)
        return m
