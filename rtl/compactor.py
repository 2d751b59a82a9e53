"""Data processing (compaction) unit: combined index -> processed neuron/weight pairs."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .bits import encode_onehot, lowest_set, popcount
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
    taken in the cycle it arrives.  Latency 3 cycles (select; position and ranks;
    address).

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

        # Stage A: positions of the picked bits.
        a_valid, a_last, a_stride = Signal(), Signal(), Signal()
        a_sel = Signal(L)
        a_onehot = [Signal(CHUNK, name=f"a_onehot{j}") for j in range(L)]
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
                m.d.sync += [a_onehot[j].eq(picked[j]), a_sel[j].eq(picked[j] != 0)]

        # Stage B: positions and ranks.
        b_valid, b_last, b_stride = Signal(), Signal(), Signal()
        b_sel = Signal(L)
        b_n_base, b_w_base = Signal(ADDR), Signal(ADDR)
        b_pos = [Signal(6, name=f"b_pos{j}") for j in range(L)]
        b_n_rank = [Signal(7, name=f"b_n_rank{j}") for j in range(L)]
        b_w_rank = [Signal(7, name=f"b_w_rank{j}") for j in range(L)]
        with m.If(advance):
            m.d.sync += [b_valid.eq(a_valid), b_last.eq(a_last), b_stride.eq(a_stride),
                         b_sel.eq(Mux(a_stride, a_pair, a_sel)),
                         b_n_base.eq(a_n_base), b_w_base.eq(a_w_base)]
            for j in range(L):
                pos = encode_onehot(m, a_onehot[j], name=f"pos{j}")
                below = Signal(CHUNK, name=f"below{j}")
                m.d.comb += below.eq(a_onehot[j] - 1)
                m.d.sync += [
                    b_pos[j].eq(pos),
                    b_n_rank[j].eq(popcount(m, a_n_bits & below, name=f"n_rank{j}")),
                    b_w_rank[j].eq(popcount(m, a_w_bits & below, name=f"w_rank{j}")),
                ]

        # Stage C: addresses.
        with m.If(advance):
            m.d.sync += [self.o.valid.eq(b_valid), self.o.payload.last.eq(b_last),
                         self.o.payload.valid.eq(b_sel)]
            for j in range(L):
                n_off = Mux(b_stride, 0, Mux(self.n_packed, b_n_rank[j], b_pos[j]))
                w_off = Mux(b_stride, 0, Mux(self.w_packed, b_w_rank[j], b_pos[j]))
                m.d.sync += [self.o.payload.n_addr[j].eq(b_n_base + n_off),
                             self.o.payload.w_addr[j].eq(b_w_base + w_off)]
        return m
