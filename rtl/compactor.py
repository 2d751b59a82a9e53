"""Data processing (compaction) unit: combined index -> processed neuron/weight pairs."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .bits import encode_onehot, lowest_set, popcount_bytes, sum_tree
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

    Throughput: an item with ``k`` pairs takes ``max(1, ceil(k / lanes))`` cycles; an item is
    taken in the cycle it arrives.  Latency 3 cycles (select; position and per-byte
    counts; ranks and addresses).

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

        # The item being worked on: the held one, or the one arriving this cycle.
        busy = Signal()
        held = Signal(combined_layout())
        cur = Signal(combined_layout())
        cur_valid = Signal()
        m.d.comb += [
            cur.eq(Mux(busy, held, self.i.payload)),
            cur_valid.eq(busy | self.i.valid),
            self.i.ready.eq(advance & ~busy),
        ]

        # Select up to L lowest set bits.
        rem = cur.bits
        picked = [Signal(CHUNK, name=f"picked{j}") for j in range(L)]
        if L == 1:
            m.d.comb += picked[0].eq(lowest_set(rem))
        else:
            # prefix[k] = set bits of rem below position k (saturating at L)
            width = range(L + 1)
            prefix = [Signal(width, name=f"prefix{k}") for k in range(CHUNK)]
            m.d.comb += prefix[0].eq(0)
            for k in range(1, CHUNK):
                m.d.comb += prefix[k].eq(Mux(prefix[k - 1] == L, L, prefix[k - 1] + rem[k - 1]))
            for j in range(L):
                m.d.comb += picked[j].eq(Cat(rem[k] & (prefix[k] == j) for k in range(CHUNK)))
        taken = Signal(CHUNK)
        m.d.comb += taken.eq(Cat(*[Cat(*(p[k] for p in picked)).any() for k in range(CHUNK)]))
        rest = Signal(CHUNK)
        m.d.comb += rest.eq(Mux(cur.stride, 0, rem & ~taken))
        finished = Signal()
        m.d.comb += finished.eq(rest == 0)
        emit = Signal()
        m.d.comb += emit.eq(cur.stride | (taken != 0) | (cur.last & finished))

        with m.If(advance & cur_valid):
            with m.If(finished):
                m.d.sync += busy.eq(0)
            with m.Else():
                m.d.sync += [busy.eq(1), held.eq(cur), held.bits.eq(rest)]

        # Stage A: the picked bits and the masks below them.
        a_valid, a_last, a_stride = Signal(), Signal(), Signal()
        a_sel = Signal(L)
        a_onehot = [Signal(CHUNK, name=f"a_onehot{j}") for j in range(L)]
        a_below = [Signal(CHUNK, name=f"a_below{j}") for j in range(L)]
        a_n_bits, a_w_bits = Signal(CHUNK), Signal(CHUNK)
        a_n_base, a_w_base = Signal(ADDR), Signal(ADDR)
        a_pair = Signal()
        with m.If(advance):
            m.d.sync += a_valid.eq(cur_valid & emit)
            m.d.sync += [
                a_last.eq(cur.last & finished), a_stride.eq(cur.stride), a_pair.eq(cur.pair),
                a_n_bits.eq(cur.n_bits), a_w_bits.eq(cur.w_bits),
                a_n_base.eq(cur.n_base), a_w_base.eq(cur.w_base),
            ]
            for j in range(L):
                m.d.sync += [a_onehot[j].eq(picked[j]), a_below[j].eq(picked[j] - 1),
                             a_sel[j].eq(picked[j] != 0)]

        # Stage B: position; per-byte counts of each side's bits below the pick.
        b_valid, b_last, b_stride = Signal(), Signal(), Signal()
        b_sel = Signal(L)
        b_n_base, b_w_base = Signal(ADDR), Signal(ADDR)
        b_pos = [Signal(6, name=f"b_pos{j}") for j in range(L)]
        b_n_parts = [[Signal(4, name=f"b_np{j}_{k}") for k in range(CHUNK // 8)] for j in range(L)]
        b_w_parts = [[Signal(4, name=f"b_wp{j}_{k}") for k in range(CHUNK // 8)] for j in range(L)]
        with m.If(advance):
            m.d.sync += [b_valid.eq(a_valid), b_last.eq(a_last), b_stride.eq(a_stride),
                         b_sel.eq(Mux(a_stride, a_pair, a_sel)),
                         b_n_base.eq(a_n_base), b_w_base.eq(a_w_base)]
            for j in range(L):
                m.d.sync += b_pos[j].eq(encode_onehot(m, a_onehot[j], name=f"pos{j}"))
                for dst, bits, tag in ((b_n_parts[j], a_n_bits, "n"), (b_w_parts[j], a_w_bits, "w")):
                    parts = popcount_bytes(m, bits & a_below[j], name=f"{tag}pc{j}_")
                    m.d.sync += [d.eq(p) for d, p in zip(dst, parts)]

        # Stage C: ranks and addresses.
        with m.If(advance):
            m.d.sync += [self.o.valid.eq(b_valid), self.o.payload.last.eq(b_last),
                         self.o.payload.valid.eq(b_sel)]
            for j in range(L):
                n_rank, w_rank = sum_tree(b_n_parts[j]), sum_tree(b_w_parts[j])
                n_off = Mux(b_stride, 0, Mux(self.n_packed, n_rank, b_pos[j]))
                w_off = Mux(b_stride, 0, Mux(self.w_packed, w_rank, b_pos[j]))
                m.d.sync += [self.o.payload.n_addr[j].eq(b_n_base + n_off),
                             self.o.payload.w_addr[j].eq(b_w_base + w_off)]
        return m
