"""Connection processing unit: combines the neuron index with the weight index (claims 7-10)."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from .layouts import chunk_layout, combined_layout, entry_layout
from .stride_merge import StrideMerge


class ConnectionUnit(wiring.Component):
    """Produces the combined connection index of one row.

    * ``merge = 0``: both sides arrive as direct-index chunks (a stride side has already been
      expanded by its source, claim 9); the combined chunk is their bitwise AND (claim 7).
    * ``merge = 1``: both sides arrive as stride entries (a direct side has been converted by
      its source, claim 10); a :class:`StrideMerge` intersects them (claim 8).

    Throughput one chunk per cycle on the AND path; see :class:`StrideMerge` for the merge.
    Latency 1 cycle (AND), 3 cycles (merge, through its input queues).
    """

    n_chunks: In(stream.Signature(chunk_layout()))
    w_chunks: In(stream.Signature(chunk_layout()))
    n_entries: In(stream.Signature(entry_layout()))
    w_entries: In(stream.Signature(entry_layout()))
    merge: In(1)
    n_packed: In(1)
    w_packed: In(1)
    o: Out(stream.Signature(combined_layout()))

    def __init__(self):
        self._merger = StrideMerge()
        width = len(Signal(entry_layout()).as_value())
        # Registered queues in front of the merge: its pop decisions depend on the entries'
        # values, and must not reach back into the sources' fetchers in the same cycle.
        self._queues = [SyncFIFOBuffered(width=width, depth=2) for _ in range(2)]
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.merger = merger = self._merger
        m.d.comb += [merger.n_packed.eq(self.n_packed), merger.w_packed.eq(self.w_packed)]
        for k, (src, dst) in enumerate(((self.n_entries, merger.a), (self.w_entries, merger.b))):
            q = self._queues[k]
            m.submodules[f"queue{k}"] = q
            m.d.comb += [q.w_data.eq(src.payload), q.w_en.eq(src.valid), src.ready.eq(q.w_rdy),
                         dst.payload.eq(q.r_data), dst.valid.eq(q.r_rdy), q.r_en.eq(dst.ready)]

        and_out = Signal(combined_layout())
        and_valid = Signal()
        and_free = Signal()
        m.d.comb += and_free.eq(~and_valid | (self.o.ready & ~self.merge))
        join = Signal()
        m.d.comb += join.eq(self.n_chunks.valid & self.w_chunks.valid & and_free & ~self.merge)
        m.d.comb += [self.n_chunks.ready.eq(join), self.w_chunks.ready.eq(join)]
        n, w = self.n_chunks.payload, self.w_chunks.payload
        with m.If(and_free):
            m.d.sync += and_valid.eq(join)
            m.d.sync += [
                and_out.stride.eq(0), and_out.bits.eq(n.bits & w.bits),
                and_out.n_bits.eq(n.bits), and_out.w_bits.eq(w.bits),
                and_out.n_base.eq(n.base), and_out.w_base.eq(w.base),
                and_out.pair.eq(0), and_out.last.eq(n.last),
            ]

        with m.If(self.merge):
            m.d.comb += [self.o.valid.eq(merger.o.valid), self.o.payload.eq(merger.o.payload),
                         merger.o.ready.eq(self.o.ready)]
        with m.Else():
            m.d.comb += [self.o.valid.eq(and_valid), self.o.payload.eq(and_out)]
        return m
