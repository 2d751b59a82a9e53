"""Vector ALU of the VX unit: pooling reductions and scaled element-wise adds, P lanes wide."""

from amaranth import *
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out


class AluOp(enum.Enum, shape=2):
    MAX = 0   #: running maximum over the beats of a window (max pooling)
    SUM = 1   #: running sum over the beats of a window (average / global pooling)
    EW = 2    #: per beat: a * ma + b * mb, optional ReLU (residual add, scaling, ReLU)


def alu_input_layout(lanes: int) -> data.StructLayout:
    return data.StructLayout({
        "op": AluOp,
        "a": data.ArrayLayout(signed(32), lanes),
        "b": data.ArrayLayout(signed(32), lanes),
        "ma": signed(16),
        "mb": signed(16),
        "relu": 1,
        "first": 1,   # first beat of a window (reductions restart)
        "last": 1,    # last beat of a window: the result leaves
    })


def _carry_save(a: Value, b: Value, c: Value) -> tuple[Value, Value]:
    """Three 32-bit addends as two with the same sum modulo 2**32 (a full adder per bit:
    the sum bits, and the carries one place up)."""
    return (a ^ b ^ c)[:32], Cat(C(0, 1), (a & b | a & c | b & c)[:31])


class VectorAlu(wiring.Component):
    """Element-wise int32 arithmetic on words of ``lanes`` elements, bit-exact with the golden
    model's ``vred`` and ``vew``.

    * ``MAX`` / ``SUM``: the beats from ``first`` to ``last`` are one window; the result (the
      element-wise max, or the wrap-around sum) leaves with the ``last`` beat.
    * ``EW``: every beat produces ``wrap32(a * ma + b * mb)``, clamped at 0 with ``relu``.

    Throughput one word per cycle; latency 3 cycles (multiply; the element-wise sum's
    addends as two; combine).  Back-pressure on ``o`` stalls the pipeline.
    """

    def __init__(self, lanes: int):
        self._lanes = lanes
        super().__init__({
            "i": In(stream.Signature(alu_input_layout(lanes))),
            "o": Out(stream.Signature(data.StructLayout({"v": data.ArrayLayout(signed(32), lanes)}))),
        })

    def elaborate(self, platform):
        m = Module()
        L = self._lanes
        advance = Signal()
        m.d.comb += [advance.eq(~self.o.valid | self.o.ready), self.i.ready.eq(advance)]
        p = self.i.payload

        # Stage 1: partial products, and the operand itself.  Only the low 32 bits of
        # a * ma + b * mb are kept (wrap32), so a * ma is split at bit 16 into
        # a[:16] * ma (a 17 x 16 signed product) and the low 16 bits of a[16:] * ma (to add
        # at bit 16): each multiply fits one 18 x 18 block, and the adder that would join
        # them waits for the next stages.  The products go into their registers straight
        # from the multipliers (whose own delay, about 4 ns on an ECP5, is most of the
        # cycle), for every operation: the operand of a reduction is registered beside
        # them, and stage 3 picks what its operation uses.
        s1_valid, s1_emit = Signal(), Signal()
        s1_op = Signal(AluOp)
        s1_relu, s1_first = Signal(), Signal()
        # (no reset: s1_valid says what they hold; a product register without one can be the
        # multiplier block's own output register, verif/tb/dsp_registers.py)
        s1_a = [Signal(32, name=f"s1_a{k}", reset_less=True) for k in range(L)]    # a
        s1_x = [Signal(32, name=f"s1_x{k}", reset_less=True) for k in range(L)]    # a[:16] * ma
        s1_y = [Signal(32, name=f"s1_y{k}", reset_less=True) for k in range(L)]    # b[:16] * mb
        s1_xh = [Signal(16, name=f"s1_xh{k}", reset_less=True) for k in range(L)]  # a[16:] * ma
        s1_yh = [Signal(16, name=f"s1_yh{k}", reset_less=True) for k in range(L)]  # b[16:] * mb

        def low_product(v, mul):
            return (v[:16].as_unsigned() * mul)[:32]

        def high_product(v, mul):
            return (v[16:].as_unsigned() * mul.as_unsigned())[:16]

        with m.If(advance):
            m.d.sync += [s1_valid.eq(self.i.valid), s1_op.eq(p.op), s1_relu.eq(p.relu),
                         s1_first.eq(p.first),
                         s1_emit.eq(Mux(p.op == AluOp.EW, 1, p.last))]
            for k in range(L):
                m.d.sync += [s1_a[k].eq(p.a[k]),
                             s1_x[k].eq(low_product(p.a[k], p.ma)),
                             s1_xh[k].eq(high_product(p.a[k], p.ma)),
                             s1_y[k].eq(low_product(p.b[k], p.mb)),
                             s1_yh[k].eq(high_product(p.b[k], p.mb))]

        # Stage 2: the element-wise sum's four addends as two (two carry-save layers: no
        # carry chain), into registers in the fabric: the products' registers are the
        # multiplier blocks' own, whose outputs reach the logic over long wires (the
        # multipliers sit in their own rows), so only those wires and two LUTs lie after
        # them; the operand and the control move along.
        s2_valid, s2_emit = Signal(), Signal()
        s2_op = Signal(AluOp)
        s2_relu, s2_first = Signal(), Signal()
        s2_a = [Signal(32, name=f"s2_a{k}", reset_less=True) for k in range(L)]
        s2_sv = [Signal(32, name=f"s2_sv{k}", reset_less=True) for k in range(L)]
        s2_cv = [Signal(32, name=f"s2_cv{k}", reset_less=True) for k in range(L)]
        with m.If(advance):
            m.d.sync += [s2_valid.eq(s1_valid), s2_op.eq(s1_op), s2_relu.eq(s1_relu),
                         s2_first.eq(s1_first), s2_emit.eq(s1_emit)]
            for k in range(L):
                # x + y + (xh + yh) << 16, wrapped at 32 bits
                sv, cv = _carry_save(s1_x[k], s1_y[k], Cat(C(0, 16), s1_xh[k]))
                sv, cv = _carry_save(sv, cv, Cat(C(0, 16), s1_yh[k]))
                m.d.sync += [s2_a[k].eq(s1_a[k]), s2_sv[k].eq(sv), s2_cv[k].eq(cv)]

        # Stage 3: combine with the running value; emit.
        acc = [Signal(signed(32), name=f"acc{k}") for k in range(L)]
        with m.If(advance):
            m.d.sync += self.o.valid.eq(s2_valid & s2_emit)
            for k in range(L):
                a = s2_a[k].as_signed()
                new = Signal(signed(32), name=f"new{k}")
                with m.Switch(s2_op):
                    with m.Case(AluOp.MAX):
                        m.d.comb += new.eq(Mux(s2_first | (a > acc[k]), a, acc[k]))
                    with m.Case(AluOp.SUM):
                        m.d.comb += new.eq(Mux(s2_first, a, (acc[k] + a)[:32]))
                    with m.Default():
                        ew = (s2_sv[k] + s2_cv[k])[:32].as_signed()
                        m.d.comb += new.eq(Mux(s2_relu & (ew < 0), 0, ew))
                with m.If(s2_valid):
                    m.d.sync += acc[k].eq(new)
                    m.d.sync += self.o.payload.v[k].eq(new)
        return m
