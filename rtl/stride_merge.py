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

    Each side's entries enter one of two slots with their absolute position and rank (the
    running sums are taken as they enter, from the previous entry's), so the merge's
    comparison starts at registers (a slot's, selected by a flip-flop) and ends at two
    flip-flops per side (the head's pointer and its slot's valid) and the output's valid;
    the inputs' ``ready`` are decided by registers.

    Throughput: one entry of each list per cycle; a row takes about
    ``entries_a + entries_b - pairs + 1`` cycles.  Latency 2 cycles (the head slots, the
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
            """The side's head entry: valid, its absolute position, whether it is an escape,
            a terminator (``none``), its base and its rank (the row's elements before it).

            Two slots, loaded in turn (``wr``) whenever the next is free, and the head the
            slot ``rd`` points at: a take moves ``rd`` and frees the slot, so the merge's
            comparison reaches two flip-flops and the freed slot's valid, not the enables
            of the entries' registers, and ``port.ready`` (the next slot free) is decided
            by registers.  The running position and rank are taken as an entry loads, from
            the previous one's (both restart after a terminator)."""
            slots = [{"valid": Signal(name=f"{name}{k}_valid"),
                      "pos": Signal(18, name=f"{name}{k}_pos"),
                      "esc": Signal(name=f"{name}{k}_esc"),
                      "none": Signal(name=f"{name}{k}_none"),
                      "base": Signal(ADDR, name=f"{name}{k}_base"),
                      "rank": Signal(ADDR, name=f"{name}{k}_rank")} for k in range(2)]
            wr, rd = Signal(name=f"{name}_wr"), Signal(name=f"{name}_rd")
            run = Signal(18, name=f"{name}_run")     # the last entry's position (0 after a row)
            kept = Signal(ADDR, name=f"{name}_kept")  # the row's elements loaded so far
            free = Signal(name=f"{name}_free")
            m.d.comb += [free.eq(Mux(wr, ~slots[1]["valid"], ~slots[0]["valid"])),
                         port.ready.eq(free)]
            e = port.payload
            p = Signal(18, name=f"{name}_p")
            esc = Signal(name=f"{name}_e_esc")
            m.d.comb += [p.eq(run + e.value), esc.eq(~e.none & (e.value == ESCAPE))]
            with m.If(port.valid & free):
                for k, slot in enumerate(slots):
                    with m.If(wr == k):
                        m.d.sync += [slot["valid"].eq(1), slot["pos"].eq(p), slot["esc"].eq(esc),
                                     slot["none"].eq(e.none), slot["base"].eq(e.base),
                                     slot["rank"].eq(kept)]
                m.d.sync += [run.eq(Mux(e.none, 0, p)), kept.eq(Mux(e.none, 0, kept + ~esc)),
                             wr.eq(~wr)]
            with m.If(take):
                m.d.sync += rd.eq(~rd)
                for k, slot in enumerate(slots):
                    with m.If(rd == k):
                        m.d.sync += slot["valid"].eq(0)
            return tuple(Mux(rd, slots[1][f], slots[0][f])
                         for f in ("valid", "pos", "esc", "none", "base", "rank"))

        take_a, take_b = Signal(), Signal()
        a_valid, pa, a_esc, a_none, a_base, rank_a = head(self.a, take_a, "a")
        b_valid, pb, b_esc, b_none, b_base, rank_b = head(self.b, take_b, "b")

        both = Signal()
        m.d.comb += both.eq(a_valid & b_valid & out_free)

        # The output's payload is loaded whenever the output moves on, with what an output
        # now would carry (the row's end when both heads are terminators, else the pair of
        # the heads); the position comparison decides only `valid` and the takes, so it
        # reaches none of the payload's enables.
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
                m.d.sync += self.o.valid.eq(1)
            with m.Elif(a_esc | b_esc):
                m.d.comb += [take_a.eq(a_esc), take_b.eq(b_esc)]
            with m.Elif(a_none | (~b_none & (pb < pa))):
                m.d.comb += take_b.eq(1)
            with m.Elif(b_none | (pa < pb)):
                m.d.comb += take_a.eq(1)
            with m.Else():  # equal heads: a pair
                m.d.comb += [take_a.eq(1), take_b.eq(1)]
                m.d.sync += self.o.valid.eq(1)
        return m
