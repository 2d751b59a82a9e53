"""Stride merge: the combined index of two stride indices (seed 000 claim 8)."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import ADDR, combined_layout, entry_layout

from snpu.verif.index import STRIDE_ESCAPE as ESCAPE

#: One head slot of a side: an entry with its absolute position, whether it is an escape,
#: a terminator (``none``), its base and its rank (the row's elements before it).
SLOT = data.StructLayout({"valid": 1, "pos": 18, "esc": 1, "none": 1, "base": ADDR,
                          "rank": ADDR})


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
    comparison starts at registers (a slot's, selected by a flip-flop) and ends at three
    flip-flops per side (the head's pointer and the slots' valids) and the output's valid;
    the inputs' ``ready`` are decided by registers.

    With ``b_addressed`` the weight side's entries carry their value's own address in
    ``base`` (a lane's weight source counts its kept entries as it sends them: stride
    weights are stored packed), which becomes the pair's weight address as it is; no rank is
    kept for that side (``w_packed`` is not read).

    Throughput: one entry of each list per cycle; a row takes about
    ``entries_a + entries_b - pairs + 1`` cycles.  Latency 2 cycles (the head slots, the
    output register).

    Members
    -------
    a, b : In(stream(entry_layout))
        Neuron and weight entries (each row closed by a terminator).
    o : Out(stream(combined_layout))
    n_packed, w_packed : In(1)
    n : In(16), b_beyond : Out(1)
        (``b_checked`` only) the row length, and a pulse in each cycle the merge takes a
        ``b`` element at a position ``>= n`` (a malformed index; a lane's weight source
        checks nothing), compared on the head slot's registered position.

    Parameters
    ----------
    b_addressed:
        The ``b`` side's ``base`` is each entry's value address (see above).
    b_checked:
        Check the ``b`` side's positions against ``n`` (``n``, ``b_beyond``).
    """

    def __init__(self, *, b_addressed: bool = False, b_checked: bool = False):
        self._b_addressed, self._b_checked = b_addressed, b_checked
        ports = {"a": In(stream.Signature(entry_layout())),
                 "b": In(stream.Signature(entry_layout())),
                 "o": Out(stream.Signature(combined_layout())),
                 "n_packed": In(1), "w_packed": In(1)}
        if b_checked:
            ports.update(n=In(16), b_beyond=Out(1))
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        out_free = Signal()
        m.d.comb += out_free.eq(~self.o.valid | self.o.ready)

        def head(port, take, name, ranked=True):
            """The side's head entry (a :data:`SLOT`).  Two slots, loaded in turn (``wr``)
            whenever the next is free, and the head the slot ``rd`` points at: a take moves
            ``rd`` and frees the slot, so the merge's comparison reaches ``rd`` and the
            slots' valids, not the enables of the entries' registers, and ``port.ready``
            (the next slot free) is decided by registers.  The running position and rank
            are taken as an entry loads, from the previous one's (both restart after a
            terminator)."""
            slots = [Signal(SLOT, name=f"{name}{k}") for k in range(2)]
            wr, rd = Signal(name=f"{name}_wr"), Signal(name=f"{name}_rd")
            run = Signal(18, name=f"{name}_run")     # the last entry's position (0 after a row)
            kept = Signal(ADDR, name=f"{name}_kept")  # the row's elements loaded so far
            free = Signal(name=f"{name}_free")
            m.d.comb += [free.eq(~Mux(wr, slots[1].valid, slots[0].valid)),
                         port.ready.eq(free)]
            e = port.payload
            p = Signal(18, name=f"{name}_p")
            m.d.comb += p.eq(run + e.value)
            loaded = {"valid": 1, "pos": p, "esc": ~e.none & (e.value == ESCAPE),
                      "none": e.none, "base": e.base}
            if ranked:
                loaded["rank"] = kept
            with m.If(port.valid & free):
                for k, slot in enumerate(slots):
                    with m.If(wr == k):
                        m.d.sync += [getattr(slot, f).eq(v) for f, v in loaded.items()]
                m.d.sync += [run.eq(Mux(e.none, 0, p)), wr.eq(~wr)]
                if ranked:
                    m.d.sync += kept.eq(Mux(e.none, 0, kept + ~loaded["esc"]))
            with m.If(take):
                m.d.sync += rd.eq(~rd)
                for k, slot in enumerate(slots):
                    with m.If(rd == k):
                        m.d.sync += slot.valid.eq(0)
            head = Signal(SLOT, name=f"{name}_head")
            m.d.comb += head.eq(Mux(rd, slots[1], slots[0]))
            return head

        take_a, take_b = Signal(), Signal()
        a = head(self.a, take_a, "a")
        b = head(self.b, take_b, "b", ranked=not self._b_addressed)

        both = Signal()
        m.d.comb += both.eq(a.valid & b.valid & out_free)

        # The output's payload is loaded whenever the output moves on, with what an output
        # now would carry (the row's end when both heads are terminators, else the pair of
        # the heads); the position comparison decides only `valid` and the takes, so it
        # reaches none of the payload's enables.
        ends = a.none & b.none
        with m.If(out_free):
            m.d.sync += [
                self.o.valid.eq(0), self.o.payload.stride.eq(1), self.o.payload.pair.eq(~ends),
                self.o.payload.last.eq(ends),
                self.o.payload.n_base.eq(a.base + Mux(self.n_packed, a.rank, a.pos)),
                self.o.payload.w_base.eq(b.base if self._b_addressed else
                                         b.base + Mux(self.w_packed, b.rank, b.pos)),
            ]
        with m.If(both):
            with m.If(ends):
                m.d.comb += [take_a.eq(1), take_b.eq(1)]
                m.d.sync += self.o.valid.eq(1)
            with m.Elif(a.esc | b.esc):
                m.d.comb += [take_a.eq(a.esc), take_b.eq(b.esc)]
            with m.Elif(a.none | (~b.none & (b.pos < a.pos))):
                m.d.comb += take_b.eq(1)
            with m.Elif(b.none | (a.pos < b.pos)):
                m.d.comb += take_a.eq(1)
            with m.Else():  # equal heads: a pair
                m.d.comb += [take_a.eq(1), take_b.eq(1)]
                m.d.sync += self.o.valid.eq(1)
        if self._b_checked:
            m.d.comb += self.b_beyond.eq(take_b & ~b.esc & ~b.none & (b.pos >= self.n))
        return m
