"""Hands the shared neuron-side index of an fc to the lanes, each the rows it computes."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import chunk_in_entry, chunk_layout, entry_layout


class RowBroadcast(wiring.Component):
    """Fans the matrix unit's one neuron-side stream out to ``lanes`` lanes.

    Lane ``g`` computes rows ``g, g + P, ...`` of an fc, and every row reads the whole index
    of the current input vector.  So the shared source walks ``ceil(rows / P)`` *rounds* per
    vector, each one copy of the vector's index (chunks, or stride entries when ``merge``),
    and round ``k`` belongs to the rows ``k * P .. k * P + P - 1``: every lane takes it,
    except that in a vector's last round only the lanes ``g < rows - k * P`` have a row.
    A round ends with the item whose ``last`` is set.

    An item moves when every lane that takes it can accept it, to all of them in the same
    cycle; the lanes' input queues let them drift apart by their depth.  No latency: the
    streams pass through combinationally (``valid`` of a lane depends on the other lanes'
    ``ready``, never on its own).

    Each lane gets one stream, ``items``: the chunks, or with ``merge`` the stride entries
    packed into the chunk layout (:func:`~.layouts.entry_in_chunk`), so a lane keeps one
    queue of the neuron side, not one per path.  The choice is made here, once for all
    lanes: 26 of the item's bits are chosen by ``merge``.

    Members
    -------
    start : In(1)
        Begin an fc: ``rows`` is sampled.
    rows : In(12)
        Rows of the whole fc.
    merge : In(1)
        Which input stream is live: ``i_entries`` (1) or ``i_chunks`` (0).
    i_chunks, i_entries : In(stream)
        The shared source's outputs.
    items : Out(stream).array(lanes)
        One copy per lane of the live input (chunk layout).
    """

    def __init__(self, lanes: int):
        if lanes < 1 or lanes & (lanes - 1):
            raise ValueError(f"lanes must be a power of two, got {lanes}")
        self._lanes = lanes
        super().__init__({
            "start": In(1),
            "rows": In(12),
            "merge": In(1),
            "i_chunks": In(stream.Signature(chunk_layout())),
            "i_entries": In(stream.Signature(entry_layout())),
            "items": Out(stream.Signature(chunk_layout())).array(lanes),
        })

    def elaborate(self, platform):
        m = Module()
        P = self._lanes
        shift = P.bit_length() - 1
        rounds_last = Signal(12)           # index of a vector's last round
        last_lanes = Signal(range(P + 1))  # lanes with a row in the last round (1..P)
        round_ = Signal(12)
        in_last = Signal()                 # round_ == rounds_last
        with m.If(self.start):
            first_last = (self.rows - 1) >> shift
            m.d.sync += [rounds_last.eq(first_last),
                         last_lanes.eq(((self.rows - 1) & (P - 1)) + 1),
                         round_.eq(0), in_last.eq(first_last == 0)]

        merge = self.merge
        takes = [Const(1)] + [~in_last | (last_lanes > g) for g in range(1, P)]
        item = Signal(chunk_layout())
        valid = Signal()
        m.d.comb += [item.eq(self.i_chunks.payload), valid.eq(self.i_chunks.valid)]
        with m.If(merge):
            entry = chunk_in_entry(self.i_entries.payload)
            m.d.comb += [getattr(item, f).eq(v) for f, v in entry.items()]
            m.d.comb += valid.eq(self.i_entries.valid)
        room = Signal()
        m.d.comb += room.eq(Cat(*[~t | o.ready for t, o in zip(takes, self.items)]).all())
        for t, o in zip(takes, self.items):
            m.d.comb += [o.payload.eq(item), o.valid.eq(valid & t & room)]
        m.d.comb += [self.i_chunks.ready.eq(room & ~merge), self.i_entries.ready.eq(room & merge)]

        moved_last = Signal()
        m.d.comb += moved_last.eq(room & valid & item.last)
        with m.If(~self.start & moved_last):
            with m.If(in_last):
                m.d.sync += [round_.eq(0), in_last.eq(rounds_last == 0)]
            with m.Else():
                m.d.sync += [round_.eq(round_ + 1), in_last.eq(round_ + 1 == rounds_last)]
        return m
