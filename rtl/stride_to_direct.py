"""Stride -> direct index converter (the stride side of seed 000 claim 9)."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import ADDR, CHUNK, chunk_layout

from snpu.verif.index import STRIDE_ESCAPE as ESCAPE
#: the largest window (entries taken per cycle)
MAX_WINDOW = 4


class StrideToDirect(wiring.Component):
    """Expands one row's stride index into direct-index chunks.

    ``start`` begins a row of ``n`` positions whose stride index has ``count`` entries
    (escapes included); ``start`` must not be raised while ``busy``.  Two stages:

    1. *Prefix sum*: up to ``window`` entries per cycle are taken from a byte window (a
       :class:`~.fetch.ByteFetcher`) — how many depends only on counters, never on their
       values — and turned into absolute positions by a running prefix sum.  Escapes only
       move the cursor; elements enter a small position queue.
    2. *Chunk assembly*: queued positions below the current chunk's end set its bits;
       when the head lies beyond it (or the row's entries are exhausted) the chunk leaves.
       Whether a position lies below the end is a flag queued with it, compared as it
       enters (and, for the positions still queued, against the next chunk's end as a
       chunk leaves), so which positions go this cycle starts at registers; they go into
       the chunk even while the output waits, only the chunk's leaving waits for ``o.ready``.

    Exactly ``max(1, ceil(n / CHUNK))`` chunks leave per row; the last one has ``last`` set.
    A chunk's ``base`` is ``val_base + rank`` (packed storage: ``rank`` kept elements precede
    the chunk) or ``val_base + chunk_start`` (unpacked).  ``kept`` counts the row's elements
    emitted so far (the row total once ``busy`` falls).  A position ``>= n`` is a malformed
    index: ``error`` rises (sticky until the next ``start``) and the row still ends after its
    last chunk, so nothing hangs.

    Throughput: one chunk per cycle while chunks hold at most ``window`` entries, otherwise
    ``ceil(entries / window)`` cycles per chunk.  Latency from an entry to its chunk: 3 cycles
    (a register between the byte window and the prefix sum keeps the fetcher's multiplexers
    and the adders in different cycles).

    Parameters
    ----------
    window:
        Entries taken per cycle (``E``, 1..:data:`MAX_WINDOW`).  The position queue between
        the stages holds ``max(6, 2 E + 2)`` positions.
    """

    def __init__(self, window: int = 2):
        if not 1 <= window <= MAX_WINDOW:
            raise ValueError(f"window must be in 1..{MAX_WINDOW}, got {window}")
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
        QUEUE = max(6, 2 * E + 2)  # positions between the prefix-sum stage and the assembler
        n = Signal(16)
        packed = Signal()
        val_base = Signal(ADDR)

        # ---- Stage 0: take entries (how many depends on counters only) into a register.
        remaining = Signal(16)
        rem_cap = Signal(range(E + 1))  # min(remaining, E), kept beside remaining
        cursor = Signal(17)
        queue = [Signal(17, name=f"q{k}") for k in range(QUEUE)]
        # per queued position: it lies below `end` (in the current chunk), kept beside it
        below = [Signal(name=f"below{k}") for k in range(QUEUE)]
        qlen = Signal(range(QUEUE + 1))
        pop = Signal(range(E + 1))  # set by stage 2
        st_n = Signal(range(E + 1))       # entries held in the stage-0 register
        # per staged entry: an element (not an escape), and the elements staged before it
        st_elem = [Signal(name=f"st_elem{k}") for k in range(E)]
        st_before = [Signal(range(k + 1), name=f"st_before{k}") for k in range(E)]
        space = Signal(range(QUEUE + 1))
        # this cycle's pops and the staged entries' escapes are ignored: no content paths
        m.d.comb += space.eq(QUEUE - qlen - st_n)
        take = Signal(range(E + 1))
        lim = Mux(rem_cap < self.avail, rem_cap, self.avail)
        m.d.comb += take.eq(Mux(space < lim, space, lim))
        m.d.comb += self.take.eq(Mux(self.busy, take, 0))

        # ---- Stage 1: prefix sum of the staged entries; elements enter the queue.
        # st_pre[k] is the sum of the first k + 1 staged bytes, registered with them.
        st_pre = [Signal(10, name=f"st_pre{k}") for k in range(E)]
        pos = [Signal(17, name=f"pos{k}") for k in range(E)]
        m.d.comb += [pos[k].eq(cursor + st_pre[k]) for k in range(E)]
        cursor_next = Signal(17)
        advance = Const(0, 10)
        for k in range(E):
            advance = Mux(st_n == k + 1, st_pre[k], advance)
        m.d.comb += cursor_next.eq(cursor + advance)

        # The queue after stage 2 pops and stage 1 appends (at most E each), each position
        # with its `below` flag for the next cycle's `end`: the chunk's (kept), or after an
        # emission the next chunk's (`next_end`).  Every position, queued or new, is compared
        # with both ends from registers, in parallel; the pop count only selects.
        end = Signal(17)  # registered: n for the last chunk, else chunk_lo + CHUNK
        next_end = Signal(17)  # registered: the next chunk's end (n for the last)
        emit = Signal()
        below_next = [Signal(name=f"below_next{k}") for k in range(QUEUE)]
        m.d.comb += [below_next[k].eq(Mux(emit, queue[k] < next_end, below[k]))
                     for k in range(QUEUE)]
        shifted = [(queue[k + p], below_next[k + p]) if k + p < QUEUE else (Const(0, 17), 0)
                   for p in range(E + 1) for k in range(QUEUE)]
        base_q = [Signal(17, name=f"base_q{k}") for k in range(QUEUE)]
        base_below = [Signal(name=f"base_below{k}") for k in range(QUEUE)]
        for k in range(QUEUE):
            m.d.comb += [base_q[k].eq(queue[k]), base_below[k].eq(below_next[k])]
            for p in range(1, E + 1):
                with m.If(pop == p):
                    m.d.comb += [base_q[k].eq(shifted[p * QUEUE + k][0]),
                                 base_below[k].eq(shifted[p * QUEUE + k][1])]
        pos_below = [Signal(name=f"pos_below{j}") for j in range(E)]
        m.d.comb += [pos_below[j].eq(Mux(emit, pos[j] < next_end, pos[j] < end))
                     for j in range(E)]
        left = Signal(range(QUEUE + 1))
        m.d.comb += left.eq(qlen - pop)
        appended = [Signal(17, name=f"app{k}") for k in range(QUEUE)]
        appended_below = [Signal(name=f"app_below{k}") for k in range(QUEUE)]
        n_new = Signal(range(E + 1))
        m.d.comb += n_new.eq(sum(st_elem))
        # element j goes to position left + (elements before it): escapes leave no gap
        slot = [Signal(range(QUEUE + E + 1), name=f"slot{j}") for j in range(E)]
        m.d.comb += [slot[j].eq(left + st_before[j]) for j in range(E)]
        for k in range(QUEUE):
            m.d.comb += [appended[k].eq(base_q[k]), appended_below[k].eq(base_below[k])]
            for j in range(E):
                with m.If(st_elem[j] & (slot[j] == k)):
                    m.d.comb += [appended[k].eq(pos[j]), appended_below[k].eq(pos_below[j])]

        # ---- Stage 2: chunk assembly.
        chunk_lo = Signal(17)
        chunks_left = Signal(11)
        acc_bits = Signal(CHUNK)
        acc_kept = Signal(range(CHUNK + 1))
        rank = self.kept
        fits = [Signal(name=f"fits{k}") for k in range(E)]
        for k in range(E):
            m.d.comb += fits[k].eq((qlen > k) & below[k] & (fits[k - 1] if k else 1))
        out_free = Signal()
        m.d.comb += out_free.eq(~self.o.valid | self.o.ready)
        # entries of this chunk are taken into acc_bits whether or not the output is free:
        # only the chunk's emission waits for it, so the queue never waits for `o.ready`
        m.d.comb += pop.eq(Mux(self.busy, sum(fits), 0))
        new_bits = Signal(CHUNK)
        m.d.comb += new_bits.eq(Cat(*[Cat(*[fits[k] & (queue[k][:6] == b) for k in range(E)]).any()
                                      for b in range(CHUNK)]))
        blocked = Signal()  # the queue head lies beyond this chunk
        m.d.comb += blocked.eq((qlen > pop) & (pop < E))
        drained = Signal()  # every entry of the row is in this chunk or earlier
        m.d.comb += drained.eq((rem_cap == 0) & (st_n == 0) & (qlen == pop))
        is_last = Signal()
        m.d.comb += is_last.eq(chunks_left == 1)
        m.d.comb += emit.eq(self.busy & out_free & (blocked | drained))

        with m.If(self.start):
            m.d.sync += [
                self.busy.eq(1), self.error.eq(0), n.eq(self.n), packed.eq(self.packed),
                val_base.eq(self.val_base), remaining.eq(self.count), cursor.eq(0), qlen.eq(0),
                st_n.eq(0), *[e.eq(0) for e in st_elem],
                # min(count, E) without a 16-bit comparison on the start path
                rem_cap.eq(Mux((self.count[8:] != 0) | (self.count[:8] > E), E,
                               self.count[:E.bit_length()])),
                chunk_lo.eq(0), rank.eq(0), acc_bits.eq(0), acc_kept.eq(0),
                end.eq(Mux(self.n > CHUNK, CHUNK, self.n)),
                next_end.eq(Mux(self.n > 2 * CHUNK, 2 * CHUNK, self.n)),
                # an empty row still produces one (empty, last) chunk
                chunks_left.eq(Mux(self.n == 0, 1, (self.n + CHUNK - 1) >> 6)),
            ]
        with m.Elif(self.busy):
            rem_next = remaining - take
            m.d.sync += [remaining.eq(rem_next), rem_cap.eq(Mux(rem_next > E, E, rem_next)),
                         cursor.eq(cursor_next), qlen.eq(left + n_new), st_n.eq(take)]
            # prefix sums of the window's bytes, as a tree (two adders deep at E = 4)
            b = [self.bytes[i].as_unsigned() for i in range(E)]
            pre = [b[0]] + [None] * (E - 1)
            if E > 1:
                pre[1] = b[0] + b[1]
            if E > 2:
                pre[2] = pre[1] + b[2]
            if E > 3:
                pre[3] = pre[1] + (b[2] + b[3])
            m.d.sync += [st_pre[k].eq(pre[k]) for k in range(E)]
            is_elem = [(k < take) & (self.bytes[k] != ESCAPE) for k in range(E)]
            m.d.sync += [st_elem[k].eq(is_elem[k]) for k in range(E)]
            m.d.sync += [st_before[k].eq(sum(is_elem[:k])) for k in range(1, E)]
            m.d.sync += [queue[k].eq(appended[k]) for k in range(QUEUE)]
            m.d.sync += [below[k].eq(appended_below[k]) for k in range(QUEUE)]
            with m.If(emit):
                m.d.sync += [
                    self.o.payload.bits.eq(acc_bits | new_bits),
                    self.o.payload.base.eq(val_base + Mux(packed, rank, chunk_lo)),
                    self.o.payload.last.eq(is_last),
                    rank.eq(rank + acc_kept + pop),
                    acc_bits.eq(0), acc_kept.eq(0),
                    chunk_lo.eq(chunk_lo + CHUNK), chunks_left.eq(chunks_left - 1),
                    end.eq(next_end),
                    # the end of the chunk after the next: n if that is the last
                    next_end.eq(Mux(chunks_left == 3, n, chunk_lo + 3 * CHUNK)),
                ]
                with m.If(is_last):
                    m.d.sync += self.busy.eq(0)
                    with m.If(blocked | (rem_cap != 0)):
                        m.d.sync += self.error.eq(1)  # a position at or beyond n
            with m.Else():
                m.d.sync += [acc_bits.eq(acc_bits | new_bits), acc_kept.eq(acc_kept + pop)]
        with m.If(out_free):
            m.d.sync += self.o.valid.eq(emit & ~self.start)
        return m
