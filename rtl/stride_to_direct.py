"""Stride -> direct index converter (the stride side of seed 000 claim 9)."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .bits import one_hots, sum_below
from .layouts import ADDR, CHUNK, chunk_layout

#: the largest window (entries taken per cycle)
MAX_WINDOW = 4
#: groups of entries held between the positions' register and the chunk assembly (a group
#: consumed in one cycle is followed by one in the queue, one in the positions' register and
#: one staged: four, so the take does not wait while the assembly keeps pace)
GROUPS = 4


class StrideToDirect(wiring.Component):
    """Expands one row's stride index into direct-index chunks.

    ``start`` begins a row of ``n`` positions whose stride index has ``count`` entries
    (escapes included); ``start`` must not be raised while ``busy``.  Three stages:

    1. *Take*: up to ``window`` entries per cycle are taken from a byte window (a
       :class:`~.fetch.ByteFetcher`) — how many depends only on counters, never on their
       values — as a *group*: the bytes and which of them are elements (escapes only move
       the cursor) are registered.
    2. *Positions*: the group's absolute positions (the cursor plus the bytes' prefix sums)
       are registered, and from that register enter a queue of :data:`GROUPS` groups (so
       the chunk flags of a group entering the queue are compared from registers, not
       after the adders).  A group moves as a whole: the queue is the head group's
       registers and a ring of ``GROUPS - 1`` groups behind it; a group leaving the head
       loads the head from the ring's oldest (or from the group entering, if the ring is
       empty), so only the head's registers wait for the decision that it leaves.
    3. *Chunk assembly*, on the queue's head group: an element whose chunk number (the
       position's bits 6 and up) equals the current chunk's sets a bit of the chunk being
       built; one in the next chunk sets a bit of the chunk after it (so a group straddling
       a chunk boundary takes one cycle, not two).  The chunk leaves when the head holds
       an element beyond it (or the row's entries are exhausted); the head leaves the
       queue once all its elements are placed.  Which of the head's elements lie in the
       current chunk and in the next are registered flags, compared as a group becomes the
       head or a chunk leaves (for every group that may be the head next cycle, against
       every chunk that may be current); elements are placed while the output waits, only
       the chunk's leaving waits for ``o.ready``.

    Exactly ``max(1, ceil(n / CHUNK))`` chunks leave per row; the last one has ``last`` set.
    A chunk's ``base`` is ``val_base + rank`` (packed storage: ``rank`` kept elements precede
    the chunk) or ``val_base + chunk_start`` (unpacked).  ``kept`` counts the row's elements
    emitted so far (the row total once ``busy`` falls).  A position ``>= n`` is a malformed
    index: ``error`` rises as the last chunk leaves (sticky until the next ``start``) and the
    row still ends after its last chunk, so nothing hangs.

    Throughput: one group (``window`` entries) per cycle and one chunk per cycle; a group
    whose elements span more than two chunks takes a cycle per chunk.  Latency from an
    entry to its chunk: 4 cycles.

    Parameters
    ----------
    window:
        Entries taken per cycle (``E``, 1..:data:`MAX_WINDOW`).
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
            "escape": In(window),   # bytes[k] == 255, from the byte fetcher's flags
            "avail": In(range(window + 1)),
            "take": Out(range(window + 1)),
            "o": Out(stream.Signature(chunk_layout())),
        })

    def elaborate(self, platform):
        m = Module()
        E = self._window
        CB = (CHUNK - 1).bit_length()  # position bits inside a chunk
        POS = 17                       # a position: n < 2**16, plus one group past it
        packed = Signal()
        val_base = Signal(ADDR)

        # ---- Stage 1: take a group (how many entries depends on counters only).
        remaining = Signal(16)
        rem_cap = Signal(range(E + 1))  # min(remaining, E), kept beside remaining
        staged = Signal()               # a group is staged (entries were taken)
        st_byte = [Signal(8, name=f"st_byte{k}") for k in range(E)]  # 0 past the group
        st_elem = [Signal(name=f"st_elem{k}") for k in range(E)]    # entry k is an element
        count = Signal(range(GROUPS + 1))  # groups in the queue
        head_valid = Signal()              # count != 0, kept beside it
        one_group = Signal()               # count == 1, kept beside it
        take = Signal(range(E + 1))
        # a group taken now finds a slot (the queue's pops are not counted): count + the
        # registered group + the staged one < GROUPS, a register computed from their next
        # values (no adder before the take); 0 while the converter is not busy (cleared as
        # its last chunk goes), so the take needs no `busy` after it
        room = Signal()
        m.d.comb += take.eq(Mux(room, Mux(rem_cap < self.avail, rem_cap, self.avail), 0))
        m.d.comb += self.take.eq(take)
        # take != 0, without the minimum's comparison (what the queue's accounting needs)
        taking = Signal()
        m.d.comb += taking.eq(room & (rem_cap != 0) & (self.avail != 0))

        # ---- Stage 2: positions of the staged group; into the queue.
        cursor = Signal(POS)
        # prefix sums of the group's bytes, as a tree (two adders deep at E = 4); the bytes
        # past the group are 0, so the last sum is the cursor's advance.  (Not in stage 1:
        # the window's bytes come out of the byte fetcher's multiplexers, and the adders
        # after them were the core's worst path.)
        b = [st_byte[k].as_unsigned() for k in range(E)]
        pre = [b[0]] + [None] * (E - 1)
        if E > 1:
            pre[1] = b[0] + b[1]
        if E > 2:
            pre[2] = pre[1] + b[2]
        if E > 3:
            pre[3] = pre[1] + (b[2] + b[3])
        pos = [Signal(POS, name=f"pos{k}") for k in range(E)]
        m.d.comb += [pos[k].eq(cursor + pre[k]) for k in range(E)]
        # the positions' register: the group enters the queue from here
        e_pos = [Signal(POS, name=f"e_pos{k}") for k in range(E)]
        e_elem = Signal(E)
        e_push = Signal()   # e_elem != 0, kept beside it: the registered group enters now
        st_push = Signal()  # the staged group holds an element (it goes into e_pos now)
        m.d.comb += st_push.eq(Cat(*st_elem).any())
        push = e_push
        # the queue: the head group in registers of its own, the groups behind it in a ring
        # of GROUPS - 1 slots (a group pushed is written into the ring's next slot whether or
        # not it goes to the head instead, so the ring's writes never wait for `pop`; `pop`
        # loads only the head)
        Q = GROUPS - 1
        head_pos = [Signal(POS, name=f"head_pos{k}") for k in range(E)]
        head_elem = Signal(E)
        ring_pos = [[Signal(POS, name=f"ring{d}_pos{k}") for k in range(E)] for d in range(Q)]
        ring_elem = [Signal(E, name=f"ring{d}_elem") for d in range(Q)]
        ring_rd, ring_wr = Signal(range(Q)), Signal(range(Q))
        ring_any = Signal()   # a group waits behind the head: `count` (the head counted) > 1
        m.d.comb += ring_any.eq(head_valid & ~one_group)

        # ---- Stage 3: chunk assembly on the head group.
        cur = Signal(POS - CB)       # the chunk being built
        cur1 = Signal(POS - CB)      # cur + 1
        cur2 = Signal(POS - CB)      # cur + 2
        chunks_left = Signal(11)
        is_last = Signal()           # chunks_left == 1, kept beside it
        next_last = Signal()         # chunks_left == 2
        last_off = Signal(CB)        # the row's last position inside the last chunk
        empty_row = Signal()         # n == 0: no position is inside the row
        done = Signal(E)             # the head's elements already placed
        # the head's elements in the current chunk and the next, placed before or not (the
        # chunk's bits are set from these: setting a bit again changes nothing, so `done`
        # is not on the path into the bits, only into the counts and the decision to emit)
        elem_cur, elem_next = Signal(E), Signal(E)
        head_elems = Mux(head_valid, head_elem, 0)
        # which of the head's positions are in the current chunk and in the next: registers,
        # compared as the group becomes the head or the chunk moves on (for each group that
        # may be the head next cycle and each chunk that may be current), so the emit
        # decision and the counts start at registers, not at a comparison of chunk numbers
        h_cur, h_next = Signal(E), Signal(E)
        m.d.comb += [elem_cur.eq(head_elems & h_cur), elem_next.eq(head_elems & h_next)]
        pending = Signal(E)
        in_cur, in_next = Signal(E), Signal(E)
        m.d.comb += [pending.eq(head_elems & ~done),
                     in_cur.eq(elem_cur & ~done), in_next.eq(elem_next & ~done)]
        blocked = Signal()   # the head holds an element beyond this chunk
        consumed = Signal()  # every element of the head is placed now
        m.d.comb += [blocked.eq((pending & ~in_cur).any()),
                     consumed.eq((pending & ~in_cur & ~in_next) == 0)]
        pop = Signal()
        m.d.comb += pop.eq(self.busy & head_valid & consumed)
        drained = Signal()   # every entry of the row is placed by now
        m.d.comb += drained.eq((rem_cap == 0) & ~staged & ~e_push &
                               (~head_valid | (one_group & consumed)))
        out_free = Signal()
        m.d.comb += out_free.eq(~self.o.valid | self.o.ready)
        emit = Signal()
        m.d.comb += emit.eq(self.busy & out_free & (blocked | drained))

        offsets = [head_pos[k][:CB] for k in range(E)]
        new_cur = one_hots(m, offsets, elem_cur, CHUNK, name="new_cur")
        new_next = one_hots(m, offsets, elem_next, CHUNK, name="new_next")
        # an element placed into the last chunk past the row's last position (compared as
        # placed, offset by offset: no mask of the last chunk's positions), or into the chunk
        # after the last (placed, never emitted)
        past_n = Signal()
        m.d.comb += past_n.eq(Cat(*[(in_cur[k] & is_last | in_next[k] & next_last) &
                                    (empty_row | (offsets[k] > last_off)) |
                                    in_next[k] & is_last
                                    for k in range(E)]).any())
        overflow = Signal()  # such an element was placed before
        n_cur, n_next = Signal(range(E + 1)), Signal(range(E + 1))
        m.d.comb += [n_cur.eq(sum(in_cur)), n_next.eq(sum(in_next))]
        acc_cur, acc_next = Signal(CHUNK), Signal(CHUNK)
        kept_cur, kept_next = Signal(range(CHUNK + 1)), Signal(range(CHUNK + 1))
        chunk_bits = Signal(CHUNK)
        m.d.comb += chunk_bits.eq(acc_cur | new_cur)
        # the elements of chunks that left before the last one, and of the last one (added
        # into rank_base the cycle after: no adder after the placement into the wide sum)
        rank_base = Signal(ADDR)
        last_kept = Signal(range(CHUNK + 1))
        m.d.comb += self.kept.eq(rank_base + last_kept)

        # The group taken, registered in every cycle, busy or not: `take` is 0 while the
        # converter is not busy (`room` is), so `start` need not clear them (a reset on
        # their 37 flip-flops from `start` was a placed path): a `start` is never raised
        # while busy, so in its cycle nothing is taken and in the first busy cycle they
        # are 0.
        # The window's bytes go into a register as they are (the adders sit after it).
        m.d.sync += [st_byte[k].eq(Mux(k < take, self.bytes[k], 0)) for k in range(E)]
        # (the escape flags come with the bytes: no comparison after the window's
        # multiplexers)
        m.d.sync += [st_elem[k].eq((k < take) & ~self.escape[k]) for k in range(E)]
        m.d.sync += staged.eq(taking)

        with m.If(self.busy):
            # min(remaining - take, E) without the 16-bit difference: with 3E or more left,
            # E or more stay (take <= E); below that the difference fits the low bits
            low_bits = (3 * E).bit_length()
            many = Signal()
            m.d.comb += many.eq((remaining[low_bits:] != 0) | (remaining[:low_bits] >= 3 * E))
            low_next = Signal(low_bits)
            m.d.comb += low_next.eq(remaining[:low_bits] - take)
            m.d.sync += [remaining.eq(remaining - take),
                         rem_cap.eq(Mux(many | (low_next > E), E, low_next)),
                         cursor.eq(cursor + pre[E - 1])]
            m.d.sync += [*[e_pos[k].eq(pos[k]) for k in range(E)],
                         e_elem.eq(Cat(*st_elem)), e_push.eq(st_push)]
            # the queue: the head leaves when placed; the group that becomes the head next is
            # the ring's oldest, or the group pushed now if the ring is empty (`succ`)
            def wrap(p):
                return Mux(p == Q - 1, 0, p + 1)
            ring_pos_rd = [Signal(POS, name=f"ring_rd_pos{k}") for k in range(E)]
            ring_elem_rd = Signal(E)
            with m.Switch(ring_rd):
                for d in range(Q):
                    with m.Case(d):
                        m.d.comb += [ring_pos_rd[k].eq(ring_pos[d][k]) for k in range(E)]
                        m.d.comb += ring_elem_rd.eq(ring_elem[d])
            succ_pos = [Mux(ring_any, ring_pos_rd[k], e_pos[k]) for k in range(E)]
            succ_elem = Mux(ring_any, ring_elem_rd, e_elem)
            for d in range(Q):
                with m.If(push & (ring_wr == d)):
                    m.d.sync += [ring_pos[d][k].eq(e_pos[k]) for k in range(E)]
                    m.d.sync += ring_elem[d].eq(e_elem)
            move = Signal()      # the head is loaded now (it leaves, or it is empty)
            m.d.comb += move.eq(pop | ~head_valid)
            with m.If(move):
                m.d.sync += [head_pos[k].eq(succ_pos[k]) for k in range(E)]
                m.d.sync += head_elem.eq(succ_elem)
            # the ring: its oldest leaves when it moves to the head; the group pushed stays in
            # the ring unless it went to the head (an empty ring and a head that moves)
            ring_out = move & ring_any
            ring_in = push & ~(move & ~ring_any)
            m.d.sync += [ring_rd.eq(Mux(ring_out, wrap(ring_rd), ring_rd)),
                         ring_wr.eq(Mux(ring_in, wrap(ring_wr), ring_wr))]
            # the head's chunk flags next cycle: the head then is the successor if the head
            # moves now, else the head; the current chunk then is `cur1` if a chunk leaves
            # now, else `cur`
            def flags(chunks):
                """(in the current chunk next cycle, in the next chunk next cycle)"""
                return (Cat(*[Mux(emit, c == cur1, c == cur) for c in chunks]),
                        Cat(*[Mux(emit, c == cur2, c == cur1) for c in chunks]))
            # (the successor's flags are compared for the ring's oldest and for the group
            # pushed, each from registers, and chosen after the comparison)
            ring_cur, ring_next = flags([ring_pos_rd[k][CB:] for k in range(E)])
            push_cur, push_next = flags([e_pos[k][CB:] for k in range(E)])
            head_cur, head_next = flags([head_pos[k][CB:] for k in range(E)])
            m.d.sync += [h_cur.eq(Mux(move, Mux(ring_any, ring_cur, push_cur), head_cur)),
                         h_next.eq(Mux(move, Mux(ring_any, ring_next, push_next), head_next))]
            # (pop and the take are late: what depends on them is computed for each of their
            # values, from registers, and selected by them last)
            kept_groups = count + push               # the groups next cycle if none pops
            m.d.sync += [count.eq(Mux(pop, kept_groups - 1, kept_groups)),
                         head_valid.eq(Mux(pop, kept_groups > 1, kept_groups != 0)),
                         one_group.eq(Mux(pop, kept_groups == 2, kept_groups == 1)),
                         done.eq(Mux(pop, 0, done | in_cur | in_next))]
            # room next cycle: the groups then in the queue and in flight (registered now,
            # staged now, taken now) leave a slot -- count + push + st_push + taking - pop <
            # GROUPS, as comparisons of `count` with constants chosen by the one-bit terms
            m.d.sync += room.eq(sum_below(count, [push, st_push, taking, ~pop], GROUPS + 1))
            m.d.sync += [rank_base.eq(rank_base + last_kept), last_kept.eq(0),
                         overflow.eq(overflow | past_n)]
            with m.If(emit):
                m.d.sync += [
                    self.o.payload.bits.eq(chunk_bits),
                    self.o.payload.base.eq(val_base + Mux(packed, self.kept, cur << CB)),
                    self.o.payload.last.eq(is_last),
                    last_kept.eq(kept_cur + n_cur),
                    acc_cur.eq(acc_next | new_next), kept_cur.eq(kept_next + n_next),
                    acc_next.eq(0), kept_next.eq(0),
                    cur.eq(cur1), cur1.eq(cur2), cur2.eq(cur2 + 1),
                    chunks_left.eq(chunks_left - 1), is_last.eq(next_last),
                    next_last.eq(chunks_left == 3),
                ]
                with m.If(is_last):
                    m.d.sync += [self.busy.eq(0), room.eq(0)]
                    # an element at or beyond n: past the last chunk, or inside it past n
                    with m.If(blocked | (rem_cap != 0) | overflow | past_n):
                        m.d.sync += self.error.eq(1)
            with m.Else():
                m.d.sync += [acc_cur.eq(chunk_bits), kept_cur.eq(kept_cur + n_cur),
                             acc_next.eq(acc_next | new_next), kept_next.eq(kept_next + n_next)]
        # (`start` comes last, after the busy work it never meets -- it is not raised while
        # busy -- so it is the last multiplexer before the registers it loads, not a select
        # at the head of every chain: it fans out to most of this block's registers)
        with m.If(self.start):
            m.d.sync += [
                self.busy.eq(1), self.error.eq(0), packed.eq(self.packed),
                val_base.eq(self.val_base), remaining.eq(self.count), cursor.eq(0),
                e_elem.eq(0), e_push.eq(0), ring_rd.eq(0), ring_wr.eq(0),
                count.eq(0), head_valid.eq(0), one_group.eq(0), done.eq(0), room.eq(1),
                # min(count, E) without a 16-bit comparison on the start path
                rem_cap.eq(Mux((self.count[8:] != 0) | (self.count[:8] > E), E,
                               self.count[:E.bit_length()])),
                cur.eq(0), cur1.eq(1), cur2.eq(2), h_cur.eq(0), h_next.eq(0),
                rank_base.eq(0), last_kept.eq(0),
                acc_cur.eq(0), acc_next.eq(0), kept_cur.eq(0), kept_next.eq(0),
                # an empty row still produces one (empty, last) chunk
                chunks_left.eq(Mux(self.n == 0, 1, (self.n + CHUNK - 1) >> CB)),
                is_last.eq(self.n <= CHUNK),
                next_last.eq((self.n > CHUNK) & (self.n <= 2 * CHUNK)),
                last_off.eq((self.n - 1)[:CB]), empty_row.eq(self.n == 0), overflow.eq(0),
            ]
        with m.If(out_free):
            m.d.sync += self.o.valid.eq(emit & ~self.start)
        return m
