"""LD unit: 3-D DMA loads from external memory into the on-chip buffers."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from snpu.config import CoreConfig
from snpu.verif.isa import BUFFERS

from .axi_split import is_local
from .compress import ChunkExpander, stream_misaligned
from .dma_reader import DmaReader
from .matrix_unit import buffer_write_ports
from .microcode import args_layout, op_codes, registers_layout
from .realign import Realigner
from .skid import SkidBuffer
from .sparse_unit import SparseProcessingUnit
from .status import ErrorCode
from snpu.verif.isa import Unit


def acc_write_layout(config: CoreConfig) -> data.StructLayout:
    """A write into the accumulator banks: one row of ``lanes`` int32 elements, masked."""
    return data.StructLayout({
        "row": range(config.acc_words),
        "data": data.ArrayLayout(signed(32), config.lanes),
        "en": config.lanes,
    })


def param_records_per_write(config: CoreConfig) -> int:
    """Channel records (8 bytes each) one write into the parameter memory takes: a bus
    word's, at most one per bank (``lanes`` banks)."""
    return min(config.axi_bytes // 8, config.lanes)


def param_write_signature(config: CoreConfig) -> wiring.Signature:
    """A write of consecutive channel records from channel ``addr`` on, with byte
    enables."""
    n = param_records_per_write(config)
    return wiring.Signature({
        "addr": Out(range(config.param_rows * config.lanes)),
        "data": Out(64 * n),
        "en": Out(8 * n),
    })


class LoadUnit(wiring.Component):
    """Executes ``ld``: for ``p < n3, r < rows`` copy ``cols`` bytes from external address
    ``ext + p*ext_stride3 + r*ext_stride`` to buffer address ``dst + p*dst_stride3 +
    r*dst_stride`` (golden model: ``Machine._ld``); into the lane banks (wbuf / widx) from
    ``ext + (p*rows + r)*cols`` to ``dst + r*dst_stride`` of lane ``lane + p``.

    Rows are requested from the :class:`DmaReader` ahead of their data; a
    :class:`Realigner` puts each row's bytes at their destination byte lanes; the words are
    written into the selected buffer: ``nbuf`` (and, with ``nidx_mode``, the neuron index bits
    from the :class:`SparseProcessingUnit`), ``nidx``, a lane's ``wbuf`` / ``widx``, ``acc``
    (int8 sign-extended to int32 elements, one row of ``lanes`` elements per write, arbitrated)
    or ``param``.

    Checks before a row is requested: the destination range lies inside the buffer and the
    lane exists (``RANGE``), group-pruned rows are group aligned (``ALIGN``); an AXI error
    on the reads gives ``LOAD_BUS`` when the instruction ends.  On an error no further row is
    requested, the rows in flight complete, and ``done`` pulses with ``error`` set.

    ``ldc`` (golden model: ``Machine._ldc``): the rows' destinations go through the same
    checks (``dst``, ``ext`` and ``ld.dst_stride`` 8-aligned, else ``ALIGN`` before anything
    moves); the stream's header word is read first, then exactly the bytes it counts (a
    count not a multiple of 8 or beyond what the rows can take is ``INDEX``); a
    :class:`~.compress.ChunkExpander` turns them into dense words written like a loaded
    row's (into nbuf with the sparse processing unit at threshold 0: the neuron index
    comes along).  A stream shorter than its chunks need is ``INDEX``, never a hang.

    The bus's beats pass a :class:`~.skid.SkidBuffer` before the realigner and the expander
    see them, and the realigned (or expanded) words another before they are written: no
    combinational path runs from the bus into the realigner or the expander, nor from the
    buffers' write side (the accumulator arbiter's ``ready``, the row FIFO) back into the
    expander, the realigner and the AXI read channel.

    The read path is as wide as the AXI bus (``axi_data_bits``: 64, 128 or 256): beats,
    realigned words and the writes into ``nbuf`` / ``nidx`` / ``wbuf`` / ``widx`` carry
    ``B = axi_data_bits / 8`` bytes.  A word for ``acc`` is written in sub-writes of at
    most ``lanes`` elements, one for ``param`` in sub-writes of at most ``lanes`` channel
    records (8 bytes each), a cycle each; an ``ldc`` stream's beats are cut into 8-byte
    words for the expander, and its dense words written into their part of a bus-wide
    word.

    Throughput: one beat per cycle (``acc``: ``B / lanes`` cycles, ``param``:
    ``B / 8 / lanes``; ``ldc``: 8 bytes per cycle, :func:`snpu.verif.timing.ldc_cycles`).
    ``done`` pulses the cycle after the last write.
    """

    def __init__(self, config: CoreConfig):
        self._cfg = config
        c = config
        B = c.axi_bytes
        # (the reader decodes each burst's destination, local memory or the bus, into a
        # register: the core's read split and arbitration start at it)
        self._reader = DmaReader(data_bits=c.axi_data_bits, decode=is_local)
        self._realign = Realigner(B)
        self._spu = SparseProcessingUnit(B, addr_bits=(c.nbuf_bytes // B - 1).bit_length())
        # per requested row: its destination word address and (wbuf / widx) its lane; deep
        # enough to cover a row's round trip (request, data, skid buffer, write) when rows
        # are one beat long
        self._rows = SyncFIFOBuffered(width=20 + max(1, (c.lanes - 1).bit_length()), depth=6)
        self._expander = ChunkExpander()
        super().__init__({
            "start": In(1),
            "op": In(range(len(op_codes(Unit.LD)))),
            "args": In(args_layout(Unit.LD)),
            "regs": In(registers_layout(Unit.LD)),
            "done": Out(1),
            "error": Out(ErrorCode),
            # AXI read channels (arid chosen by the core's arbiter)
            "arvalid": Out(1), "arready": In(1), "araddr": Out(32), "arlen": Out(8),
            "arsize": Out(3), "arlocal": Out(1),
            "rvalid": In(1), "rready": Out(1), "rdata": In(c.axi_data_bits), "rresp": In(2),
            "rlast": In(1),
            # buffers
            **buffer_write_ports(c, Out),
            "w_lane": Out(range(c.lanes)),
            "acc_w": Out(stream.Signature(acc_write_layout(c))),
            "param_w": Out(param_write_signature(c)),
            "bytes_read": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        c = self._cfg
        P = c.lanes
        B = c.axi_bytes               # bytes of a beat and of a buffer write
        lgB = (B - 1).bit_length()
        k64 = lgB - 3                 # bits of a 64-bit part's index inside a word
        m.submodules.reader = reader = self._reader
        m.submodules.realign = realign = self._realign
        m.submodules.spu = spu = self._spu
        m.submodules.rows_fifo = rows_fifo = self._rows
        m.submodules.expander = expander = self._expander
        # cleared by `start`: an ldc that ends early (a bad stream) leaves no word behind
        m.submodules.words = words = ResetInserter(self.start)(
            SkidBuffer(realign.o.payload.shape()))
        for name in ("arvalid", "araddr", "arlen", "arsize", "rready"):
            m.d.comb += getattr(self, name).eq(getattr(reader, name))
        m.d.comb += self.arlocal.eq(reader.ardecode)
        for name in ("arready", "rvalid", "rdata", "rresp", "rlast"):
            m.d.comb += getattr(reader, name).eq(getattr(self, name))
        m.d.comb += self.bytes_read.eq(reader.bytes_read)

        # ---- Latch the operation: ld's operands, or ldc's as one plane.
        OP = op_codes(Unit.LD)
        new_ldc = self.op == OP["ldc"]
        new = Signal(self.args.ld.shape())
        with m.If(new_ldc):
            s = self.args.ldc
            m.d.comb += [new.buf.eq(s.buf), new.dst.eq(s.dst), new.ext.eq(s.ext), new.n3.eq(1),
                         new.rows.eq(s.rows), new.cols.eq(s.cols)]
        with m.Else():
            m.d.comb += new.eq(self.args.ld)
        a = Signal(self.args.ld.shape())
        r = Signal(self.regs.shape())
        compressed = Signal()
        # `start` only latches the operation; its checks, the first row's and the counters'
        # loads are worked out from those registers the cycle after (`arm`), so no operand
        # reaches a sum or a comparison in the cycle it arrives
        arm = Signal()
        m.d.sync += arm.eq(self.start)
        with m.If(self.start):
            m.d.sync += [a.eq(new), r.eq(self.regs), compressed.eq(new_ldc)]
        misaligned = compressed & stream_misaligned(a.dst, a.ext, a.rows, r.dst_stride)
        empty = (a.n3 == 0) | (a.rows == 0) | (a.cols == 0)
        buf = a.buf
        sizes = {"nbuf": c.nbuf_bytes, "nidx": c.nidx_bytes, "wbuf": c.wbuf_bytes,
                 "widx": c.widx_bytes, "acc": c.acc_elems, "param": c.param_bytes}

        def is_banked(buf):  # wbuf / widx: plane p goes to lane `lane + p`
            return (buf == BUFFERS["wbuf"]) | (buf == BUFFERS["widx"])

        banked = is_banked(buf)
        row_lane = Signal(13)     # lane + p for the lane banks, else lane

        # ---- Address side: one row request per cycle while rows remain.  The row and plane
        # counters count down to zero (the last row of a plane, the last plane: zero tests
        # of registers).
        issuing = Signal()
        r_left, p_left, rows_m1 = Signal(12), Signal(12), Signal(12)
        ext_plane, ext_row = Signal(32), Signal(32)
        dst_plane, dst_row = Signal(21), Signal(21)
        outstanding = Signal(range(1 << 14))  # rows requested and not yet written
        err = Signal(ErrorCode)
        row_bad = Signal(ErrorCode)
        row_good = Signal(init=1)  # row_bad == NONE, kept beside it (the issue decides on it)
        # dst_row + cols, kept beside dst_row (and dst_plane) so the range check is one
        # comparison, not an adder and a comparison
        row_end, plane_end = Signal(22), Signal(22)
        # the step to the next plane's first row (none for the lane banks), and whether a
        # row's length breaks the group alignment: registers (set at `arm`, and the cycle
        # after), so the later rows' checks neither decode the buffer nor mask the length
        to_plane_r = Signal.like(r.dst_stride3, name="to_plane")
        cols_bad = Signal()
        can_issue = Signal()
        # ld: a read request per row; ldc: the rows only say where the dense words go
        # the cycle after `arm`, the first row's checks go into `row_bad` (no row issues)
        first_check = Signal()
        m.d.sync += first_check.eq(arm)
        m.d.comb += can_issue.eq(issuing & ~first_check & (reader.req.ready | compressed) &
                                 rows_fifo.w_rdy & row_good)
        row_req = Signal()
        m.d.comb += row_req.eq(can_issue & ~compressed)
        m.d.comb += [
            rows_fifo.w_en.eq(can_issue),
            rows_fifo.w_data.eq(Cat((dst_row >> 3)[:20], row_lane)),
        ]
        word_done = Signal()  # a row's last word was written this cycle
        plane_wrap = Signal()     # the row issued now is its plane's last
        m.d.comb += plane_wrap.eq(r_left == 0)
        # (`start` clears `issuing`, `err` and `outstanding` below, after everything else:
        # it selects none of the row generator's sums.  The unit is idle when it starts.)
        with m.If(arm):
            m.d.sync += [issuing.eq(~empty & ~misaligned),
                         r_left.eq(a.rows - 1), p_left.eq(a.n3 - 1), rows_m1.eq(a.rows - 1),
                         row_lane.eq(a.lane),
                         ext_plane.eq(a.ext), ext_row.eq(a.ext),
                         dst_plane.eq(a.dst), dst_row.eq(a.dst),
                         plane_end.eq(a.dst + a.cols), row_end.eq(a.dst + a.cols),
                         err.eq(Mux(misaligned & ~empty, ErrorCode.ALIGN, ErrorCode.NONE))]
        with m.Else():
            with m.If(issuing & ~row_good):
                m.d.sync += [issuing.eq(0), err.eq(row_bad)]
            with m.If(can_issue):
                # the lane banks take consecutive bytes, every plane at dst of its lane
                m.d.sync += [r_left.eq(r_left - 1),
                             ext_row.eq(ext_row + Mux(banked, a.cols, r.ext_stride)),
                             dst_row.eq(dst_row + r.dst_stride),
                             row_end.eq(row_end + r.dst_stride)]
                with m.If(plane_wrap):
                    m.d.sync += [r_left.eq(rows_m1), p_left.eq(p_left - 1),
                                 row_lane.eq(row_lane + banked),
                                 ext_plane.eq(ext_plane + r.ext_stride3),
                                 dst_plane.eq(dst_plane + to_plane_r),
                                 dst_row.eq(dst_plane + to_plane_r),
                                 plane_end.eq(plane_end + to_plane_r),
                                 row_end.eq(plane_end + to_plane_r)]
                    with m.If(~banked):
                        m.d.sync += ext_row.eq(ext_plane + r.ext_stride3)
                    with m.If(p_left == 0):
                        m.d.sync += issuing.eq(0)
            m.d.sync += outstanding.eq(outstanding + can_issue - word_done)
        with m.If(self.start):
            m.d.sync += [issuing.eq(0), err.eq(ErrorCode.NONE), outstanding.eq(0)]

        # The row checks: the destination inside the buffer and the lane existing (RANGE), a
        # group-pruned row group aligned (ALIGN).  `row_bad` is a register holding the checks
        # of the row to issue: each row they can move to next (a new instruction's first, the
        # next row, the next plane's first) is checked from registers in parallel, and the
        # issue decision only selects one (no adder or comparison after it).
        def buffer_rules(buf, regs):
            """The buffer's size, and the bits a row's start and length must have clear
            (its group alignment less one: 0 for none)."""
            limit = Signal(range(max(sizes.values()) + 1))
            with m.Switch(buf):
                for name, code in BUFFERS.items():
                    with m.Case(code):
                        m.d.comb += limit.eq(sizes[name])
            group_mask = Mux((buf == BUFFERS["nbuf"]) & regs.nidx_mode,
                             (1 << regs.group_log2) - 1, 0)
            return limit, group_mask

        def check(lane_ok, past_end, first, cols_bad, group_mask):
            return Mux(~lane_ok | past_end, ErrorCode.RANGE,
                       Mux(cols_bad | ((first & group_mask) != 0), ErrorCode.ALIGN,
                           ErrorCode.NONE))

        # The buffer's rules are registers set at `arm`, and so is the room a row's end has
        # below the buffer's size for the step to the next row and to the next plane
        # (`end + step > limit` is `step > limit or end > limit - step`), so the checks
        # compare registers with no adder before them.  The instruction's first row is
        # checked the cycle after `arm` (`first_check`), from its end (`row_end`, set at
        # `arm`) and those registers.  (Only a row start's bits under the group mask matter
        # for its alignment: a sum of the mask's width.)
        limit, group_mask = buffer_rules(a.buf, r)
        to_plane = Mux(banked, 0, r.dst_stride3)
        buf_mask = Signal.like(group_mask, name="buf_group_mask")
        buf_limit = Signal.like(limit, name="buf_limit")
        row_never, plane_never = Signal(), Signal()     # the step alone passes the limit
        row_room, plane_room = Signal(22), Signal(22)   # limit - step
        with m.If(arm):
            m.d.sync += [buf_mask.eq(group_mask), buf_limit.eq(limit), to_plane_r.eq(to_plane),
                         row_never.eq(r.dst_stride > limit),
                         row_room.eq(limit - r.dst_stride),
                         plane_never.eq(to_plane > limit),
                         plane_room.eq(limit - to_plane)]
        mb = len(group_mask)
        cols_breaks = (a.cols[:mb] & buf_mask) != 0
        m.d.sync += cols_bad.eq(cols_breaks)   # (settled at first_check)
        bad_first = check(Mux(banked, a.lane < P, a.lane == 0),
                          row_end > buf_limit, a.dst[:mb], cols_breaks, buf_mask)
        # (row_lane is lane + p for the lane banks)
        bad_row = check(Mux(banked, row_lane < P, a.lane == 0),
                        row_never | (row_end > row_room),
                        (dst_row[:mb] + r.dst_stride[:mb])[:mb], cols_bad, buf_mask)
        bad_plane = check(Mux(banked, row_lane < P - 1, a.lane == 0),
                          plane_never | (plane_end > plane_room),
                          (dst_plane[:mb] + to_plane_r[:mb])[:mb], cols_bad, buf_mask)
        with m.If(arm):
            m.d.sync += [row_bad.eq(ErrorCode.NONE), row_good.eq(1)]
        with m.Elif(first_check):
            m.d.sync += [row_bad.eq(bad_first), row_good.eq(bad_first == ErrorCode.NONE)]
        with m.Elif(can_issue):
            m.d.sync += [row_bad.eq(Mux(plane_wrap, bad_plane, bad_row)),
                         row_good.eq(Mux(plane_wrap, bad_plane == ErrorCode.NONE,
                                         bad_row == ErrorCode.NONE))]

        # ---- ldc: the stream's header, then exactly the words it counts, to the expander.
        # words: the header's word and the stream's (requested, arrived); `words_bound`: the
        # most the rows can take (checked against the header)
        fetch_header, fetch_body, fetch_wait = Signal(), Signal(), Signal()
        # from the latched operands, in three register stages (a row's words, the multiply,
        # a copy: the header it is checked against arrives many cycles later)
        # (no resets: the factors and the product are the multiplier block's own input and
        # output registers, verif/tb/dsp_registers.py)
        words_bound = Signal(26, reset_less=True)
        row_words = Signal(14, reset_less=True)
        rows_factor = Signal(12, reset_less=True)
        m.d.sync += [row_words.eq(((a.cols + 63) >> 6) + ((a.cols + 7) >> 3)),
                     rows_factor.eq(a.rows), words_bound.eq(rows_factor * row_words)]
        # ... and a copy in the fabric, which the check reads: the product's register is
        # the multiplier block's, a long wire from the logic (104.1 MHz from it at ad45f1b)
        bound = Signal(26, reset_less=True)
        m.d.sync += bound.eq(words_bound)
        body_addr = Signal(32)
        body_left = Signal(26)    # stream bytes not yet requested, in words
        words_expected = Signal(27)
        words_arrived = Signal(27)
        with m.If(self.start):
            m.d.sync += [fetch_header.eq(0), fetch_body.eq(0), fetch_wait.eq(0),
                         words_expected.eq(0), words_arrived.eq(0)]
        with m.If(arm):     # (not an Elif of `start`: start selects no sum)
            m.d.sync += [fetch_header.eq(compressed & ~empty & ~misaligned),
                         body_addr.eq(a.ext + 8)]
        # words of the next body request (at most 512: 4 KiB): a register, set with
        # `body_left`, so the request's length comes from registers
        piece = Signal(10)

        def first_piece(left):
            return Mux(left > 512, 512, left)
        with m.If(fetch_header):
            m.d.comb += [reader.req.valid.eq(1), reader.req.payload.addr.eq(a.ext),
                         reader.req.payload.length.eq(8)]
        with m.Elif(fetch_body):
            m.d.comb += [reader.req.valid.eq(1), reader.req.payload.addr.eq(body_addr),
                         reader.req.payload.length.eq(piece << 3)]
        with m.Else():
            m.d.comb += [reader.req.valid.eq(row_req), reader.req.payload.addr.eq(ext_row),
                         reader.req.payload.length.eq(a.cols),
                         reader.req.payload.tag.eq(dst_row[:lgB])]
        # (the header's and the body's requests are always valid: they go on the reader's
        # ready alone, not on the row requests' `valid`, which waits for the row checks)
        header_fire = fetch_header & reader.req.ready
        body_fire = fetch_body & reader.req.ready
        with m.If(header_fire):
            m.d.sync += [fetch_header.eq(0), fetch_wait.eq(1), words_expected.eq(1)]
        with m.If(body_fire):
            left_after = body_left - piece
            m.d.sync += [body_addr.eq(body_addr + (piece << 3)), body_left.eq(left_after),
                         piece.eq(first_piece(left_after)),
                         words_expected.eq(words_expected + piece)]
            with m.If(body_left == piece):
                m.d.sync += fetch_body.eq(0)
        index_err = Signal()
        # the bus's beats are registered before anything is computed on them (the
        # realigner's shifts, the expander's mask count): no bus input feeds those
        m.submodules.beats = beats = ResetInserter(self.start)(
            SkidBuffer(reader.beats.payload.shape()))
        wiring.connect(m, reader.beats, beats.i)
        beat = beats.o
        # ldc on a bus wider than 64 bits: which 8-byte part of the beat goes next
        part = Signal(max(1, k64))
        part_going = Signal()     # the current beat's first part has gone
        part_now = Signal(max(1, k64))
        part_last = Signal()
        if k64:
            m.d.comb += [part_now.eq(Mux(part_going, part, beat.payload.offset[3:])),
                         part_last.eq(part_now == (beat.payload.offset + beat.payload.count
                                                   - 1)[3:lgB])]
        else:
            m.d.comb += [part_now.eq(0), part_last.eq(1)]
        header_beat = compressed & fetch_wait
        # (after a bad row the expander still runs: its words are dropped, see `discard`)
        feed = compressed & ~fetch_wait & ~expander.finished
        m.d.comb += [realign.i.valid.eq(beat.valid & ~compressed),
                     realign.i.payload.eq(beat.payload)]
        with m.If(~compressed):
            m.d.comb += beat.ready.eq(realign.i.ready)
        with m.Elif(feed):
            # the beat's 8-byte words, one per cycle (a stream's words are 8-aligned)
            m.d.comb += [expander.i.valid.eq(beat.valid),
                         expander.i.payload.eq(beat.payload.data.word_select(part_now, 64)),
                         beat.ready.eq(expander.i.ready & part_last)]
            with m.If(expander.i.valid & expander.i.ready):
                m.d.sync += [part_going.eq(~part_last), part.eq(part_now + 1)]
        with m.Else():  # the header, or words nobody needs any more (after an error)
            m.d.comb += beat.ready.eq(1)
        with m.If(self.start):
            m.d.sync += part_going.eq(0)
        with m.If(compressed & beat.valid & beat.ready):
            m.d.sync += words_arrived.eq(words_arrived + (beat.payload.count >> 3))
        # the header: stream bytes after it (its 8 bytes at the beat's offset)
        length = (beat.payload.data.word_select(beat.payload.offset[3:], 64) if k64
                  else beat.payload.data)
        # (registered as it arrives, checked the cycle after: no comparison follows the
        # bus's beat in its cycle)
        header = Signal(64)
        header_check = Signal()
        with m.If(header_beat & beat.valid):
            m.d.sync += [fetch_wait.eq(0), header.eq(length), header_check.eq(1)]
        with m.If(header_check):
            m.d.sync += header_check.eq(0)
            # (the words above the bound's width by an OR, the comparison on the bound's
            # 26 bits: no 61-bit carry chain before the body's registers)
            too_long = (header[3 + len(bound):] != 0) | (header[3:3 + len(bound)] > bound)
            with m.If((header[:3] != 0) | too_long):
                m.d.sync += index_err.eq(1)
            with m.Else():
                m.d.sync += [body_left.eq(header[3:29]), piece.eq(first_piece(header[3:29])),
                             fetch_body.eq(header[3:] != 0)]
        with m.If(self.start):
            m.d.sync += header_check.eq(0)
        fetch_quiet = ~fetch_header & ~fetch_body & ~fetch_wait & ~header_check & \
            (words_arrived == words_expected)
        with m.If(compressed & ~arm & fetch_quiet & expander.starving):
            m.d.sync += index_err.eq(1)  # the stream ended before its chunks did
        with m.If(self.start):
            m.d.sync += index_err.eq(0)
        # the expander starts a cycle after the instruction, from registers (its first word
        # is the stream's header's successor, many cycles later)
        expand = Signal()
        m.d.sync += expand.eq(arm & compressed & ~empty & ~misaligned)
        # (an ldc ended by a bad stream may leave it busy: the instruction's start clears it,
        # two cycles before it starts again)
        m.d.comb += [expander.start.eq(expand), expander.clear.eq(self.start),
                     expander.rows.eq(a.rows), expander.cols.eq(a.cols)]

        # ---- Write side: realigned (ld) or expanded (ldc) words, through `words`, into the
        # buffer.
        expanded = Signal(words.i.payload.shape())  # an expanded 8-byte word, in part 0
        m.d.comb += [expanded.data.eq(expander.o.payload.data),
                     expanded.be.eq(expander.o.payload.be),
                     expanded.last.eq(expander.o.payload.last)]
        m.d.comb += [words.i.valid.eq(Mux(compressed, expander.o.valid, realign.o.valid)),
                     words.i.payload.eq(Mux(compressed, expanded, realign.o.payload)),
                     realign.o.ready.eq(words.i.ready & ~compressed),
                     expander.o.ready.eq(words.i.ready & compressed)]
        # Addresses in 8-byte words (`addr64`): an ld row writes whole bus-wide words from
        # its first one on, an ldc row one 8-byte part of a word at a time.
        word = Signal(20)         # 8-byte word address of the next word of the current row
        in_row = Signal()
        w = words.o.payload
        source_valid = words.o.valid
        # ldc after a bad row: the rows before it are written, the rest expanded and dropped
        discard = compressed & (err != ErrorCode.NONE) & ~rows_fifo.r_rdy & ~in_row
        row_dst = rows_fifo.r_data[:20]
        addr64 = Signal(20)
        m.d.comb += addr64.eq(Mux(in_row, word,
                                  Mux(compressed, row_dst, row_dst & ~((1 << k64) - 1))))
        addr = Signal(20)         # the bus-wide word's address
        m.d.comb += addr.eq(addr64 >> k64)
        data_w = Signal(8 * B)    # the word, its bytes at their lanes
        be_w = Signal(B)
        if k64:
            sub64 = addr64[:k64]
            m.d.comb += [data_w.eq(Mux(compressed, w.data[:64].replicate(B // 8), w.data)),
                         be_w.eq(Mux(compressed, w.be[:8] << (sub64 << 3), w.be))]
        else:
            m.d.comb += [data_w.eq(w.data), be_w.eq(w.be)]
        accept = Signal()
        # (a skid buffer: its ready is a register, so the accumulators' arbitration, which
        # gives the VX unit's writes the port, reaches no register of the words' path)
        m.submodules.acc_out = acc_out = SkidBuffer(acc_write_layout(c))
        wiring.connect(m, acc_out.o, wiring.flipped(self.acc_w))
        # sub-writes of a word: acc takes at most `lanes` elements per write, param at most
        # `lanes` channel records (one per bank)
        # which buffer the words go to, one-hot in registers (set at `arm`): the buffer's
        # number reaches no comparison on the path from a word to its write
        to_buf = {name: Signal(name=f"to_{name}") for name in BUFFERS}
        with m.If(arm):
            m.d.sync += [to_buf[name].eq(buf == code) for name, code in BUFFERS.items()]
        acc_busy = to_buf["acc"]
        prm_busy = to_buf["param"]
        per_prm = param_records_per_write(c)
        nsub_acc, nsub_prm = max(1, B // P), B // 8 // per_prm
        sub = Signal(range(max(nsub_acc, nsub_prm) + 1))
        # sub == the word's last sub-write, a register kept beside `sub` (sub cleared at
        # `arm`, the flag set the cycle after, from the buffer's registers, before any row
        # is requested; then as sub steps): the words' ready compares nothing
        sub_last = Signal(init=1)
        sub_target = Mux(acc_busy, nsub_acc - 1, Mux(prm_busy, nsub_prm - 1, 0))
        sub_step = Signal.like(sub)
        m.d.comb += sub_step.eq(Mux(sub_last, 0, sub + 1))
        with m.If(arm):
            m.d.sync += sub.eq(0)
        with m.If(first_check):
            m.d.sync += sub_last.eq(sub_target == 0)
        m.d.comb += accept.eq(source_valid & rows_fifo.r_rdy &
                              Mux(acc_busy, acc_out.i.ready & sub_last, sub_last))
        m.d.comb += words.o.ready.eq(accept | discard)
        with m.If(accept):
            m.d.sync += [in_row.eq(~w.last), word.eq(addr64 + Mux(compressed, 1, B // 8))]
            with m.If(w.last):
                m.d.comb += [rows_fifo.r_en.eq(1), word_done.eq(1)]

        valid_word = source_valid & rows_fifo.r_rdy
        # nbuf (+ the sparse processing unit), nidx, wbuf, widx, param
        for name, port in (("nbuf", self.nbuf_w), ("wbuf", self.wbuf_w), ("widx", self.widx_w)):
            m.d.comb += [port.addr.eq(addr), port.data.eq(data_w),
                         port.en.eq(Mux(accept & to_buf[name], be_w, 0))]
        m.d.comb += self.w_lane.eq(rows_fifo.r_data[20:])  # the lane of the row being written
        m.d.comb += [
            spu.i.valid.eq(accept & to_buf["nbuf"] & (r.nidx_mode | compressed)),
            spu.i.payload.data.eq(data_w), spu.i.payload.be.eq(be_w), spu.i.payload.addr.eq(addr),
            # ldc: the index of non-zero values (threshold 0, no groups)
            spu.thresh.eq(Mux(compressed, 0, r.thresh)),
            spu.group_log2.eq(Mux(compressed, 0, r.group_log2)),
            spu.t3.eq(r.group_t3), spu.t4.eq(r.group_t4),
            spu.o.ready.eq(1),
        ]
        nidx_raw = accept & to_buf["nidx"]
        spu_word = spu.o.payload.addr
        with m.If(spu.o.valid):
            # a neuron-buffer word's B index bits, in their part of an index word (which
            # holds the bits of 8 neuron-buffer words)
            shift = spu_word[:3] * B
            m.d.comb += [self.nidx_w.addr.eq(spu_word >> 3),
                         self.nidx_w.data.eq(spu.o.payload.bits << shift),
                         self.nidx_w.en.eq(spu.o.payload.be << shift)]
        with m.Elif(nidx_raw):
            m.d.comb += [self.nidx_w.addr.eq(addr), self.nidx_w.data.eq(data_w),
                         self.nidx_w.en.eq(Cat(*[be_w[k].replicate(8) for k in range(B)]))]
        prm_sub = sub[:(nsub_prm - 1).bit_length()] if nsub_prm > 1 else 0
        m.d.comb += [self.param_w.addr.eq((addr << k64) + prm_sub * per_prm),
                     self.param_w.data.eq(data_w.word_select(prm_sub, 64 * per_prm)),
                     self.param_w.en.eq(Mux(valid_word & prm_busy,
                                            be_w.word_select(prm_sub, 8 * per_prm), 0))]
        with m.If(valid_word & prm_busy):
            m.d.sync += [sub.eq(sub_step), sub_last.eq(sub_step == sub_target)]

        # acc: the word's B bytes are B consecutive elements; a sub-write covers `per` of
        # them, all in one accumulator row (P and B are powers of two), bank = element % P.
        # The sub-write is registered (`acc_out`) before it leaves: the selection of each
        # bank's byte and enable is then not in the same cycle as the banks' arbitration.
        per = min(B, P)
        elem0 = Signal(26)
        m.d.comb += elem0.eq((addr << lgB) + sub * per)
        base_bank = Signal(range(P))
        m.d.comb += base_bank.eq(elem0 % P)
        for g in range(P):
            k = Signal(signed(8), name=f"acc_k{g}")
            m.d.comb += k.eq(g - base_bank)
            j = Signal(lgB, name=f"acc_j{g}")
            m.d.comb += j.eq(sub * per + k[:lgB])
            m.d.comb += [acc_out.i.payload.data[g].eq(data_w.word_select(j, 8).as_signed()),
                         acc_out.i.payload.en[g].eq((k >= 0) & (k < per) & be_w.bit_select(j, 1))]
        m.d.comb += [acc_out.i.payload.row.eq(elem0 // P),
                     acc_out.i.valid.eq(valid_word & acc_busy)]
        with m.If(acc_out.i.valid & acc_out.i.ready):
            m.d.sync += [sub.eq(sub_step), sub_last.eq(sub_step == sub_target)]

        # ---- Completion.
        running = Signal()
        with m.If(self.start):
            m.d.sync += running.eq(1)
            m.d.sync += self.done.eq(0)
        with m.Else():
            m.d.sync += self.done.eq(0)
            # (a word is written only while its row is outstanding, so `outstanding == 0`
            # also says no word goes into the sparse processing unit now: the write's
            # handshake reaches no completion register)
            written = (~issuing & (outstanding == 0) & spu.idle & ~acc_out.o.valid)
            # ldc: every requested word arrived, and the expander done (or the stream bad)
            stream_done = fetch_quiet & (expander.finished | index_err)
            finished = running & ~arm & Mux(compressed, stream_done & (written | index_err), written)
            first_err = Mux(err != ErrorCode.NONE, err,
                            Mux(index_err, ErrorCode.INDEX, ErrorCode.NONE))
            with m.If(finished):
                m.d.sync += [running.eq(0), self.done.eq(1),
                             self.error.eq(Mux(first_err != ErrorCode.NONE, first_err,
                                               Mux(reader.error, ErrorCode.LOAD_BUS, ErrorCode.NONE)))]
        m.d.comb += reader.clear.eq(self.start)
        return m
