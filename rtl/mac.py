"""MAC unit: int8 x int8 products, a registered adder tree and an int32 accumulator."""

from __future__ import annotations

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out


def mac_input_layout(lanes: int) -> data.StructLayout:
    return data.StructLayout({
        "n": data.ArrayLayout(signed(8), lanes),
        "w": data.ArrayLayout(signed(8), lanes),
        "valid": lanes,
        "last": 1,
    })


class MacUnit(wiring.Component):
    """Accumulates dot products of processed neuron/weight pairs, one row at a time.

    Each input beat carries up to ``lanes`` pairs (``valid`` marks the real ones).  The
    products are summed by an adder tree registered at every level and added to an int32
    accumulator (wrap-around).  The beat with ``last`` set ends the row: the row's sum leaves
    on ``o`` and the accumulator restarts at zero.  A row may consist of one beat with no
    valid pair (an empty row sums to 0).

    Throughput one beat per cycle; latency ``2 + ceil(log2(lanes))`` cycles from the last
    beat to the sum.  Back-pressure on ``o`` stalls the whole pipeline.

    Parameters
    ----------
    lanes:
        Pairs per beat (``L``).
    """

    def __init__(self, lanes: int = 1):
        if lanes < 1 or lanes & (lanes - 1):
            raise ValueError(f"lanes must be a power of two >= 1, got {lanes}")
        self._lanes = lanes
        super().__init__({
            "i": In(stream.Signature(mac_input_layout(lanes))),
            "o": Out(stream.Signature(data.StructLayout({"sum": signed(32)}))),
        })

    @property
    def lanes(self) -> int:
        return self._lanes

    @property
    def latency(self) -> int:
        return 2 + (self._lanes - 1).bit_length()

    def elaborate(self, platform):
        m = Module()
        L = self._lanes
        advance = Signal()
        m.d.comb += [advance.eq(~self.o.valid | self.o.ready), self.i.ready.eq(advance)]

        # Stage 0: products, registered as they leave the multipliers (no reset, no mask:
        # the register can be the multiplier block's own output register); which are real
        # pairs is registered beside them and masks them as they are first added.
        prods = [Signal(signed(16), name=f"prod{k}", reset_less=True) for k in range(L)]
        real = Signal(L)
        valid, last = Signal(), Signal()
        with m.If(advance):
            for k in range(L):
                m.d.sync += prods[k].eq(self.i.payload.n[k] * self.i.payload.w[k])
            m.d.sync += [real.eq(self.i.payload.valid), valid.eq(self.i.valid),
                         last.eq(self.i.payload.last)]
        level = [Mux(real[k], prods[k], 0) for k in range(L)]

        # Adder tree, one register per level.
        depth = 0
        while len(level) > 1:
            depth += 1
            width = 16 + depth
            nxt = [Signal(signed(width), name=f"sum{depth}_{k}") for k in range(len(level) // 2)]
            v, l = Signal(name=f"valid{depth}"), Signal(name=f"last{depth}")
            with m.If(advance):
                m.d.sync += [s.eq(level[2 * k] + level[2 * k + 1]) for k, s in enumerate(nxt)]
                m.d.sync += [v.eq(valid), l.eq(last)]
            level, valid, last = nxt, v, l

        # Accumulator: the row's sum leaves with the last beat.
        acc = Signal(signed(32))
        total = Signal(signed(32))
        m.d.comb += total.eq(acc + level[0])
        with m.If(advance):
            m.d.sync += self.o.valid.eq(valid & last)
            with m.If(valid):
                with m.If(last):
                    m.d.sync += [self.o.payload.sum.eq(total), acc.eq(0)]
                with m.Else():
                    m.d.sync += acc.eq(total)
        return m
