"""Connection processing unit: combines the neuron index with the weight index (claims 7-10)."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from .bits import COUNT_BITS, at_most_flags, set_count_flags
from .layouts import chunk_layout, combined_layout, entry_in_chunk, entry_layout
from .skid import PipeRegister
from .stride_merge import StrideMerge


#: slices of a chunk whose pair counts are registered before the whole chunk's flags
PAIR_FLAG_SLICES = 4


class ConnectionUnit(wiring.Component):
    """Produces the combined connection index of one row.

    * ``merge = 0``: both sides arrive as direct-index chunks (a stride side has already been
      expanded by its source, claim 9); the combined chunk is their bitwise AND (claim 7),
      which the :class:`~.compactor.Compactor` forms from the two sides' bits the item
      carries (it needs them for the ranks anyway).
    * ``merge = 1``: both sides arrive as stride entries (a direct side has been converted by
      its source, claim 10); a :class:`StrideMerge` intersects them (claim 8).

    Throughput one chunk per cycle on the AND path; see :class:`StrideMerge` for the merge.
    Latency 4 cycles on the AND path (through the input queues, the joined chunk's register
    stage and the output register), 4 on the merge path (its head slots).  The output is a
    :class:`~.skid.PipeRegister`: ``o.ready`` reaches the takes of the input queues and the
    merge's in the same cycle, so it must come from registers through a few LUTs (the
    :class:`~.compactor.Compactor`'s does: its pick queue's ready and its held item's
    flags).

    The neuron side arrives as one stream, ``n_items``: chunks, or with ``merge`` stride
    entries packed into the chunk layout (:func:`~.layouts.entry_in_chunk`), into one
    queue; the weight side as two streams, ``w_chunks`` and ``w_entries``.

    Parameters
    ----------
    neuron_depth:
        Depth of the neuron side's input queue.  Lanes that share one neuron source
        (:class:`~snpu.rtl.matrix_unit.MatrixUnit`) drift apart by up to this many chunks or
        entries before the faster ones wait.
    weight_depth:
        Depth of the weight side's input queues, or 0 for none: the weight side's streams
        must then come from registers (valid and payload) and take their ready into a
        register's enable, not back to a decision (a lane's :class:`~.side_source.SideSource`
        does: its chunks leave a FIFO's output register, its entries a skid buffer).  A
        queue of LUT RAM costs six LUT sites per four bits of width on an ECP5 (nextpnr
        packs a 16 x 4 RAM with its write port into a slice and a half).
    weights_addressed:
        The weight entries' ``base`` is each one's value address (a lane's weight source;
        :class:`StrideMerge`'s ``b_addressed``).
    weights_checked:
        The merge checks the weight entries' positions against ``n``: ``w_beyond`` is high
        in a cycle it takes one at ``n`` or beyond (:class:`StrideMerge`'s ``b_checked``).

    Members
    -------
    n_items : In(stream(chunk_layout))
    w_chunks : In(stream(chunk_layout))
    w_entries : In(stream(entry_layout))
    merge, n_packed, w_packed : In(1)
        The fc's path and each side's storage (stable during an instruction).
    o : Out(stream(combined_layout))
    n : In(16), w_beyond : Out(1)
        (``weights_checked`` only) the row length and the position check's pulse.
    """

    def __init__(self, neuron_depth: int = 4, weight_depth: int = 4, *,
                 weights_addressed: bool = False, weights_checked: bool = False):
        if neuron_depth < 1 or weight_depth < 0:
            raise ValueError(f"queue depths must be at least 1 (neurons) and 0 (weights), got "
                             f"{neuron_depth} and {weight_depth}")
        self._merger = StrideMerge(b_addressed=weights_addressed, b_checked=weights_checked)
        self._weights_checked = weights_checked
        ewidth = len(Signal(entry_layout()).as_value())
        cwidth = len(Signal(chunk_layout()).as_value())
        # Registered queues on the inputs: decisions here (the merge's pops depend on the
        # entries' values) never reach back into the sources in the same cycle (the weight
        # side's source may be registered itself: no queue there).  One queue on the neuron
        # side for both paths (an fc uses one): a lane's second 16-deep queue of LUT RAM
        # cost about 60 LUT sites.
        self._n_queue = SyncFIFOBuffered(width=cwidth, depth=neuron_depth)
        self._w_queue = SyncFIFOBuffered(width=ewidth, depth=weight_depth) if weight_depth else None
        self._w_chunk_queue = (SyncFIFOBuffered(width=cwidth, depth=weight_depth)
                               if weight_depth else None)
        # ... and a register on the output, so the compactor's selection logic starts at a
        # register.  Not a skid buffer: its multiplexer in front of the item's 165 bits cost
        # 172 LUTs a lane (2026-12-07), and the compactor's ready is a function of six
        # registers; nor a LUT RAM queue (252 LUT sites)
        self._out_queue = PipeRegister(combined_layout())
        ports = {"n_items": In(stream.Signature(chunk_layout())),
                 "w_chunks": In(stream.Signature(chunk_layout())),
                 "w_entries": In(stream.Signature(entry_layout())),
                 "merge": In(1), "n_packed": In(1), "w_packed": In(1),
                 "o": Out(stream.Signature(combined_layout()))}
        if weights_checked:
            ports.update(n=In(16), w_beyond=Out(1))
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        m.submodules.merger = merger = self._merger
        if self._weights_checked:
            m.d.comb += [merger.n.eq(self.n), self.w_beyond.eq(merger.b_beyond)]
        m.d.comb += [merger.n_packed.eq(self.n_packed), merger.w_packed.eq(self.w_packed)]
        # the neuron side's head item: a chunk, or (merge) an entry
        m.submodules.n_queue = nq = self._n_queue
        m.d.comb += [nq.w_data.eq(self.n_items.payload), nq.w_en.eq(self.n_items.valid),
                     self.n_items.ready.eq(nq.w_rdy)]
        n = Signal(chunk_layout())
        m.d.comb += [n.eq(nq.r_data), merger.a.payload.eq(entry_in_chunk(n)),
                     merger.a.valid.eq(nq.r_rdy & self.merge)]
        n_rdy = nq.r_rdy
        # the weight side's entries and head chunk, through queues or as they come
        q = self._w_queue
        if q is None:
            wiring.connect(m, wiring.flipped(self.w_entries), merger.b)
        else:
            m.submodules.w_queue = q
            m.d.comb += [q.w_data.eq(self.w_entries.payload), q.w_en.eq(self.w_entries.valid),
                         self.w_entries.ready.eq(q.w_rdy), merger.b.payload.eq(q.r_data),
                         merger.b.valid.eq(q.r_rdy), q.r_en.eq(merger.b.ready)]
        w = Signal(chunk_layout())
        q = self._w_chunk_queue
        if q is None:
            m.d.comb += w.eq(self.w_chunks.payload)
            w_rdy, w_take = self.w_chunks.valid, self.w_chunks.ready
        else:
            m.submodules.w_chunk_queue = q
            m.d.comb += [q.w_data.eq(self.w_chunks.payload), q.w_en.eq(self.w_chunks.valid),
                         self.w_chunks.ready.eq(q.w_rdy), w.eq(q.r_data)]
            w_rdy, w_take = q.r_rdy, q.r_en

        m.submodules.out_queue = oq = self._out_queue
        # the joined chunks pass a register stage before the output queue, and their
        # pair-count flags (how many bits of the AND of the two sides' bits are set) are
        # worked out across it: per 16-bit slice its set bits counted up to three (a
        # saturating count, two bits) into a register beside the stage's (loaded when it
        # is), the whole chunk's after it
        m.submodules.joined = joined = PipeRegister(combined_layout())
        and_out = joined.i.payload
        m.d.comb += [
            and_out.stride.eq(0), and_out.n_bits.eq(n.bits), and_out.w_bits.eq(w.bits),
            and_out.n_base.eq(n.base), and_out.w_base.eq(w.base),
            and_out.pair.eq(0), and_out.last.eq(n.last),
        ]
        slice_counts = Signal(COUNT_BITS * PAIR_FLAG_SLICES)
        counts = set_count_flags(m, n.bits & w.bits, PAIR_FLAG_SLICES, "pair_count")
        with m.If(joined.i.ready):
            m.d.sync += slice_counts.eq(counts)
        joined_out = Signal(combined_layout())
        le1, le2 = at_most_flags(m, slice_counts, "pair_counts")
        m.d.comb += [joined_out.eq(joined.o.payload),
                     joined_out.pairs_le1.eq(le1), joined_out.pairs_le2.eq(le2)]
        join = Signal()
        m.d.comb += join.eq(n_rdy & w_rdy & joined.i.ready & ~self.merge)
        m.d.comb += [nq.r_en.eq(join | self.merge & merger.a.ready), w_take.eq(join),
                     joined.i.valid.eq(join),
                     joined.o.ready.eq(oq.i.ready & ~self.merge),
                     merger.o.ready.eq(oq.i.ready & self.merge),
                     oq.i.valid.eq(Mux(self.merge, merger.o.valid, joined.o.valid))]
        # The item into the output queue: a stride item's chunk fields (the two sides' bits
        # and the pair-count flags) are never read (the compactor decides a stride item on
        # its `stride` and `pair`), so they are the joined chunk's whatever the path, and
        # only the fields a stride item uses are chosen by `merge` (no multiplexer in front
        # of the 128 bits).
        item = Signal(combined_layout())
        m.d.comb += [item.eq(joined_out)]
        for field in ("stride", "n_base", "w_base", "pair", "last"):
            m.d.comb += getattr(item, field).eq(Mux(self.merge, getattr(merger.o.payload, field),
                                                    getattr(joined_out, field)))
        m.d.comb += oq.i.payload.eq(item)
        wiring.connect(m, oq.o, wiring.flipped(self.o))
        return m
