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
    into one more word than beats.  Latency 2 cycles: a beat is rotated to its lanes as it
    enters a register stage (the lane it starts at, the lanes it fills in the current word,
    and whether it completes that word are worked out there too, from a copy of the fill
    lane that this stage keeps), so the merge stage starts from registers and only
    merges.
    """

    def __init__(self, word_bytes: int = 8):
        self.word_bytes = word_bytes
        super().__init__({"i": In(stream.Signature(beat_layout(word_bytes))),
                          "o": Out(stream.Signature(word_layout(word_bytes)))})

    def elaborate(self, platform):
        m = Module()
        n = self.word_bytes
        lg = (n - 1).bit_length()
        cur = Signal(8 * n)
        cur_be = Signal(n)
        flush = Signal()       # the row's final partial word must still leave
        out_free = Signal()
        m.d.comb += out_free.eq(~self.o.valid | self.o.ready)

        def lanes_from(start):
            """Lanes at or above ``start``."""
            return Cat(*[k >= start for k in range(n)])

        # ---- Stage 1: rotate the beat to its destination lanes, registered.  The lane the
        # beat starts at is its `tag`'s for a row's first beat, else the lane the previous
        # beat left to fill (`fill`, kept here: it depends on the beats' counts alone, so
        # the merge stage never computes it).  Every beat's bytes are consecutive from that
        # lane, wrapping into the next word.
        pre_layout = data.StructLayout({
            "rot": 8 * n,       # the beat's bytes at their destination lanes
            "rot_be": n,        # ... and which lanes hold them
            "here": n,          # lanes at or above the start: the current word's part
            "spill": 1,         # the beat completes the current word
            "carries": 1,       # ... and has bytes for the word after it
            "first": 1, "last": 1,
        })
        m.submodules.pre = pre = PipeRegister(pre_layout)
        i = self.i.payload
        fill = Signal(lg)      # the lane the next beat of the row starts at
        begin = Signal(lg)     # the lane this beat starts at
        m.d.comb += begin.eq(Mux(i.first, i.tag[:lg], fill))
        amount = Signal(lg)    # the rotation that takes the beat's bytes to their lanes
        # (a later beat starts at lane 0 of the bus: its rotation is its start)
        m.d.comb += amount.eq(Mux(i.first, i.tag[:lg] - i.offset, fill))
        total = Signal(lg + 2)  # lanes of the current word filled after this beat
        m.d.comb += total.eq(begin + i.count)
        rot_be = Signal(n)      # lane k is the beat's if (k - begin) mod n < count
        m.d.comb += rot_be.eq(Cat(*[(k - begin)[:lg] < i.count for k in range(n)]))
        with m.If(self.i.valid & pre.i.ready):
            m.d.sync += fill.eq(total[:lg])  # (total < 2n: the lane it leaves, mod n)
        m.d.comb += [pre.i.valid.eq(self.i.valid), self.i.ready.eq(pre.i.ready),
                     pre.i.payload.rot.eq(_rotate_bytes(m, i.data, amount, "rot")),
                     pre.i.payload.rot_be.eq(rot_be),
                     pre.i.payload.here.eq(lanes_from(begin)),
                     pre.i.payload.spill.eq(total >= n), pre.i.payload.carries.eq(total > n),
                     pre.i.payload.first.eq(i.first), pre.i.payload.last.eq(i.last)]

        # ---- Stage 2: merge into the current word.
        p = pre.o.payload
        cur_be_eff = Signal(n)
        m.d.comb += cur_be_eff.eq(Mux(p.first, 0, cur_be))
        word_be = Signal(n)
        m.d.comb += word_be.eq(cur_be_eff | (p.rot_be & p.here))

        take = Signal()
        m.d.comb += [take.eq(pre.o.valid & out_free & ~flush), pre.o.ready.eq(out_free & ~flush)]
        with m.If(out_free):
            m.d.sync += self.o.valid.eq(0)
        with m.If(flush & out_free):
            m.d.sync += [self.o.valid.eq(1), self.o.payload.data.eq(cur),
                         self.o.payload.be.eq(cur_be), self.o.payload.last.eq(1),
                         flush.eq(0), cur_be.eq(0)]
        with m.Elif(take):
            merged = (cur & ~self._lane_mask(p.here)) | (p.rot & self._lane_mask(p.here))
            with m.If(p.spill):
                m.d.sync += [
                    self.o.valid.eq(1), self.o.payload.data.eq(merged),
                    self.o.payload.be.eq(word_be),
                    self.o.payload.last.eq(p.last & ~p.carries),
                    cur.eq(p.rot), cur_be.eq(p.rot_be & ~p.here),
                    flush.eq(p.last & p.carries),
                ]
            with m.Elif(p.last):
                m.d.sync += [self.o.valid.eq(1), self.o.payload.data.eq(merged),
                             self.o.payload.be.eq(word_be), self.o.payload.last.eq(1),
                             cur_be.eq(0)]
            with m.Else():
                m.d.sync += [cur.eq(merged), cur_be.eq(word_be)]
        return m

    @staticmethod
    def _lane_mask(lanes: Value) -> Value:
        return Cat(*[lanes[k].replicate(8) for k in range(len(lanes))])
