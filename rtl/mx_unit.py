"""MX unit: runs ``fc`` on the lanes and writes their sums into the accumulators."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from snpu.config import CoreConfig
from snpu.verif.isa import Unit

from .lane import FC_CONFIG
from .matrix_unit import MatrixUnit, buffer_write_ports
from .microcode import args_layout, registers_layout
from .side_source import Fmt
from .status import ErrorCode


class AccWriter(wiring.Component):
    """Writes lane ``g``'s sums, in (vector, row) order, to accumulator bank ``g``: row
    ``acc/P + v*(acc_stride/P) + k`` for the lane's ``k``-th row of vector ``v``.  With
    ``accumulate`` (held while an instruction's sums are written) it reads the old value
    first and writes the sum (wrap-around).  Cycles
    per sum: 3, or 4 with ``accumulate`` (take, decide / read, the old value registered,
    write the sum)."""

    def __init__(self, config: CoreConfig):
        rows = range(config.acc_words)
        super().__init__({
            "start": In(1), "base": In(rows), "vec_step": In(rows), "rows": In(12),
            "accumulate": In(1),
            "sums": In(stream.Signature(data.StructLayout({"sum": signed(32)}))),
            "w": Out(stream.Signature(data.StructLayout({"row": rows, "data": signed(32)}))),
            "rd": Out(stream.Signature(data.StructLayout({"row": rows}))),
            "rd_data": In(signed(32)),
            "written": Out(1),  # a sum was written this cycle
        })

    def elaborate(self, platform):
        m = Module()
        vbase, row = Signal.like(self.base), Signal.like(self.base)
        k = Signal(12)
        value = Signal(signed(32))
        # accumulate: the old value as the bank gives it, registered, and added on the way
        # to the write port (no block RAM output feeds an adder)
        old = Signal(signed(32))
        with m.If(self.start):
            m.d.sync += [vbase.eq(self.base), row.eq(self.base), k.eq(0)]
        advance = Signal()
        with m.If(advance):
            with m.If(k == self.rows - 1):
                m.d.sync += [k.eq(0), vbase.eq(vbase + self.vec_step), row.eq(vbase + self.vec_step)]
            with m.Else():
                m.d.sync += [k.eq(k + 1), row.eq(row + 1)]
        m.d.comb += [self.w.payload.row.eq(row), self.rd.payload.row.eq(row)]
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.sums.ready.eq(1)
                with m.If(self.sums.valid):
                    m.d.sync += value.eq(self.sums.payload.sum)
                    m.next = "DECIDE"
            with m.State("DECIDE"):
                with m.If(self.accumulate):
                    m.d.comb += self.rd.valid.eq(1)
                    with m.If(self.rd.ready):
                        m.next = "ADD"
                with m.Else():
                    m.next = "WRITE"
            with m.State("ADD"):
                m.d.sync += old.eq(self.rd_data)
                m.next = "WRITE"
            with m.State("WRITE"):
                m.d.comb += [self.w.valid.eq(1),
                             self.w.payload.data.eq(Mux(self.accumulate, value + old, value))]
                with m.If(self.w.ready):
                    m.d.comb += [advance.eq(1), self.written.eq(1)]
                    m.next = "IDLE"
        return m


class MatrixController(wiring.Component):
    """Executes ``fc`` (golden model: ``Machine._fc``).

    Two cycles after start it checks the operands the hardware relies on (latched at
    start; the range comparisons made the cycle before): the merge exactly when the
    weights are stride (stride neurons, or direct ones and ``mx.mixed``; else ``FORMAT``:
    the lanes convert no weight index); ``acc`` and ``acc_stride`` multiples of ``lanes``
    and direct indices 8-byte aligned (``ALIGN``); the outputs inside the accumulators and
    unpacked neuron vectors inside the neuron buffer (``RANGE``).  Then the
    :class:`MatrixUnit` runs (its lanes start two cycles after ``start``, from registers) and
    an :class:`AccWriter` per lane stores the sums.  A malformed stride index in the data
    gives ``INDEX``.

    Counters (since reset): ``pairs`` multiplied, ``dense_pairs`` a dense core would have
    multiplied (an instruction's counted the cycle after its ``done``), ``busy_cycles``
    spent in ``fc``.
    """

    def __init__(self, config: CoreConfig):
        self._cfg = config
        P = config.lanes
        self._mu = MatrixUnit(config)
        self._writers = [AccWriter(config) for _ in range(P)]
        rows = range(config.acc_words)
        super().__init__({
            "start": In(1),
            "args": In(args_layout(Unit.MX).members["fc"]),
            "regs": In(registers_layout(Unit.MX)),
            "regs_file": In(registers_layout(Unit.MX)),
            "taking": In(1), "taken": In(args_layout(Unit.MX).members["fc"]),
            "done": Out(1),
            "error": Out(ErrorCode),
            **buffer_write_ports(config, In),
            "w_lane": In(range(P)),
            "acc_w": Out(stream.Signature(data.StructLayout({"row": rows, "data": signed(32)}))).array(P),
            "acc_rd": Out(stream.Signature(data.StructLayout({"row": rows}))).array(P),
            "acc_rd_data": In(signed(32)).array(P),
            "pairs": Out(48), "dense_pairs": Out(48), "busy_cycles": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        c = self._cfg
        P = c.lanes
        m.submodules.mu = mu = self._mu
        for name in ("nbuf_w", "nidx_w", "wbuf_w", "widx_w"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(mu, name))
        m.d.comb += mu.w_lane.eq(self.w_lane)

        # `start` only latches the operands and the registers as presented; the checks and
        # the launch follow two cycles after (`begin`), from those registers: no path runs
        # from the front end's operand multiplexers through a comparison into the lanes
        a, r = Signal.like(self.args), Signal.like(self.regs)
        # `settle`: the range comparisons, from products registered by then; `begin`: the
        # checks combined, the lanes launched
        settle, begin = Signal(), Signal()
        m.d.sync += [settle.eq(self.start), begin.eq(settle)]
        with m.If(self.start):
            m.d.sync += [a.eq(self.args), r.eq(self.regs)]
        # ---- Checks, from the operands latched at start.  The products of the
        # registers are computed ahead and registered, so no multiplier lies on the path
        # from start to the lanes: from the register file as written (``regs_file``; a cfg
        # write reaches it at least two cycles before the next fc starts: UnitFrontEnd writes
        # it at the end of the cfg's first SIGNAL cycle, then IDLE takes the fc and WAIT
        # starts it at the earliest), and for an fc whose nvec operand stands in for mx.nvec
        # (at most 31 vectors) from that operand as the front end takes the fc
        # (``taking``, ``taken``: the operand registered, then a 5-bit by 16-bit product
        # every cycle, the register file final).  The room the operands leave is registered
        # as the fc is taken too, so the range check is one comparison of two registers,
        # not a sum of three operands before one.
        rf = self.regs_file
        file_out_span = Signal(28)   # (mx.nvec - 1) * acc_stride
        file_in_span = Signal(28)    # (mx.nvec - 1) * nstride
        # (in two stages, the factors registered first, so the multiplier has a register on
        # either side: current two cycles after the register file, which is just in time
        # for `settle`, the cycle after the earliest start -- test_core's
        # "...-just-restrided" faults run an fc right after the cfg that changes its stride)
        file_vecs = Signal(signed(13))
        file_acc_stride, file_nstride = Signal(16), Signal(16)
        m.d.sync += [file_vecs.eq(rf.nvec - 1), file_acc_stride.eq(rf.acc_stride),
                     file_nstride.eq(rf.nstride),
                     file_out_span.eq(file_vecs * file_acc_stride),
                     file_in_span.eq(file_vecs * file_nstride)]
        op_vecs = Signal(5)          # nvec - 1, nvec the operand
        op_out_span = Signal(21)     # (nvec - 1) * acc_stride
        op_in_span = Signal(21)
        # what the outputs' and the neurons' first vectors leave of acc and nbuf (negative:
        # even the first one does not fit)
        room_out = Signal(signed(34))
        room_in = Signal(signed(34))
        op_nvec = Signal()           # the fc's nvec operand stands in for mx.nvec
        with m.If(self.taking):
            t = self.taken
            m.d.sync += [op_vecs.eq((t.nvec - 1)[:5]),
                         room_out.eq(c.acc_elems - (t.acc + t.rows)),
                         room_in.eq(c.nbuf_bytes - (t.nbuf + t.n_in)),
                         op_nvec.eq(t.nvec != 0)]
        # (the fc is taken a cycle before start at the earliest: these are current from
        # the cycle after start, `settle`, on)
        m.d.sync += [op_out_span.eq(op_vecs * rf.acc_stride),
                     op_in_span.eq(op_vecs * rf.nstride)]
        # the two range comparisons are made at `settle`, from those registers, into
        # registers: the begin cycle only combines them
        out_span = Mux(op_nvec, op_out_span, file_out_span)
        in_span = Mux(op_nvec, op_in_span, file_in_span)
        out_past, in_past = Signal(), Signal()
        with m.If(settle):
            m.d.sync += [out_past.eq(out_span > room_out), in_past.eq(in_span > room_in)]
        work = (r.nvec != 0) & (a.rows != 0)
        misaligned = ((a.acc % P != 0) | ((r.nvec > 1) & (r.acc_stride % P != 0)) |
                      ((r.nfmt == Fmt.DIRECT) & (((a.nidx | Mux(r.nvec > 1, r.nidx_stride, 0)) & 7) != 0)) |
                      ((r.wfmt == Fmt.DIRECT) & ((a.widx & 7) != 0)))
        out_of_range = out_past | (~(r.npacked & (r.nfmt != Fmt.DENSE)) & in_past)
        # the lanes convert no weight index: stride weights go only into the merge, and only
        # stride weights do (the merge's neuron side is converted by the shared source)
        n_stride, w_stride = r.nfmt == Fmt.STRIDE, r.wfmt == Fmt.STRIDE
        merge = (n_stride & w_stride) | (r.mixed & ((n_stride & (r.wfmt == Fmt.DIRECT)) |
                                                    (w_stride & (r.nfmt == Fmt.DIRECT))))
        check = Signal(ErrorCode)
        with m.If(work & (w_stride ^ merge)):
            m.d.comb += check.eq(ErrorCode.FORMAT)
        with m.Elif(work & misaligned):
            m.d.comb += check.eq(ErrorCode.ALIGN)
        with m.Elif(work & out_of_range):
            m.d.comb += check.eq(ErrorCode.RANGE)

        # ---- Run.
        cfg = Signal(FC_CONFIG)
        m.d.comb += [
            cfg.nfmt.eq(r.nfmt), cfg.npacked.eq(r.npacked), cfg.wfmt.eq(r.wfmt),
            cfg.mixed_to_stride.eq(r.mixed), cfg.n_in.eq(a.n_in), cfg.nvec.eq(r.nvec),
            cfg.rows.eq(a.rows), cfg.nbuf.eq(a.nbuf), cfg.nidx.eq(a.nidx), cfg.wbuf.eq(a.wbuf),
            cfg.widx.eq(a.widx), cfg.nstride.eq(r.nstride), cfg.nidx_stride.eq(r.nidx_stride),
        ]
        # The lanes start the cycle after the checks (`begin`), from registers: the checks'
        # adders and the token handshake that raised `start` stay off the paths into them.
        held = Signal(FC_CONFIG)
        launch = Signal()
        m.d.comb += launch.eq(begin & work & (check == ErrorCode.NONE))
        with m.If(begin):
            m.d.sync += held.eq(cfg)
        lane_start = Signal()
        m.d.sync += lane_start.eq(launch)
        m.d.comb += [mu.cfg.eq(held), mu.start.eq(lane_start)]

        writers_start = Signal()
        m.d.sync += writers_start.eq(begin)
        # the rows to write, nvec * rows, are loaded in the first running cycle, a cycle
        # after the checks, which need none of it (a launched fc writes nothing then, and
        # one that did not launch ends then).  They are multiplied out from the operands
        # latched at start, every cycle into a register (a multiplier block with a register
        # on either side, nothing after it), current from `first` on
        total = Signal(24)
        rows_product = Signal(24)
        # (the factors copied at `settle` into registers of their own, so the multiplier's
        # inputs have one load each and can sit beside it: the latched nvec, loaded all over
        # the unit, into the multiplier was the placed 1-lane core's worst path at af54351,
        # seed 1, 102.7 MHz; the product is current from `first` on, where it is read)
        mul_nvec, mul_rows = Signal.like(r.nvec), Signal.like(a.rows)
        with m.If(settle):
            m.d.sync += [mul_nvec.eq(r.nvec), mul_rows.eq(a.rows)]
        m.d.sync += rows_product.eq(mul_nvec * mul_rows)
        # (the results the lanes owe: the product, held from `first` on)
        m.d.comb += mu.cfg.results.eq(total)
        accumulate = Signal()
        first = Signal()
        m.d.sync += first.eq(begin)
        with m.If(begin):
            m.d.sync += accumulate.eq(a.accumulate)
        # the writers start with the lanes, a cycle after the checks, from registers (the operands
        # stay put while the instruction runs)
        for g, wr in enumerate(self._writers):
            m.submodules[f"writer{g}"] = wr
            lane_rows = Mux(a.rows > g, (a.rows - g + P - 1) // P, 0)
            rows_reg = Signal(12, name=f"rows{g}")
            with m.If(begin):
                m.d.sync += rows_reg.eq(lane_rows)
            m.d.comb += [wr.start.eq(writers_start), wr.base.eq(a.acc // P),
                         wr.vec_step.eq(r.acc_stride // P), wr.rows.eq(rows_reg),
                         wr.accumulate.eq(accumulate), wr.rd_data.eq(self.acc_rd_data[g])]
            wiring.connect(m, mu.results[g], wr.sums)
            wiring.connect(m, wr.w, wiring.flipped(self.acc_w[g]))
            wiring.connect(m, wr.rd, wiring.flipped(self.acc_rd[g]))
        # The sums written are counted a cycle late, from registers (`wrote`: which writers
        # wrote last cycle; a writer's `written` waits for the accumulator port's ready):
        # `remaining` is the sums still to write but those of last cycle, so every sum is
        # written when it equals last cycle's count (no adder on the way to the end test)
        wrote = Signal(P)
        m.d.sync += wrote.eq(Cat(*[wr.written for wr in self._writers]))
        n_wrote = Signal(range(P + 1))
        m.d.comb += n_wrote.eq(sum(wrote[g] for g in range(P)))
        remaining = Signal(24)

        running = Signal()
        # the dense count, nvec * rows * n_in, is multiplied out while the instruction runs
        # and added when it ends (a launched fc ends tens of cycles after its start, long
        # after `dense` is ready; one that did not launch adds nothing)
        n_in = Signal.like(a.n_in)
        launched = Signal()
        # (split at bit 17 of `total`: each partial product is one 18 x 18 multiplier block
        # registered alone, and the adder that joins them has a stage of its own)
        dense_lo, dense_hi = Signal(33), Signal(23)
        dense = Signal(40)
        m.d.sync += [dense_lo.eq(total[:17] * n_in), dense_hi.eq(total[17:] * n_in),
                     dense.eq(dense_lo + (dense_hi << 17))]
        m.d.sync += self.done.eq(0)
        with m.If(begin):
            m.d.sync += [running.eq(1), self.error.eq(check), n_in.eq(a.n_in),
                         launched.eq(launch)]
        with m.Elif(running):
            m.d.sync += self.busy_cycles.eq(self.busy_cycles + 1)
            with m.If(first):
                # (the writers write nothing before the lanes start, the cycle after)
                m.d.sync += [total.eq(rows_product), remaining.eq(rows_product)]
            with m.Else():
                m.d.sync += remaining.eq(remaining - n_wrote)
            all_written = (remaining[len(n_wrote):] == 0) & (remaining[:len(n_wrote)] == n_wrote)
            with m.If(Mux(first, ~launched, all_written) & ~mu.busy):
                m.d.sync += [running.eq(0), self.done.eq(1)]
            # (the lanes' error is sticky: taken as it comes, not at the end test, so the
            # written count's comparison reaches no error register; `error` is read only
            # with `done`.  It is this fc's: an INDEX fault halts the core, whose next
            # start resets the unit, before another fc can run)
            with m.If(mu.error):
                m.d.sync += self.error.eq(ErrorCode.INDEX)
        # the counters add the instruction's pairs the cycle after it ends, from `done` (a
        # register): the end test (the written count's comparison) reaches no counter's
        # enable (it was the placed core's worst path on two seeds at 81bb2b5, 86.5 MHz);
        # the lanes' count and `dense` hold until the next instruction starts, cycles later
        with m.If(self.done):
            m.d.sync += [self.pairs.eq(self.pairs + mu.pairs),
                         self.dense_pairs.eq(self.dense_pairs + Mux(launched, dense, 0))]
        return m
