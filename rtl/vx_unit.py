"""VX unit: pooling, element-wise operations and requantisation on accumulator words."""

import operator
from functools import reduce

from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from snpu.config import CoreConfig
from snpu.verif import isa
from snpu.verif.isa import REDUCE_OPS, Unit

from .ld_unit import acc_write_layout
from .microcode import args_layout, op_codes, registers_layout
from .requant import Requantizer
from .status import ErrorCode
from .vector_alu import AluOp, VectorAlu

CODES = op_codes(Unit.VX)
# ``vewp`` is ``vew`` with its multipliers in the parameter memory: its operands sit where
# ``vew``'s do (``isa._SCALED_ADD_FIELDS``), so the address generator reads them through
# ``args.vew`` for both
assert all(isa.OPCODE_BY_NAME["vewp"].offsets[f] == isa.OPCODE_BY_NAME["vew"].offsets[f]
           for f in ("dst", "a", "b", "n_o", "n_i"))


class VectorUnit(wiring.Component):
    """Executes ``vred``, ``vew``, ``vewp`` and ``req`` (golden model:
    ``Machine._vred/_vew/_vewp/_req``).

    An address generator walks the instruction's loop nest and reads one accumulator word
    (``lanes`` elements) per cycle, each read's address and enable registered before they
    leave (a cycle after the word is chosen and checked): ``k1 * k2`` reads per output
    word for ``vred``, two (``a`` then ``b``) for ``vew``, one (plus a parameter row) for
    ``req``.  ``vewp`` reads as
    ``vew`` does and its parameter row beside every ``a`` word; the multipliers are
    registered as the first ``a`` word's data arrives, a cycle before its ``b`` word
    reaches the ALU, so ``vewp`` takes the cycles of ``vew``.  Words flow through the
    :class:`VectorAlu` (3 cycles) or ``V`` :class:`Requantizer` s (5 cycles), a cycle
    after they are read (the read data is registered first), and are
    written back to ``acc`` or to the output cache.  The VX unit has priority on the
    accumulator ports, so it never stalls.

    *Slices.*  The unit computes ``V = vx_width`` elements per cycle.  With ``V`` below
    ``lanes`` it walks every output word ``S = lanes / V`` times, once per slice of ``V``
    elements (the slice is the innermost loop but for a reduction's window), reading the
    word again each time; a pipeline stage after the read data's registers selects the
    slice (a cycle more), and the result is written with the slice's element enables
    (``acc``) or as ``V`` bytes (the output cache).  A slice's writes touch only its own
    elements, so an instruction that writes in place reads what it would without slices.
    Cycles: ``S`` times the reads, plus that one stage (:func:`snpu.verif.timing.vx_cycles`).

    Checks: base addresses and strides are multiples of ``lanes`` (``ALIGN``); every word read
    or written, and every parameter row, lies inside its buffer (``RANGE``).  On an error no
    further word is read, the words in flight are written, and ``done`` pulses with
    ``error``.

    Throughput: one accumulator read per cycle (``V`` elements computed).
    """

    def __init__(self, config: CoreConfig):
        self._cfg = config
        P = config.lanes
        V = config.vx_width
        self._alu = VectorAlu(V)
        self._rq = [Requantizer() for _ in range(V)]
        # destinations of the words in the ALU / requantisers, in order
        self._alu_dst = SyncFIFOBuffered(width=16, depth=8)
        self._rq_dst = SyncFIFOBuffered(width=16, depth=8)
        super().__init__({
            "start": In(1),
            "op": In(range(len(CODES))),
            "args": In(args_layout(Unit.VX)),
            "regs": In(registers_layout(Unit.VX)),
            "done": Out(1),
            "error": Out(ErrorCode),
            "acc_rd_en": Out(1), "acc_rd_row": Out(range(config.acc_words)),
            "acc_rd_data": In(data.ArrayLayout(signed(32), P)),
            "acc_wr_en": Out(1), "acc_wr": Out(acc_write_layout(config)),
            "prm_en": Out(1), "prm_row": Out(range(config.param_rows)),
            "prm_data": In(data.ArrayLayout(64, P)),
            "obuf_en": Out(1), "obuf_addr": Out(range(config.obuf_bytes)), "obuf_data": Out(8 * V),
        })

    def elaborate(self, platform):
        m = Module()
        c = self._cfg
        P, V, S = c.lanes, c.vx_width, c.vx_slices
        m.submodules.alu = alu = self._alu
        m.submodules.alu_dst = alu_dst = self._alu_dst
        m.submodules.rq_dst = rq_dst = self._rq_dst
        for k, rq in enumerate(self._rq):
            m.submodules[f"rq{k}"] = rq

        # ---- Latch the operation; unify the three opcodes' operands.
        op = Signal(range(len(CODES)))
        r = Signal(self.regs.shape())
        src, dst, b = Signal(16), Signal(16), Signal(16)
        n_o, n_i, k1, k2 = Signal(12), Signal(8), Signal(8), Signal(8)
        mode, relu = Signal(2), Signal()
        # (the operands of the ALU's multipliers have no reset: they are set before they
        # are used, and a register without one can be the multiplier block's input register)
        ma, mb = Signal(signed(16), reset_less=True), Signal(signed(16), reset_less=True)
        param = Signal(12)
        args = self.args
        # whether each counter of the address generator is at its last value: registers,
        # loaded at start and worked out as the counter steps (no `x == n - 1` after it)
        o_last, i_last, j1_last, j2_last = Signal(), Signal(), Signal(), Signal()
        # the operation's "nothing to do" (a zero count) and "misaligned" (an operand or a
        # stride it uses not a multiple of lanes) tests, registers set at start with the
        # operands: the address generator's first cycle selects on them without comparing
        empty, misaligned = Signal(), Signal()
        g = self.regs

        def unaligned(*values):
            return ((reduce(operator.or_, values) & (P - 1)) != 0) if P > 1 else C(0)

        with m.If(self.start):
            m.d.sync += [op.eq(self.op), r.eq(self.regs), j1_last.eq(1), j2_last.eq(1)]
            with m.Switch(self.op):
                with m.Case(CODES["vred"]):
                    v = args.vred
                    m.d.sync += [src.eq(v.src), dst.eq(v.dst), b.eq(0), n_o.eq(v.n_o), n_i.eq(v.n_i),
                                 o_last.eq(v.n_o == 1), i_last.eq(v.n_i == 1),
                                 k1.eq(v.k1), k2.eq(v.k2), mode.eq(v.mode), relu.eq(0),
                                 j1_last.eq(v.k1 == 1), j2_last.eq(v.k2 == 1),
                                 empty.eq((v.n_o == 0) | (v.n_i == 0) | (v.k1 == 0) | (v.k2 == 0)),
                                 misaligned.eq(unaligned(v.src, v.dst, g.src_stride, g.dst_stride,
                                                         g.k1_stride, g.k2_stride))]
                with m.Case(CODES["vew"]):
                    v = args.vew
                    m.d.sync += [src.eq(v.a), dst.eq(v.dst), b.eq(v.b), n_o.eq(v.n_o), n_i.eq(v.n_i),
                                 o_last.eq(v.n_o == 1), i_last.eq(v.n_i == 1),
                                 k1.eq(1), k2.eq(1), ma.eq(v.ma), mb.eq(v.mb), relu.eq(v.relu),
                                 empty.eq((v.n_o == 0) | (v.n_i == 0)),
                                 misaligned.eq(unaligned(v.a, v.dst, g.src_stride, g.dst_stride,
                                                         v.b, g.b_stride))]
                with m.Case(CODES["vewp"]):
                    v = args.vewp
                    m.d.sync += [src.eq(v.a), dst.eq(v.dst), b.eq(v.b), n_o.eq(v.n_o), n_i.eq(v.n_i),
                                 o_last.eq(v.n_o == 1), i_last.eq(v.n_i == 1),
                                 k1.eq(1), k2.eq(1), param.eq(v.param), relu.eq(v.relu),
                                 empty.eq((v.n_o == 0) | (v.n_i == 0)),
                                 misaligned.eq(unaligned(v.a, v.dst, g.src_stride, g.dst_stride,
                                                         v.b, g.b_stride))]
                with m.Case(CODES["req"]):
                    v = args.req
                    m.d.sync += [src.eq(v.src), dst.eq(v.dst), b.eq(0), n_o.eq(v.n_o), n_i.eq(v.n_i),
                                 o_last.eq(v.n_o == 1), i_last.eq(v.n_i == 1),
                                 k1.eq(1), k2.eq(1), param.eq(v.param), relu.eq(v.relu),
                                 empty.eq((v.n_o == 0) | (v.n_i == 0)),
                                 misaligned.eq(unaligned(v.src, v.dst, g.src_stride, g.dst_stride))]
        is_vred, is_req, is_vewp = op == CODES["vred"], op == CODES["req"], op == CODES["vewp"]
        is_vew = (op == CODES["vew"]) | is_vewp   # the scaled adds: a, then b, per word

        # ---- Address generator.
        gen = Signal()
        o, i, j1, j2 = Signal(12), Signal(8), Signal(8), Signal(8)
        half = Signal()                                   # vew: 0 reading a, 1 reading b
        src_o, b_o, dst_o = Signal(24), Signal(24), Signal(24)
        rd_j2 = Signal(24)                                # src_o + i*P + j2*k2_stride
        rd_cur = Signal(24)                               # rd_j2 + j1*k1_stride
        rd = Signal(24)                                   # the word being read
        rd_word = Signal(24)                              # src_o + i*P (a slice restarts it)
        sl = Signal(range(max(S, 2)))                     # the slice (S > 1)
        wr = Signal(24)                                   # where its result goes
        # the word i of the b operand, of the destination and of the parameters, registers
        # stepped with i (no adder between them and the range checks)
        b_i, wr_i, prm_i = Signal(24), Signal(24), Signal(13)
        m.d.comb += [rd.eq(Mux(is_vew & half, b_i, rd_cur)), wr.eq(wr_i)]
        last_j = j1_last & j2_last
        # (the limits less a word are constants: no adder before the comparisons)
        dst_last = Mux(is_req, c.obuf_bytes - P, c.acc_elems - P)
        bad = Signal(ErrorCode)
        with m.If((rd > c.acc_elems - P) | (wr > dst_last) | (is_req & (prm_i >= c.param_rows))
                  | (is_vewp & (param >= c.param_rows))):
            m.d.comb += bad.eq(ErrorCode.RANGE)
        err = Signal(ErrorCode)
        issue = Signal()
        m.d.comb += issue.eq(gen & (bad == ErrorCode.NONE))
        # The reads go out of registers (`q`): the range checks and the choice of the word
        # to read (a or b, the loop counters) end in the cycle they are made, and the
        # accumulator banks' and parameter memory's address and enable multiplexers (the
        # VX unit's reads win over the MX lanes') start from flip-flops.
        read_ctl = data.StructLayout({"valid": 1, "first": 1, "last": 1, "half": 1, "wr": 24,
                                      "slice": range(max(S, 2))})
        q = Signal(read_ctl)
        q_row = Signal.like(self.acc_rd_row)
        q_prm_en = Signal()
        q_prm_row = Signal.like(self.prm_row)
        m.d.sync += [q.valid.eq(issue), q.first.eq((j1 == 0) & (j2 == 0)), q.last.eq(last_j),
                     q.half.eq(half), q.wr.eq(wr), q.slice.eq(sl), q_row.eq(rd // P),
                     q_prm_en.eq(issue & (is_req | is_vewp & ~half)),
                     q_prm_row.eq(Mux(is_vewp, param, prm_i))]
        m.d.comb += [self.acc_rd_en.eq(q.valid), self.acc_rd_row.eq(q_row),
                     self.prm_en.eq(q_prm_en), self.prm_row.eq(q_prm_row)]

        # (`start` comes after the generator's steps, below: it is not raised while `gen`
        # is, so it is the last multiplexer before the registers it loads, not a select at
        # the head of every chain)
        with m.If(gen & empty):
            m.d.sync += gen.eq(0)  # nothing to do
        with m.Elif(gen & misaligned):
            m.d.sync += [gen.eq(0), err.eq(ErrorCode.ALIGN)]
        with m.Elif(gen):
            # the word's range check ends the operation; the counters and addresses step
            # with `gen` alone (after a fault nothing reads them), so the check does not
            # fan out to their enables
            with m.If(bad != ErrorCode.NONE):
                m.d.sync += [gen.eq(0), err.eq(bad)]
            end_slice = Signal()   # the slice's reads are done (all of them for S = 1)
            step_i = Signal()
            with m.If(is_vew):
                m.d.sync += half.eq(~half)
                m.d.comb += end_slice.eq(half)
            with m.Else():
                m.d.sync += [j1.eq(j1 + 1), rd_cur.eq(rd_cur + r.k1_stride),
                             j1_last.eq(j1 + 2 == k1)]
                with m.If(j1_last):
                    m.d.sync += [j1.eq(0), j1_last.eq(k1 == 1),
                                 j2.eq(j2 + 1), j2_last.eq(j2 + 2 == k2),
                                 rd_j2.eq(rd_j2 + r.k2_stride),
                                 rd_cur.eq(rd_j2 + r.k2_stride)]
                    with m.If(j2_last):
                        m.d.sync += [j2.eq(0), j2_last.eq(k2 == 1)]
                        m.d.comb += end_slice.eq(1)
            if S > 1:
                # the next slice reads the same words again (the window's counters are back
                # at their starts, vew's half at a); after the last, the next word
                with m.If(end_slice):
                    with m.If(sl == S - 1):
                        m.d.sync += sl.eq(0)
                        m.d.comb += step_i.eq(1)
                    with m.Else():
                        m.d.sync += [sl.eq(sl + 1), rd_j2.eq(rd_word), rd_cur.eq(rd_word)]
            else:
                m.d.comb += step_i.eq(end_slice)
            with m.If(step_i):
                next_word = src_o + ((i + 1) << (P - 1).bit_length())
                m.d.sync += [i.eq(i + 1), i_last.eq(i + 2 == n_i),
                             rd_j2.eq(next_word), rd_cur.eq(next_word), rd_word.eq(next_word),
                             b_i.eq(b_i + P), wr_i.eq(wr_i + P), prm_i.eq(prm_i + 1)]
                with m.If(i_last):
                    m.d.sync += [i.eq(0), i_last.eq(n_i == 1),
                                 o.eq(o + 1), o_last.eq(o + 2 == n_o),
                                 src_o.eq(src_o + r.src_stride),
                                 b_o.eq(b_o + r.b_stride), dst_o.eq(dst_o + r.dst_stride),
                                 rd_j2.eq(src_o + r.src_stride), rd_cur.eq(src_o + r.src_stride),
                                 rd_word.eq(src_o + r.src_stride),
                                 b_i.eq(b_o + r.b_stride), wr_i.eq(dst_o + r.dst_stride),
                                 prm_i.eq(param)]
                    with m.If(o_last):
                        m.d.sync += gen.eq(0)
        with m.If(self.start):
            m.d.sync += [gen.eq(1), o.eq(0), i.eq(0), j1.eq(0), j2.eq(0), half.eq(0), sl.eq(0),
                         err.eq(ErrorCode.NONE)]
            start_ew = (self.op == CODES["vew"]) | (self.op == CODES["vewp"])
            first_src = Mux(start_ew, self.args.vew.a,
                            Mux(self.op == CODES["req"], self.args.req.src, self.args.vred.src))
            m.d.sync += [src_o.eq(first_src), rd_j2.eq(first_src), rd_cur.eq(first_src),
                         rd_word.eq(first_src),
                         b_o.eq(self.args.vew.b), b_i.eq(self.args.vew.b),
                         prm_i.eq(self.args.req.param)]
            first_dst = Mux(start_ew, self.args.vew.dst,
                            Mux(self.op == CODES["req"], self.args.req.dst, self.args.vred.dst))
            m.d.sync += [dst_o.eq(first_dst), wr_i.eq(first_dst)]

        # ---- One cycle later the data comes out of the buffers; it is registered, with what
        # goes along, before anything is computed on it (no block RAM output feeds a
        # multiplier: that path limited the core's clock).  A read word's control: `d` as
        # the buffers give its data, `e` beside its registered data.
        d, e = Signal(read_ctl), Signal(read_ctl)
        e_acc = Signal(data.ArrayLayout(signed(32), P), reset_less=True)
        e_prm = Signal(data.ArrayLayout(64, P), reset_less=True)
        m.d.sync += [d.eq(q), e.eq(d), e_acc.eq(self.acc_rd_data), e_prm.eq(self.prm_data)]
        # the ALU's first operand, registered beside e_acc: the word read (vred), or a vew's
        # a word, kept while its b word is read (no multiplexer between it and the multiply)
        alu_a = Signal(data.ArrayLayout(signed(32), P), reset_less=True)
        with m.If(d.valid & ~(is_vew & d.half)):
            m.d.sync += alu_a.eq(self.acc_rd_data)
        # vewp: the multipliers arrive beside each a word (the same row every time)
        with m.If(d.valid & is_vewp & ~d.half):
            m.d.sync += [ma.eq(self.prm_data[0][0:16].as_signed()),
                         mb.eq(self.prm_data[0][16:32].as_signed())]

        # The operands as the ALU and the requantisers take them: the registered words
        # (S = 1), or their slice, selected into registers a stage later (`f`).
        if S > 1:
            f = Signal(read_ctl)
            f_a = Signal(data.ArrayLayout(signed(32), V), reset_less=True)
            f_b = Signal(data.ArrayLayout(signed(32), V), reset_less=True)
            f_prm = Signal(data.ArrayLayout(64, V), reset_less=True)
            m.d.sync += [f.eq(e),
                         f_a.eq(alu_a.as_value().word_select(e.slice, 32 * V)),
                         f_b.eq(e_acc.as_value().word_select(e.slice, 32 * V)),
                         f_prm.eq(e_prm.as_value().word_select(e.slice, 64 * V))]
            x, x_a, x_b, x_prm = f, f_a, f_b, f_prm
            # (vewp's multipliers are the same row's for every word: they may have been
            # reloaded by the next a word by the time a slice reaches the ALU)
        else:
            x, x_a, x_b, x_prm = e, alu_a, e_acc, e_prm
        # where a slice's results go: its word's address plus the slice's offset
        x_dst = Signal(16)
        m.d.comb += x_dst.eq(x.wr + x.slice * V if S > 1 else x.wr)

        # ALU path (vred, vew)
        to_alu = x.valid & (is_vred | (is_vew & x.half))
        ap = alu.i.payload
        m.d.comb += [
            alu.i.valid.eq(to_alu),
            ap.op.eq(Mux(is_vew, AluOp.EW, Mux(mode == REDUCE_OPS["max"], AluOp.MAX, AluOp.SUM))),
            ap.a.eq(x_a),
            ap.b.eq(x_b),
            ap.ma.eq(ma), ap.mb.eq(mb), ap.relu.eq(relu),
            ap.first.eq(Mux(is_vew, 1, x.first)), ap.last.eq(Mux(is_vew, 1, x.last)),
            alu.o.ready.eq(1),
            alu_dst.w_en.eq(to_alu & Mux(is_vew, 1, x.last)), alu_dst.w_data.eq(x_dst),
            alu_dst.r_en.eq(alu.o.valid),
            self.acc_wr_en.eq(alu.o.valid),
            self.acc_wr.row.eq(alu_dst.r_data // P),
            # the V results in every slice's place, enabled in their own
            self.acc_wr.data.eq(Cat(*[alu.o.payload.v.as_value()] * S)),
        ]
        if S > 1:
            w_slice = alu_dst.r_data[(V - 1).bit_length():(P - 1).bit_length()]
            m.d.comb += self.acc_wr.en.eq(Cat(*[Mux(w_slice == t, (1 << V) - 1, 0)
                                                for t in range(S)]))
        else:
            m.d.comb += self.acc_wr.en.eq((1 << P) - 1)

        # requantisation path (req)
        to_rq = x.valid & is_req
        for k, rq in enumerate(self._rq):
            prm = x_prm[k]
            m.d.comb += [rq.i.valid.eq(to_rq), rq.o.ready.eq(1),
                         rq.i.payload.acc.eq(x_b[k]),
                         rq.i.payload.bias.eq(prm[0:32].as_signed()),
                         rq.i.payload.mult.eq(prm[32:48].as_signed()),
                         rq.i.payload.shift.eq(prm[48:54]),
                         rq.i.payload.relu.eq(relu)]
        m.d.comb += [rq_dst.w_en.eq(to_rq), rq_dst.w_data.eq(x_dst), rq_dst.r_en.eq(self._rq[0].o.valid),
                     self.obuf_en.eq(self._rq[0].o.valid), self.obuf_addr.eq(rq_dst.r_data),
                     self.obuf_data.eq(Cat(*[rq.o.payload.y for rq in self._rq]))]

        # ---- Completion: nothing generated, no word in flight.
        pending = Signal(range(64))  # words sent to the ALU / requantisers and not written yet
        m.d.sync += pending.eq(pending + alu_dst.w_en + rq_dst.w_en - self.acc_wr_en - self.obuf_en)
        running = Signal()
        m.d.sync += self.done.eq(0)
        with m.If(self.start):
            m.d.sync += running.eq(1)
        in_flight = Cat(q.valid, d.valid, e.valid, x.valid if S > 1 else C(0, 1))
        with m.Elif(running & ~gen & ~in_flight.any() & (pending == 0)):
            m.d.sync += [running.eq(0), self.done.eq(1), self.error.eq(err)]
        return m
