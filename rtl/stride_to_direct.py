"""Stride -> direct index converter (the stride side of seed 000 claim 9)."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .bits import popcount
from .layouts import ADDR, CHUNK, chunk_layout

ESCAPE = 255


class StrideToDirect(wiring.Component):
    """Expands one row's stride index into direct-index chunks.

    ``start`` begins a row of ``n`` positions whose stride index has ``count`` entries
    (escapes included); ``start`` must not be raised while ``busy``.  Entries come from a byte window (a :class:`~.fetch.ByteFetcher`):
    up to ``window`` of them are examined per cycle, their positions found by a prefix sum, and
    those that fall in the current chunk set its bits.  Exactly ``ceil(n / CHUNK)`` chunks
    leave per row (one for ``n = 0``); the last one has ``last`` set.  A chunk's ``base`` is
    ``val_base + rank`` (packed storage: ``rank`` kept elements precede the chunk) or
    ``val_base + chunk_start`` (unpacked).

    ``kept`` counts the row's kept elements emitted so far (the row total once ``busy``
    falls).  An entry whose position is ``>= n`` is a malformed index: ``error`` rises (sticky until
    the next ``start``) and the row still ends after its last chunk, so nothing hangs.

    Throughput: one chunk per cycle when a chunk holds at most ``window`` entries, otherwise
    ``ceil(entries / window)`` cycles.  Latency from an entry to its chunk: 1 cycle.

    Parameters
    ----------
    window:
        Entries examined per cycle (``E``).
    """

    def __init__(self, window: int = 4):
        if not 1 <= window <= 8:
            raise ValueError(f"window must be in 1..8, got {window}")
        self._window = window
        super().__init__({
            "start": In(1),
            "n": In(16),
            "count": In(16),
            "val_base": In(ADDR),
            "packed": In(1),
            "busy": Out(1),
            "error": Out(1),
            "kept": Out(ADDR),
            "bytes": In(data.ArrayLayout(8, window)),
            "avail": In(range(window + 1)),
            "take": Out(range(window + 1)),
            "o": Out(stream.Signature(chunk_layout())),
        })

    def elaborate(self, platform):
        m = Module()
        E = self._window
        n = Signal(16)
        remaining = Signal(16)
        packed = Signal()
        val_base = Signal(ADDR)
        chunk_lo = Signal(17)       # position of bit 0 of the current chunk
        chunks_left = Signal(11)    # chunks still to emit in this row, current included
        cursor = Signal(18)         # position reached by the entries taken so far
        rank = self.kept            # kept elements before the current chunk
        acc_bits = Signal(CHUNK)    # bits gathered so far for the current chunk
        acc_kept = Signal(range(CHUNK + 1))

        out_free = Signal()
        m.d.comb += out_free.eq(~self.o.valid | self.o.ready)

        # Examine the window: positions by prefix sum, which entries fit the current chunk.
        visible = Signal(range(E + 1))
        m.d.comb += visible.eq(Mux(remaining < self.avail, remaining, self.avail))
        pos = [Signal(18, name=f"pos{k}") for k in range(E)]
        esc = [Signal(name=f"esc{k}") for k in range(E)]
        fits = [Signal(name=f"fits{k}") for k in range(E)]
        run = cursor
        for k in range(E):
            m.d.comb += [
                esc[k].eq(self.bytes[k] == ESCAPE),
                pos[k].eq(run + self.bytes[k]),
                fits[k].eq((k < visible) & (esc[k] | (pos[k] < chunk_lo + CHUNK))),
            ]
            run = pos[k]
        take = Signal(range(E + 1))
        # the leading entries that fit: a priority chain over the window
        with m.If(Cat(fits).all()):
            m.d.comb += take.eq(E)
        for k in reversed(range(1, E)):
            with m.Elif(Cat(fits[:k]).all()):
                m.d.comb += take.eq(k)
        new_bits = Signal(CHUNK)
        bad = Signal()
        offs = [Signal(range(CHUNK), name=f"off{k}") for k in range(E)]
        m.d.comb += [offs[k].eq((pos[k] - chunk_lo)[:6]) for k in range(E)]
        keep = [Signal(name=f"keep{k}") for k in range(E)]
        m.d.comb += [keep[k].eq((k < take) & ~esc[k]) for k in range(E)]
        m.d.comb += new_bits.eq(Cat(*[Cat(*[keep[k] & (offs[k] == b) for k in range(E)]).any()
                                      for b in range(CHUNK)]))
        m.d.comb += bad.eq(Cat(*[keep[k] & (pos[k] >= n) for k in range(E)]).any())
        cursor_next = Signal(18)
        m.d.comb += cursor_next.eq(cursor)
        for k in range(E):
            with m.If(take == k + 1):
                m.d.comb += cursor_next.eq(pos[k])
        blocked = Signal()  # a visible entry lies beyond this chunk
        m.d.comb += blocked.eq(take < visible)
        row_entries_done = Signal()
        m.d.comb += row_entries_done.eq(remaining == take)
        is_last_chunk = Signal()
        m.d.comb += is_last_chunk.eq(chunks_left == 1)
        emit = Signal()
        m.d.comb += emit.eq(self.busy & (blocked | row_entries_done))
        chunk_bits = Signal(CHUNK)
        m.d.comb += chunk_bits.eq(acc_bits | new_bits)
        kept_now = popcount(m, new_bits, name="kept_now")

        m.d.comb += self.take.eq(Mux(self.busy & out_free, take, 0))

        with m.If(self.start):
            m.d.sync += [
                self.busy.eq(1), self.error.eq(0),
                n.eq(self.n), remaining.eq(self.count), packed.eq(self.packed),
                val_base.eq(self.val_base), chunk_lo.eq(0), cursor.eq(0), rank.eq(0),
                acc_bits.eq(0), acc_kept.eq(0),
                # an empty row still produces one (empty, last) chunk
                chunks_left.eq(Mux(self.n == 0, 1, (self.n + CHUNK - 1) >> 6)),
            ]
        with m.Elif(self.busy & out_free):
            m.d.sync += [remaining.eq(remaining - take), cursor.eq(cursor_next)]
            with m.If(bad | (blocked & is_last_chunk)):
                m.d.sync += self.error.eq(1)
            with m.If(emit):
                m.d.sync += [
                    self.o.payload.bits.eq(chunk_bits),
                    self.o.payload.base.eq(val_base + Mux(packed, rank, chunk_lo)),
                    self.o.payload.last.eq(is_last_chunk),
                    rank.eq(rank + acc_kept + kept_now),
                    acc_bits.eq(0), acc_kept.eq(0),
                    chunk_lo.eq(chunk_lo + CHUNK),
                    chunks_left.eq(chunks_left - 1),
                ]
                with m.If(is_last_chunk):
                    m.d.sync += self.busy.eq(0)
            with m.Else():
                m.d.sync += [acc_bits.eq(chunk_bits), acc_kept.eq(acc_kept + kept_now)]
        with m.If(out_free):
            m.d.sync += self.o.valid.eq(self.busy & ~self.start & emit)
        return m
