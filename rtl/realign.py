"""Byte realigner: moves a row's bytes from their source byte lanes to their destination."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .dma_reader import beat_layout
from .skid import PipeRegister


def word_layout(word_bytes: int = 8) -> data.StructLayout:
    """A destination word: its data, byte enables, and whether it is the row's last word."""
    return data.StructLayout({"data": 8 * word_bytes, "be": word_bytes, "last": 1})


WORD = word_layout(8)  #: a 64-bit destination word


def _rotate_bytes(m: Module, value: Value, amount: Value, name: str) -> Value:
    """Rotate ``value`` left by ``amount`` bytes (an n:1 multiplexer per byte)."""
    n = len(value) // 8
    out = Signal(len(value), name=name)
    with m.Switch(amount):
        for k in range(n):
            with m.Case(k):
                m.d.comb += out.eq(value.rotate_left(8 * k))
    return out


class Realigner(wiring.Component):
    """Repacks rows: source beats (valid bytes at any lanes) in, destination words out, each
    row's first byte landing at byte lane ``tag % word_bytes`` of its first beat (beats and
    words are ``word_bytes`` wide: 8 by default, the AXI bus's width in the LD unit).

    A beat with ``first`` set begins a row (no gap between rows is needed); only a row's
    first beat may have a non-zero ``offset`` (the DMA reader's and the ST unit's later
    beats start at lane 0), so a later beat's rotation is the lane to fill, with no
    subtraction.  Output words are
    consecutive; their byte enables mark the row's bytes; a row's last word has ``last``
    set.  A classic
    rotate-and-merge datapath: each beat is rotated so its bytes sit at their destination
    lanes, the part that wraps past the last lane carries into the next word.

    Throughput one beat per cycle; one extra cycle at the end of a row whose bytes spill
    into one more word than beats.  Latency 2 cycles: a beat first enters a register stage
    with what follows from the beat alone (its valid lanes, and for a row's first beat its
    rotation, the lanes it fills and how far), so the merge stage starts from registers.
    """

    def __init__(self, word_bytes: int = 8):
        self.word_bytes = word_bytes
        super().__init__({"i": In(stream.Signature(beat_layout(word_bytes))),
                          "o": Out(stream.Signature(word_layout(word_bytes)))})

    def elaborate(self, platform):
        m = Module()
        n = self.word_bytes
        lg = (n - 1).bit_length()
        fill = Signal(lg + 1)  # next destination lane to fill in the current word (0..n-1)
        cur = Signal(8 * n)
        cur_be = Signal(n)
        flush = Signal()       # the row's final partial word must still leave
        out_free = Signal()
        m.d.comb += out_free.eq(~self.o.valid | self.o.ready)

        def lanes_from(start):
            """Lanes at or above ``start``."""
            return Cat(*[k >= start for k in range(n)])

        # ---- Stage 1: what follows from the beat alone, registered.  For a row's first
        # beat everything depends on its `tag` only, so it is worked out here; for a later
        # beat the merge stage works it out from `fill` (a register), and `first` selects.
        pre_layout = data.StructLayout({
            "data": 8 * n, "count": lg + 1, "first": 1, "last": 1,
            "valid": n,         # the beat's valid lanes
            "amount0": lg,      # a first beat's rotation to its lanes
            "here0": n,         # a first beat's lanes in its first word
            "total0": lg + 2,   # a first beat's lanes filled in its first word
        })
        m.submodules.pre = pre = PipeRegister(pre_layout)
        i = self.i.payload
        m.d.comb += [pre.i.valid.eq(self.i.valid), self.i.ready.eq(pre.i.ready),
                     pre.i.payload.data.eq(i.data), pre.i.payload.count.eq(i.count),
                     pre.i.payload.first.eq(i.first), pre.i.payload.last.eq(i.last),
                     pre.i.payload.valid.eq(((1 << i.count) - 1) << i.offset),
                     pre.i.payload.amount0.eq(i.tag[:lg] - i.offset),
                     pre.i.payload.here0.eq(lanes_from(i.tag[:lg])),
                     pre.i.payload.total0.eq(i.tag[:lg] + i.count)]

        # ---- Stage 2: rotate and merge.
        p = pre.o.payload
        amount = Signal(lg)        # the rotation that takes the beat's bytes to their lanes
        m.d.comb += amount.eq(Mux(p.first, p.amount0, fill[:lg]))
        cur_be_eff = Signal(n)
        m.d.comb += cur_be_eff.eq(Mux(p.first, 0, cur_be))
        rot = _rotate_bytes(m, p.data, amount, "rot")
        rot_be = Signal(n)
        m.d.comb += rot_be.eq(Cat(*[p.valid.bit_select((k - amount)[:lg], 1)
                                    for k in range(n)]))
        here = Signal(n)  # lanes at or above `fill`: this word
        m.d.comb += here.eq(Mux(p.first, p.here0, lanes_from(fill)))
        word_be = Signal(n)
        m.d.comb += word_be.eq(cur_be_eff | (rot_be & here))
        total = Signal(lg + 2)     # lanes of the current word filled after this beat
        m.d.comb += total.eq(Mux(p.first, p.total0, fill + p.count))
        spill = Signal()  # this beat completes the current word
        m.d.comb += spill.eq(total >= n)
        carries = Signal()  # ... and has bytes for the word after it
        m.d.comb += carries.eq(total > n)

        take = Signal()
        m.d.comb += [take.eq(pre.o.valid & out_free & ~flush), pre.o.ready.eq(out_free & ~flush)]
        with m.If(out_free):
            m.d.sync += self.o.valid.eq(0)
        with m.If(flush & out_free):
            m.d.sync += [self.o.valid.eq(1), self.o.payload.data.eq(cur),
                         self.o.payload.be.eq(cur_be), self.o.payload.last.eq(1),
                         flush.eq(0), cur_be.eq(0)]
        with m.Elif(take):
            merged = (cur & ~self._lane_mask(here)) | (rot & self._lane_mask(here))
            with m.If(spill):
                m.d.sync += [
                    self.o.valid.eq(1), self.o.payload.data.eq(merged),
                    self.o.payload.be.eq(word_be),
                    self.o.payload.last.eq(p.last & ~carries),
                    cur.eq(rot), cur_be.eq(rot_be & ~here), fill.eq(total - n),
                    flush.eq(p.last & carries),
                ]
            with m.Elif(p.last):
                m.d.sync += [self.o.valid.eq(1), self.o.payload.data.eq(merged),
                             self.o.payload.be.eq(word_be), self.o.payload.last.eq(1),
                             cur_be.eq(0), fill.eq(total)]
            with m.Else():
                m.d.sync += [cur.eq(merged), cur_be.eq(word_be), fill.eq(total)]
        return m

    @staticmethod
    def _lane_mask(lanes: Value) -> Value:
        return Cat(*[lanes[k].replicate(8) for k in range(len(lanes))])
