"""Requantiser: int32 accumulator -> int8 with per-channel bias, multiplier and shift.

(No ``from __future__ import annotations`` here: Amaranth reads the signature annotations.)
"""


from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from snpu.verif.numerics import SHIFT_MAX

REQUANT_IN = data.StructLayout({
    "acc": signed(32),
    "bias": signed(32),
    "mult": signed(16),
    "shift": unsigned(6),
    "relu": 1,
})

#: bits of the product ``wrap32(acc + bias) * mult`` (exact: 32 x 16 bits)
PRODUCT_BITS = 48
#: bits of the shifted product ``u`` kept before rounding: the values whose rounded result
#: ``floor((u + 1) / 2)`` is not saturated (-256..254) fit nine signed bits
KEPT_BITS = 9


class Requantizer(wiring.Component):
    """``y = sat8(round_half_up(wrap32(acc + bias) * mult / 2**shift))``, optional ReLU.

    Bit-exact with :func:`snpu.verif.numerics.requantize`: the product is exact (48 bits),
    rounding adds ``2**(shift-1)`` before an arithmetic shift, saturation clamps to
    ``-128..127`` (``0..127`` with ReLU).  ``shift`` above 47 is never produced by the golden
    model's parameter check; the hardware treats it as 47.

    How, without a 48-bit rounding adder and shifter: with ``u = floor(2 p / 2**shift)``
    (the product ``p`` shifted one place less), the rounded result is
    ``floor((u + 1) / 2)``.  Only whether ``u`` fits :data:`KEPT_BITS` signed bits and, if
    so, its low bits matter: outside that range the result saturates by the sign of ``p``.
    So the third stage selects nine bits of ``2 p`` and tests the bits above them against a
    mask of the positions at or above ``shift + 8`` (made in the second stage, beside the
    multiply); the last stage adds one, halves and saturates nine bits.

    The 32 x 16 multiply is split at bit 16 of ``acc + bias``: two products of one 18 x 18
    block each, registered alone, are added in the next stage (the sum of the partial
    products right after the multipliers was the block's critical path).

    Throughput one element per cycle; latency 5 cycles (bias add; partial products and
    mask; their sum; select and range test; round and saturate).  Back-pressure on ``o``
    stalls the pipeline.
    """

    i: In(stream.Signature(REQUANT_IN))
    o: Out(stream.Signature(data.StructLayout({"y": signed(8)})))

    LATENCY = 5

    def elaborate(self, platform):
        m = Module()
        advance = Signal()
        m.d.comb += [advance.eq(~self.o.valid | self.o.ready), self.i.ready.eq(advance)]
        p = self.i.payload
        P, K = PRODUCT_BITS, KEPT_BITS
        T = P + 1  # bits of 2 p

        # stage 1: bias add; the shift clamped
        # (the multiplies' operands and products have no reset: the valid flags say what
        # they hold, and so they can be the multiplier blocks' own registers)
        v1, mult1 = Signal(signed(32), reset_less=True), Signal(signed(16), reset_less=True)
        shift1 = Signal(range(SHIFT_MAX + 1))
        relu1, valid1 = Signal(), Signal()
        # stage 2a: the partial products (low half of acc + bias unsigned), and the
        # positions of 2 p that must equal its sign
        lo_a, hi_a = Signal(signed(34), reset_less=True), Signal(signed(32), reset_less=True)
        shift_a, relu_a, valid_a = Signal.like(shift1), Signal(), Signal()
        above_a = Signal(T)
        # stage 2: the product
        prod2, shift2, relu2, valid2 = Signal(signed(P)), Signal.like(shift1), Signal(), Signal()
        above2 = Signal(T)
        # stage 3: the low bits of u = 2 p >> shift, and whether u fits them
        u3, fits3, neg3, relu3, valid3 = Signal(signed(K)), Signal(), Signal(), Signal(), Signal()

        twice = Signal(signed(T))
        m.d.comb += twice.eq(Cat(C(0, 1), prod2))
        off_sign = Signal(T)  # bit j: bit j of 2 p differs from its sign
        m.d.comb += off_sign.eq(twice ^ prod2[-1].replicate(T))
        rounded = Signal(signed(K + 1))
        m.d.comb += rounded.eq((u3 + 1) >> 1)
        with m.If(advance):
            m.d.sync += [
                v1.eq((p.acc + p.bias)[:32]), mult1.eq(p.mult),
                shift1.eq(Mux(p.shift > SHIFT_MAX, SHIFT_MAX, p.shift)),
                relu1.eq(p.relu), valid1.eq(self.i.valid),
                lo_a.eq(v1[:16].as_unsigned() * mult1), hi_a.eq(v1[16:].as_signed() * mult1),
                shift_a.eq(shift1), relu_a.eq(relu1), valid_a.eq(valid1),
                above_a.eq(Cat(shift1 + (K - 1) <= j for j in range(T))),
                prod2.eq(lo_a + (hi_a << 16)), shift2.eq(shift_a), relu2.eq(relu_a),
                valid2.eq(valid_a), above2.eq(above_a),
                u3.eq((twice >> shift2)[:K]), fits3.eq(~(off_sign & above2).any()),
                neg3.eq(prod2[-1]), relu3.eq(relu2), valid3.eq(valid2),
                self.o.valid.eq(valid3),
            ]
            lo = Mux(relu3, 0, -128)
            with m.If(~fits3):
                m.d.sync += self.o.payload.y.eq(Mux(neg3, lo, 127))
            with m.Elif(rounded > 127):
                m.d.sync += self.o.payload.y.eq(127)
            with m.Elif(rounded < lo):
                m.d.sync += self.o.payload.y.eq(lo)
            with m.Else():
                m.d.sync += self.o.payload.y.eq(rounded[:8])
        return m
