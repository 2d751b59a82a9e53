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

    Each side's entries enter a head register with their absolute position (the running
    sum is taken as they enter, from the previous entry's), so the merge's comparison starts
    at registers; the inputs' ``ready`` are registers (a skid entry per side).

    Throughput: one entry of each list per cycle; a row takes about
    ``entries_a + entries_b - pairs + 1`` cycles.  Latency 2 cycles (the head registers, the
    output register).

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

        def head(port, take, name):
            """The side's head entry, registered: valid, its absolute position, whether it is
            an escape, a terminator (``none``), its base.  It is replaced when empty or
            taken; the running position restarts after a terminator.  An entry accepted
            while the head stays waits in a skid register, so ``port.ready`` is a register
            and the merge's comparisons reach no queue's read enable."""
            valid, pos = Signal(name=f"{name}_valid"), Signal(18, name=f"{name}_pos")
            esc, none = Signal(name=f"{name}_esc"), Signal(name=f"{name}_none")
            base = Signal(ADDR, name=f"{name}_base")
            run = Signal(18, name=f"{name}_run")  # the last entry's position (0 after a row)
            skid = Signal.like(port.payload, name=f"{name}_skid")
            skid_valid = Signal(name=f"{name}_skid_valid")
            m.d.comb += port.ready.eq(~skid_valid)
            e = Signal.like(port.payload, name=f"{name}_next")   # the entry moving in
            m.d.comb += e.eq(Mux(skid_valid, skid, port.payload))
            with m.If(~valid | take):
                m.d.sync += valid.eq(skid_valid | port.valid)
                with m.If(skid_valid | port.valid):
                    p = run + e.value
                    m.d.sync += [pos.eq(p), esc.eq(~e.none & (e.value == ESCAPE)),
                                 none.eq(e.none), base.eq(e.base), run.eq(Mux(e.none, 0, p))]
                m.d.sync += skid_valid.eq(0)
            with m.Elif(port.valid & port.ready):
                m.d.sync += [skid.eq(port.payload), skid_valid.eq(1)]
            return valid, pos, esc, none, base

        take_a, take_b = Signal(), Signal()
        a_valid, pa, a_esc, a_none, a_base = head(self.a, take_a, "a")
        b_valid, pb, b_esc, b_none, b_base = head(self.b, take_b, "b")
        rank_a, rank_b = Signal(ADDR), Signal(ADDR)

        both = Signal()
        m.d.comb += both.eq(a_valid & b_valid & out_free)

        # The output's payload is loaded whenever the output moves on, with what an output
        # now would carry (the row's end when both heads are terminators, else the pair of
        # the heads); the position comparison decides only `valid`, the takes and the
        # ranks, so it reaches none of the payload's enables.
        ends = a_none & b_none
        with m.If(out_free):
            m.d.sync += [
                self.o.valid.eq(0), self.o.payload.stride.eq(1), self.o.payload.pair.eq(~ends),
                self.o.payload.last.eq(ends),
                self.o.payload.n_base.eq(a_base + Mux(self.n_packed, rank_a, pa)),
                self.o.payload.w_base.eq(b_base + Mux(self.w_packed, rank_b, pb)),
            ]
        with m.If(both):
            with m.If(ends):
                m.d.comb += [take_a.eq(1), take_b.eq(1)]
                m.d.sync += [self.o.valid.eq(1), rank_a.eq(0), rank_b.eq(0)]
            with m.Elif(a_esc | b_esc):
                m.d.comb += [take_a.eq(a_esc), take_b.eq(b_esc)]
            with m.Elif(a_none | (~b_none & (pb < pa))):
                m.d.comb += take_b.eq(1)
                m.d.sync += rank_b.eq(rank_b + 1)
            with m.Elif(b_none | (pa < pb)):
                m.d.comb += take_a.eq(1)
                m.d.sync += rank_a.eq(rank_a + 1)
            with m.Else():  # equal heads: a pair
                m.d.comb += [take_a.eq(1), take_b.eq(1)]
                m.d.sync += [rank_a.eq(rank_a + 1), rank_b.eq(rank_b + 1),
                             self.o.valid.eq(1)]
        return m
