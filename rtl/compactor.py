"""Data processing (compaction) unit: combined index -> processed neuron/weight pairs."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .bits import at_most_two, popcount_bytes, sum_tree
from .layouts import ADDR, CHUNK, combined_layout, pairs_layout


class Compactor(wiring.Component):
    """Turns the connection unit's combined index into dense pairs of operand addresses.

    A **chunk** item carries ``CHUNK`` combined bits; each set bit at position ``p`` is one
    pair.  Its neuron address is ``n_base + p`` for unpacked storage, or
    ``n_base + popcount(n_bits below p)`` for packed storage (the pair's rank among the kept
    neurons); likewise for the weight.  Up to ``lanes`` pairs leave per cycle, selected by a
    prefix-popcount network (lane ``j`` takes the set bit with ``j`` set bits below it; for one
    lane this is a find-first-set).  A **stride** item (from the stride merge) already is one
    pair and passes through.  The row's last item produces a beat with ``last`` set even when
    it holds no pair, so every row ends with exactly one ``last`` beat.

    Throughput: an item with ``k`` pairs takes ``max(1, ceil(k / lanes))`` cycles, from the
    cycle it arrives; it is taken (``i.ready``) in its last one, and only the bits it has
    left to select are held meanwhile (its other fields stay on the input).  With one lane
    ``i.ready`` depends only on ``o.ready`` and registers (the output's valid, whether bits
    are held, the item's ``stride`` and pair-count flags): give it a registered ``o.ready``
    (a :class:`~.skid.SkidBuffer`) and the item's producer may use it in the same cycle.
    Latency 3 cycles (select, and mask the bits each offset counts; per-byte counts; offsets
    and addresses).

    Parameters
    ----------
    lanes:
        Pairs per output beat (``L``).

    Members
    -------
    i : In(stream(combined_layout))
    o : Out(stream(pairs_layout(lanes)))
    n_packed, w_packed : In(1)
        Storage of each side (configuration, stable during an instruction).
    """

    def __init__(self, lanes: int = 1):
        if lanes < 1 or lanes > CHUNK:
            raise ValueError(f"lanes must be in 1..{CHUNK}, got {lanes}")
        self._lanes = lanes
        super().__init__({
            "i": In(stream.Signature(combined_layout())),
            "o": Out(stream.Signature(pairs_layout(lanes))),
            "n_packed": In(1),
            "w_packed": In(1),
        })

    @property
    def lanes(self) -> int:
        return self._lanes

    def elaborate(self, platform):
        m = Module()
        L = self._lanes
        advance = Signal()
        m.d.comb += advance.eq(~self.o.valid | self.o.ready)

        # The item being worked on is the input's: it is taken in the cycle its last pairs
        # are selected, so only the bits still to select are held (from its second cycle on).
        busy = Signal()
        held_bits = Signal(CHUNK)
        cur = self.i.payload
        cur_valid = self.i.valid

        # Select up to L lowest set bits.
        rem = Mux(busy, held_bits, cur.n_bits & cur.w_bits)
        picked = [Signal(CHUNK, name=f"picked{j}") for j in range(L)]
        below = [Signal(CHUNK, name=f"below{j}") for j in range(L)]  # positions below a pick
        if L == 1:
            # rem - 1 clears the lowest set bit and sets the ones below it: one carry chain
            # gives both the pick and the mask below it
            dec = Signal(CHUNK)
            m.d.comb += [dec.eq(rem - 1), picked[0].eq(rem & ~dec), below[0].eq(~rem & dec)]
        else:
            # prefix[k] = set bits of rem below position k (saturating at L)
            width = range(L + 1)
            prefix = [Signal(width, name=f"prefix{k}") for k in range(CHUNK)]
            m.d.comb += prefix[0].eq(0)
            for k in range(1, CHUNK):
                m.d.comb += prefix[k].eq(Mux(prefix[k - 1] == L, L, prefix[k - 1] + rem[k - 1]))
            for j in range(L):
                m.d.comb += [picked[j].eq(Cat(rem[k] & (prefix[k] == j) for k in range(CHUNK))),
                             below[j].eq(picked[j] - 1)]
        taken = Signal(CHUNK)
        m.d.comb += taken.eq(Cat(*[Cat(*(p[k] for p in picked)).any() for k in range(CHUNK)]))
        rest = Signal(CHUNK)
        m.d.comb += rest.eq(Mux(cur.stride, 0, rem & ~taken))
        finished = Signal()
        # (one lane: no bit left after the lowest, from registers: the item's flag, or for
        # the bits held, a flag worked out as they were -- at most two bits before the pick
        # that left them)
        held_le1 = Signal()
        if L == 1:
            m.d.comb += finished.eq(cur.stride | Mux(busy, held_le1, cur.pairs_le1))
        else:
            m.d.comb += finished.eq(cur.stride | (rest == 0))
        emit = Signal()
        m.d.comb += emit.eq(cur.stride | rem.any() | (cur.last & finished))  # a pick: a bit left

        m.d.comb += self.i.ready.eq(advance & finished)
        held_le2 = at_most_two(m, held_bits, "held_count")
        with m.If(advance & cur_valid):
            m.d.sync += [busy.eq(~finished), held_bits.eq(rest),
                         held_le1.eq(Mux(busy, held_le2, cur.pairs_le2))]

        # Stage A: per pick, the bits below it that count towards each side's offset: the
        # side's kept bits in packed storage (the pair's rank), every position otherwise (its
        # position p is the number of positions below it); none for a stride item (stage B).
        a_valid, a_last, a_stride = Signal(), Signal(), Signal()
        a_sel = Signal(L)
        a_n_below = [Signal(CHUNK, name=f"a_n_below{j}") for j in range(L)]
        a_w_below = [Signal(CHUNK, name=f"a_w_below{j}") for j in range(L)]
        a_n_base, a_w_base = Signal(ADDR), Signal(ADDR)
        a_pair = Signal()
        with m.If(advance):
            m.d.sync += a_valid.eq(cur_valid & emit)
            m.d.sync += [
                a_last.eq(cur.last & finished), a_stride.eq(cur.stride), a_pair.eq(cur.pair),
                a_n_base.eq(cur.n_base), a_w_base.eq(cur.w_base),
            ]
            # (what counts is known without the selection: one AND after its carry chain, a
            # LUT of four inputs per bit -- the bit, the side's packing, the remaining bit and
            # the carry chain's; a stride item's counts are cleared in stage B instead, on the
            # counts' registers, not here on every bit)
            counted_n = Mux(self.n_packed, cur.n_bits, (1 << CHUNK) - 1)
            counted_w = Mux(self.w_packed, cur.w_bits, (1 << CHUNK) - 1)
            for j in range(L):
                # (one lane: a pick exists when any bit is left, known before the carry chain)
                m.d.sync += [a_sel[j].eq(rem.any() if L == 1 else picked[j] != 0),
                             a_n_below[j].eq(counted_n & below[j]),
                             a_w_below[j].eq(counted_w & below[j])]

        # Stage B: per-byte counts of those bits (none for a stride item: its addresses are
        # its bases).
        b_valid, b_last = Signal(), Signal()
        b_sel = Signal(L)
        b_n_base, b_w_base = Signal(ADDR), Signal(ADDR)
        b_n_parts = [[Signal(4, name=f"b_np{j}_{k}") for k in range(CHUNK // 8)] for j in range(L)]
        b_w_parts = [[Signal(4, name=f"b_wp{j}_{k}") for k in range(CHUNK // 8)] for j in range(L)]
        with m.If(advance):
            m.d.sync += [b_valid.eq(a_valid), b_last.eq(a_last),
                         b_sel.eq(Mux(a_stride, a_pair, a_sel)),
                         b_n_base.eq(a_n_base), b_w_base.eq(a_w_base)]
            for j in range(L):
                for dst, bits, tag in ((b_n_parts[j], a_n_below[j], "n"),
                                       (b_w_parts[j], a_w_below[j], "w")):
                    parts = popcount_bytes(m, bits, name=f"{tag}pc{j}_")
                    m.d.sync += [d.eq(Mux(a_stride, 0, p)) for d, p in zip(dst, parts)]

        # Stage C: offsets and addresses.
        with m.If(advance):
            m.d.sync += [self.o.valid.eq(b_valid), self.o.payload.last.eq(b_last),
                         self.o.payload.valid.eq(b_sel)]
            for j in range(L):
                m.d.sync += [self.o.payload.n_addr[j].eq(b_n_base + sum_tree(b_n_parts[j])),
                             self.o.payload.w_addr[j].eq(b_w_base + sum_tree(b_w_parts[j]))]
        return m
