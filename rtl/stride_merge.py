"""Stride merge: the combined index of two stride indices (seed 000 claim 8)."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import ADDR, combined_layout, entry_layout

from snpu.verif.index import STRIDE_ESCAPE as ESCAPE


class StrideMerge(wiring.Component):
    """Intersects a neuron stride index with a weight stride index, one row at a time.

    Each list's entries are prefix-summed into absolute positions as they arrive; the two
    sorted position lists are intersected by a merge (advance the smaller head; on equal heads
    the position is common to both).  Each common position is one pair, emitted as a stride
    item of the combined index with the pair's operand addresses: ``base + rank`` for packed
    storage, ``base + position`` for unpacked.  When both lists reach their terminators the
    row ends with an item ``pair = 0, last = 1``.

    Throughput: one entry of each list per cycle; a row takes about
    ``entries_a + entries_b - pairs + 1`` cycles.  Latency 1 cycle.

    Members
    -------
    a, b : In(stream(entry_layout))
        Neuron and weight entries (each row closed by a terminator).
    o : Out(stream(combined_layout))
    n_packed, w_packed : In(1)
    """

    a: In(stream.Signature(entry_layout()))
    b: In(stream.Signature(entry_layout()))
    o: Out(stream.Signature(combined_layout()))
    n_packed: In(1)
    w_packed: In(1)

    def elaborate(self, platform):
        m = Module()
        out_free = Signal()
        m.d.comb += out_free.eq(~self.o.valid | self.o.ready)

        cur_a, cur_b = Signal(18), Signal(18)
        rank_a, rank_b = Signal(ADDR), Signal(ADDR)
        a, b = self.a.payload, self.b.payload
        pa, pb = Signal(18), Signal(18)
        m.d.comb += [pa.eq(cur_a + a.value), pb.eq(cur_b + b.value)]
        a_esc = Signal()
        b_esc = Signal()
        m.d.comb += [a_esc.eq(~a.none & (a.value == ESCAPE)), b_esc.eq(~b.none & (b.value == ESCAPE))]

        take_a, take_b = Signal(), Signal()
        both = Signal()
        m.d.comb += both.eq(self.a.valid & self.b.valid & out_free)
        m.d.comb += [self.a.ready.eq(take_a), self.b.ready.eq(take_b)]

        with m.If(out_free):
            m.d.sync += self.o.valid.eq(0)
        with m.If(both):
            with m.If(a.none & b.none):
                m.d.comb += [take_a.eq(1), take_b.eq(1)]
                m.d.sync += [
                    self.o.valid.eq(1), self.o.payload.stride.eq(1), self.o.payload.pair.eq(0),
                    self.o.payload.last.eq(1),
                    cur_a.eq(0), cur_b.eq(0), rank_a.eq(0), rank_b.eq(0),
                ]
            with m.Elif(a_esc | b_esc):
                m.d.comb += [take_a.eq(a_esc), take_b.eq(b_esc)]
                with m.If(a_esc):
                    m.d.sync += cur_a.eq(pa)
                with m.If(b_esc):
                    m.d.sync += cur_b.eq(pb)
            with m.Elif(a.none | (~b.none & (pb < pa))):
                m.d.comb += take_b.eq(1)
                m.d.sync += [cur_b.eq(pb), rank_b.eq(rank_b + 1)]
            with m.Elif(b.none | (pa < pb)):
                m.d.comb += take_a.eq(1)
                m.d.sync += [cur_a.eq(pa), rank_a.eq(rank_a + 1)]
            with m.Else():  # equal heads: a pair
                m.d.comb += [take_a.eq(1), take_b.eq(1)]
                m.d.sync += [
                    cur_a.eq(pa), cur_b.eq(pb), rank_a.eq(rank_a + 1), rank_b.eq(rank_b + 1),
                    self.o.valid.eq(1), self.o.payload.stride.eq(1), self.o.payload.pair.eq(1),
                    self.o.payload.last.eq(0),
                    self.o.payload.n_base.eq(a.base + Mux(self.n_packed, rank_a, pa)),
                    self.o.payload.w_base.eq(b.base + Mux(self.w_packed, rank_b, pb)),
                ]
        return m
