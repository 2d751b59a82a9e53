"""Sparse processing unit: thresholding and group pruning of neurons (seed 000 claims 5, 11)."""

from __future__ import annotations

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out


class SparseProcessingUnit(wiring.Component):
    """Derives the neuron direct index of bytes as the DMA writes them into the neuron buffer.

    For each enabled byte ``x`` of a beat, the output bit is ``|x| > thresh``.  With group
    pruning (``group_log2 = g > 0``), the beat's bytes form aligned groups of ``2**g``; a
    group in which more than ``t4`` elements have ``|x| <= t3`` has all its bits cleared
    (claim 11).  Groups never straddle beats because beats are word aligned in the neuron
    buffer and group-pruned loads start and end on group boundaries (checked by the golden
    model).

    Three register stages: the first compares every byte with both thresholds, the second
    counts each group's small bytes and compares the count with ``t4`` for every group
    size, the third picks the beat's group size and masks.  Throughput one beat per cycle;
    latency three cycles; a stall (``o`` full and not taken) holds every stage.  The
    configuration is sampled with the beat (``group_log2`` and ``t4`` travel with it).

    Parameters
    ----------
    beat_bytes:
        Bytes per beat (the neuron buffer word).

    Members
    -------
    i : In(stream)
        ``data`` (the beat), ``be`` (byte enables), ``addr`` (word address).
    o : Out(stream)
        ``bits`` (one per byte), ``be`` and ``addr`` passed through.
    thresh, group_log2, t3, t4 : In
        Configuration (registers ``ld.thresh``, ``ld.group_log2``, ``ld.group_t3``,
        ``ld.group_t4``), sampled with each beat.
    idle : Out(1)
        Neither stage holds a beat: with ``~i.valid``, every beat given has left.
    """

    def __init__(self, beat_bytes: int = 8, addr_bits: int = 13):
        if beat_bytes not in (4, 8, 16, 32):
            raise ValueError(f"beat_bytes must be 4, 8, 16 or 32, got {beat_bytes}")
        self._n = beat_bytes
        self._in_layout = data.StructLayout({"data": 8 * beat_bytes, "be": beat_bytes,
                                             "addr": addr_bits})
        self._out_layout = data.StructLayout({"bits": beat_bytes, "be": beat_bytes,
                                              "addr": addr_bits})
        super().__init__({
            "i": In(stream.Signature(self._in_layout)),
            "o": Out(stream.Signature(self._out_layout)),
            "thresh": In(7),
            "group_log2": In(2),
            "t3": In(7),
            "t4": In(4),
            "idle": Out(1),
        })

    @property
    def beat_bytes(self) -> int:
        return self._n

    def elaborate(self, platform):
        m = Module()
        n = self._n

        def above(x, t):
            """``|x| > t`` for an int8 ``x`` and ``0 <= t < 128``, without negating ``x``
            and with one comparator: for ``x < 0``, ``|x| = ~x + 1``, so ``|x| > t`` is
            ``~x[:7] >= t``; for ``x >= 0`` it is ``x[:7] > t``.  With ``y = x[:7]``, its
            bits inverted when ``x < 0``, both are ``2 y + sign > 2 t``: one 8-bit
            comparison of ``Cat(sign, y)`` with ``Cat(0, t)``."""
            y = x[:7] ^ x[7].replicate(7)
            return Cat(x[7], y) > Cat(C(0, 1), t)

        xs = [self.i.payload.data[8 * k:8 * k + 8] for k in range(n)]
        advance = Signal()  # both stages move (the output is free or taken)
        m.d.comb += [advance.eq(~self.o.valid | self.o.ready), self.i.ready.eq(advance)]

        # Stage 1: per byte, above the threshold ('keep', masked by the byte enable) and at
        # most t3 ('small'); the beat's group settings travel with it.
        s1_valid = Signal()
        keep = Signal(n)
        small = Signal(n)
        s1_g = Signal(2)
        s1_t4 = Signal(4)
        s1_be = Signal(n)
        s1_addr = Signal.like(self.i.payload.addr)
        with m.If(advance):
            m.d.sync += [s1_valid.eq(self.i.valid), s1_g.eq(self.group_log2), s1_t4.eq(self.t4),
                         s1_be.eq(self.i.payload.be), s1_addr.eq(self.i.payload.addr)]
            m.d.sync += [keep[k].eq(above(xs[k], self.thresh) & self.i.payload.be[k])
                         for k in range(n)]
            m.d.sync += [small[k].eq(~above(xs[k], self.t3)) for k in range(n)]

        # Stage 2: group survival for each supported group size, into registers (the
        # counts and their comparisons; the choice of the beat's size is stage 3's).
        s2_valid = Signal()
        s2_keep = Signal(n)
        s2_g = Signal(2)
        s2_be = Signal(n)
        s2_addr = Signal.like(self.i.payload.addr)
        survive = {0: Const(-1, n)}
        for g in (1, 2, 3):
            size = 1 << g
            if size > n:
                continue
            s = Signal(n, name=f"survive{size}")
            with m.If(advance):
                for grp in range(n // size):
                    count = sum(small[grp * size + k] for k in range(size))
                    m.d.sync += s[grp * size:(grp + 1) * size].eq(
                        Mux(count <= s1_t4, (1 << size) - 1, 0))
            survive[g] = s
        with m.If(advance):
            m.d.sync += [s2_valid.eq(s1_valid), s2_keep.eq(keep), s2_g.eq(s1_g),
                         s2_be.eq(s1_be), s2_addr.eq(s1_addr)]

        # Stage 3: the beat's group size picks its survivors.
        groups = Signal(n)
        with m.Switch(s2_g):
            for g, s in survive.items():
                with m.Case(g):
                    m.d.comb += groups.eq(s)
            with m.Default():
                m.d.comb += groups.eq(-1)
        with m.If(advance):
            m.d.sync += [
                self.o.valid.eq(s2_valid),
                self.o.payload.bits.eq(s2_keep & groups),
                self.o.payload.be.eq(s2_be),
                self.o.payload.addr.eq(s2_addr),
            ]
        m.d.comb += self.idle.eq(~s1_valid & ~s2_valid & ~self.o.valid)
        return m
