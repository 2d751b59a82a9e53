"""Requantiser: int32 accumulator -> int8 with per-channel bias, multiplier and shift.

(No ``from __future__ import annotations`` here: Amaranth reads the signature annotations.)
"""


from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

REQUANT_IN = data.StructLayout({
    "acc": signed(32),
    "bias": signed(32),
    "mult": signed(16),
    "shift": unsigned(6),
    "relu": 1,
})


class Requantizer(wiring.Component):
    """``y = sat8(round_half_up(wrap32(acc + bias) * mult / 2**shift))``, optional ReLU.

    Bit-exact with :func:`snpu.verif.numerics.requantize`: the product is exact (48 bits),
    rounding adds ``2**(shift-1)`` before an arithmetic shift, saturation clamps to
    ``-128..127`` (``0..127`` with ReLU).  ``shift`` above 47 is never produced by the golden
    model's parameter check; the hardware treats it as 47.

    Throughput one element per cycle; latency 4 cycles (bias add, multiply, round + shift,
    saturate).  Back-pressure on ``o`` stalls the pipeline.
    """

    i: In(stream.Signature(REQUANT_IN))
    o: Out(stream.Signature(data.StructLayout({"y": signed(8)})))

    LATENCY = 4

    def elaborate(self, platform):
        m = Module()
        advance = Signal()
        m.d.comb += [advance.eq(~self.o.valid | self.o.ready), self.i.ready.eq(advance)]
        p = self.i.payload

        v1, mult1, shift1, relu1, valid1 = (Signal(signed(32)), Signal(signed(16)), Signal(6),
                                            Signal(), Signal())
        prod2, shift2, relu2, valid2 = Signal(signed(48)), Signal(6), Signal(), Signal()
        res3, relu3, valid3 = Signal(signed(48)), Signal(), Signal()
        shift_eff = Signal(6)
        m.d.comb += shift_eff.eq(Mux(shift2 > 47, 47, shift2))
        half = Signal(48)
        m.d.comb += half.eq((Const(1, 48) << shift_eff) >> 1)
        with m.If(advance):
            m.d.sync += [
                v1.eq((p.acc + p.bias)[:32]), mult1.eq(p.mult), shift1.eq(p.shift),
                relu1.eq(p.relu), valid1.eq(self.i.valid),
                prod2.eq(v1 * mult1), shift2.eq(shift1), relu2.eq(relu1), valid2.eq(valid1),
                res3.eq((prod2 + half.as_signed()) >> shift_eff), relu3.eq(relu2),
                valid3.eq(valid2),
                self.o.valid.eq(valid3),
            ]
            lo = Mux(relu3, 0, -128)
            with m.If(res3 > 127):
                m.d.sync += self.o.payload.y.eq(127)
            with m.Elif(res3 < lo):
                m.d.sync += self.o.payload.y.eq(lo)
            with m.Else():
                m.d.sync += self.o.payload.y.eq(res3[:8])
        return m
