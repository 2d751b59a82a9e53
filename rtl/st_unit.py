"""ST unit: 3-D DMA stores from the output cache to external memory, plain or compressed."""

from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from snpu.config import CoreConfig
from snpu.verif.isa import Unit

from .axi import (MAX_BURST, RESP_OKAY, beats_spanned, burst_limit, burst_limit_after_full,
                  burst_size, next_burst_address)
from .block_fifo import BlockRamFIFO
from .compress import ChunkCompressor, stream_misaligned
from .dma_reader import BEAT
from .microcode import args_layout, op_codes, registers_layout
from .realign import Realigner
from .skid import SkidBuffer
from .status import ErrorCode

#: a row as the AXI writer takes it: its destination, and the 8-byte beats it spans there
#: and the beats its first burst may have (the 4 KiB boundary), worked out as it is queued
ROW = data.StructLayout({"ext": 32, "beats": 14, "limit": 5})
#: a row as the reader takes it: its first output-cache word and byte offset, the
#: destination's byte offset (the beats' tag), and its beats' sizes worked out as the row is
#: queued -- the first beat's byte count and whether it is the last, then the bytes after it
#: and the second beat's count and whether that is the last
#: a burst's address and a beat of write data as they leave through the output registers
AW = data.StructLayout({"addr": 32, "len": 8})
W = data.StructLayout({"data": 64, "strb": 8, "last": 1})
READ_ROW = data.StructLayout({"word": 14, "offset": 3, "tag": 3,
                              "first_count": 4, "first_last": 1,
                              "rest": 17, "rest_count": 4, "rest_last": 1})
#: entries of the ST unit's beat queue: the reader keeps every word it has read and the
#: queue has not passed on in it (two in flight in front of it: the output cache's read,
#: then the register after it), so it reads one word per cycle while the queue drains one
BEAT_QUEUE = 6


class StoreUnit(wiring.Component):
    """Executes ``st``: for ``p < n3, r < rows`` copy ``cols`` bytes from output-cache address
    ``src + p*src_stride3 + r*src_stride`` to external address ``ext + p*ext_stride3 +
    r*ext_stride`` (golden model: ``Machine._st``).

    Three decoupled parts: a row generator (checks that the source lies inside the output
    cache, ``RANGE``), a reader that streams each row's output-cache words as annotated
    beats into a :class:`Realigner` (destination alignment), and an AXI writer that splits
    each row into INCR bursts of at most 16 beats not crossing 4 KiB, with write strobes for
    partial words.  ``done`` pulses once every burst's response has arrived; a response
    other than OKAY gives ``STORE_BUS``.

    ``stc`` (golden model: ``Machine._stc``) reads its rows the same way (one plane; ``src``,
    ``ext`` and ``st.src_stride`` 8-aligned, else ``ALIGN`` before anything moves) into a
    :class:`~.compress.ChunkCompressor`; its words queue for the bus and leave in bursts
    from ``ext + 8`` as they accumulate (16 at a time, fewer at a 4 KiB boundary or at the
    end); the stream's length header is written to ``ext`` last.

    Throughput one 8-byte beat per cycle (``stc``: :func:`snpu.verif.timing.stc_cycles`).
    AW and W leave through :class:`~.skid.SkidBuffer` registers (a cycle each), so the
    bus's ``awready`` and ``wready`` reach no logic behind them.
    """

    def __init__(self, config: CoreConfig):
        self._cfg = config
        self._rows_read = SyncFIFOBuffered(width=READ_ROW.size, depth=4)
        self._rows_write = SyncFIFOBuffered(width=ROW.size, depth=4)
        self._bursts = SyncFIFOBuffered(width=5, depth=8)
        self._beats = SyncFIFOBuffered(width=BEAT.size, depth=BEAT_QUEUE)
        self._realign = Realigner()
        self._compressor = ChunkCompressor()
        self._stream = BlockRamFIFO(width=64, depth=32)
        self._aw_out = SkidBuffer(AW)
        self._w_out = SkidBuffer(W)
        super().__init__({
            "start": In(1),
            "op": In(range(len(op_codes(Unit.ST)))),
            "args": In(args_layout(Unit.ST)),
            "regs": In(registers_layout(Unit.ST)),
            "done": Out(1),
            "error": Out(ErrorCode),
            "obuf_addr": Out(range(config.obuf_bytes // 8)),
            "obuf_en": Out(1),
            "obuf_data": In(64),
            "awvalid": Out(1), "awready": In(1), "awaddr": Out(32), "awlen": Out(8),
            "wvalid": Out(1), "wready": In(1), "wdata": Out(64), "wstrb": Out(8), "wlast": Out(1),
            "bvalid": In(1), "bready": Out(1), "bresp": In(2),
            "bytes_written": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        c = self._cfg
        m.submodules.rows_read = rows_read = self._rows_read
        m.submodules.rows_write = rows_write = self._rows_write
        m.submodules.bursts = bursts = self._bursts
        m.submodules.beats = beats = self._beats
        m.submodules.realign = realign = self._realign
        m.submodules.compressor = comp = self._compressor
        m.submodules.stream = stream_q = self._stream
        # AW and W leave through registers (skid buffers): the bus's ready signals reach
        # only their ready registers, not the burst and beat logic behind them
        m.submodules.aw_out = aw_out = self._aw_out
        m.submodules.w_out = w_out = self._w_out
        m.d.comb += [self.awvalid.eq(aw_out.o.valid), self.awaddr.eq(aw_out.o.payload.addr),
                     self.awlen.eq(aw_out.o.payload.len), aw_out.o.ready.eq(self.awready),
                     self.wvalid.eq(w_out.o.valid), self.wdata.eq(w_out.o.payload.data),
                     self.wstrb.eq(w_out.o.payload.strb), self.wlast.eq(w_out.o.payload.last),
                     w_out.o.ready.eq(self.wready)]
        awvalid, awready = aw_out.i.valid, aw_out.i.ready
        wvalid, wready = w_out.i.valid, w_out.i.ready

        # ---- Latch the operation: st's operands, or stc's as one plane.
        OP = op_codes(Unit.ST)
        new_stc = self.op == OP["stc"]
        new = Signal(self.args.st.shape())
        with m.If(new_stc):
            s = self.args.stc
            m.d.comb += [new.src.eq(s.src), new.ext.eq(s.ext), new.n3.eq(1), new.rows.eq(s.rows),
                         new.cols.eq(s.cols)]
        with m.Else():
            m.d.comb += new.eq(self.args.st)
        a = Signal(self.args.st.shape())
        r = Signal(self.regs.shape())
        compress = Signal()
        # `start` only latches the operation; what follows from it (the checks, the first
        # row's end, the counters' loads) is worked out from those registers the cycle after
        # (`arm`), so no operand reaches a sum or a comparison in the cycle it arrives
        arm, arm_late = Signal(), Signal()
        m.d.sync += [arm.eq(self.start), arm_late.eq(arm)]
        with m.If(self.start):
            m.d.sync += [a.eq(new), r.eq(self.regs), compress.eq(new_stc)]
        misaligned = compress & stream_misaligned(a.src, a.ext, a.rows, r.src_stride)

        # ---- Row generator.  Whether the row at `src_row` runs past the output cache
        # (`bad`) and whether it is its plane's last or the last plane's are registers,
        # worked out as the row before it is pushed (the row's end, `end_row`, walks beside
        # `src_row`; the counters count down to zero): `push` follows from registers alone.
        issuing = Signal()
        p_left, r_left = Signal(12), Signal(12)   # planes, rows in the plane after this one
        rows_m1 = Signal(12)
        src_plane, src_row = Signal(17), Signal(17)
        end_plane, end_row = Signal(18), Signal(18)  # src + cols of the plane's first row, the row
        ext_plane, ext_row = Signal(32), Signal(32)
        err = Signal(ErrorCode)
        bad = Signal()
        last_row, last_plane = Signal(), Signal()
        m.d.comb += [last_row.eq(r_left == 0), last_plane.eq(p_left == 0)]
        # the cycle after `arm`, the first row's check goes into `bad` (no row is pushed)
        first_check = Signal()
        m.d.sync += first_check.eq(arm)
        push = Signal()
        m.d.comb += push.eq(issuing & ~first_check & ~bad & rows_read.w_rdy & rows_write.w_rdy)
        push_write = push & ~compress  # stc's rows are written as one stream
        row = Signal(ROW)
        m.d.comb += [row.ext.eq(ext_row), row.beats.eq(beats_spanned(ext_row, a.cols, 3)),
                     row.limit.eq(burst_limit(m, ext_row & ~7, 3)),
                     rows_write.w_data.eq(row),
                     rows_read.w_en.eq(push), rows_write.w_en.eq(push_write)]
        # the reader's view of the row: its beats' sizes from registers here, so the reader
        # compares nothing between the queue's output and taking the next row
        # (for each of the 8 byte offsets a row may start at, whether its first or second
        # beat is its last: bits set as the instruction starts, so a row's annotations are
        # a selection by its offset and one short sum, no comparison of its length)
        read_row = Signal(READ_ROW)
        first_last_at, second_last_at = Signal(8), Signal(8)
        cols_m8 = Signal(17)                  # cols - 8 (what the first beat leaves at offset 0)
        off = src_row[:3]
        room0 = Signal(4)                     # bytes the first word holds from src on
        m.d.comb += room0.eq(8 - off)
        rest = Signal(17)
        m.d.comb += rest.eq(cols_m8 + off)
        first_last = first_last_at.bit_select(off, 1)
        rest_last = second_last_at.bit_select(off, 1)
        m.d.comb += [read_row.word.eq(src_row[3:]), read_row.offset.eq(off),
                     read_row.tag.eq(ext_row[:3]),
                     read_row.first_last.eq(first_last),
                     read_row.first_count.eq(Mux(first_last, a.cols[:4], room0)),
                     read_row.rest.eq(rest), read_row.rest_last.eq(rest_last),
                     read_row.rest_count.eq(Mux(rest_last, rest[:4], 8)),
                     rows_read.w_data.eq(read_row)]
        # (`start` clears `issuing` and `err` below, after everything else: it selects none
        # of the row generator's sums, so no path runs from the front end's start through
        # them into `bad`.  The unit is idle when it starts, and `arm` follows a start.)
        # The rows' checks compare registers: the first row's end (set at `arm`) with the
        # output cache's size the cycle after (`first_check`), and a row's end with the room
        # the step to the next row or plane leaves below that size (`end + step > size` is
        # `step > size or end > size - step`, both set at `arm`), so no adder lies before
        # a comparison
        row_never, plane_never = Signal(), Signal()
        refuse, refuse_align = Signal(), Signal()   # nothing to store / misaligned (at arm)
        row_room, plane_room = Signal(18), Signal(18)
        with m.If(arm):
            m.d.sync += [row_never.eq(r.src_stride > c.obuf_bytes),
                         row_room.eq(c.obuf_bytes - r.src_stride),
                         plane_never.eq(r.src_stride3 > c.obuf_bytes),
                         plane_room.eq(c.obuf_bytes - r.src_stride3)]
            empty = (a.n3 == 0) | (a.rows == 0) | (a.cols == 0)
            first_end = Signal(18)
            m.d.comb += first_end.eq(a.src + a.cols)
            # (whether it issues at all, and its ALIGN fault, follow from these registers at
            # `first_check`, where no row is pushed)
            m.d.sync += [refuse.eq(empty | misaligned), refuse_align.eq(misaligned & ~empty)]
            m.d.sync += [issuing.eq(1),
                         p_left.eq(a.n3 - 1), r_left.eq(a.rows - 1),
                         rows_m1.eq(a.rows - 1), cols_m8.eq(a.cols - 8),
                         # (cols + k <= 8 as cols <= 8 - k: comparisons with constants,
                         # no adder before them)
                         first_last_at.eq(Cat(*[a.cols <= 8 - k for k in range(8)])),
                         second_last_at.eq(Cat(*[a.cols <= 16 - k for k in range(8)])),
                         src_plane.eq(a.src), src_row.eq(a.src),
                         end_plane.eq(first_end), end_row.eq(first_end), bad.eq(0),
                         ext_plane.eq(a.ext), ext_row.eq(a.ext)]
        with m.Elif(first_check):
            m.d.sync += bad.eq(end_row > c.obuf_bytes)
            with m.If(refuse):
                m.d.sync += issuing.eq(0)
            with m.If(refuse_align):
                m.d.sync += err.eq(ErrorCode.ALIGN)
        with m.Else():
            with m.If(issuing & bad):
                m.d.sync += [issuing.eq(0), err.eq(ErrorCode.RANGE)]
            with m.If(push):
                next_end = Signal(18)
                with m.If(~last_row):
                    m.d.comb += next_end.eq(end_row + r.src_stride)
                    m.d.sync += [r_left.eq(r_left - 1), src_row.eq(src_row + r.src_stride),
                                 ext_row.eq(ext_row + r.ext_stride),
                                 bad.eq(row_never | (end_row > row_room))]
                with m.Else():
                    m.d.comb += next_end.eq(end_plane + r.src_stride3)
                    m.d.sync += [bad.eq(plane_never | (end_plane > plane_room)),
                                 r_left.eq(rows_m1), p_left.eq(p_left - 1),
                                 src_plane.eq(src_plane + r.src_stride3),
                                 src_row.eq(src_plane + r.src_stride3),
                                 end_plane.eq(end_plane + r.src_stride3),
                                 ext_plane.eq(ext_plane + r.ext_stride3),
                                 ext_row.eq(ext_plane + r.ext_stride3)]
                    with m.If(last_plane):
                        m.d.sync += issuing.eq(0)
                m.d.sync += end_row.eq(next_end)
        with m.If(self.start):
            m.d.sync += [issuing.eq(0), err.eq(ErrorCode.NONE)]

        # ---- Reader: output-cache words -> annotated beats (credit-limited).  Each beat's
        # byte count and "last" are registers: the first beat's come with the row, the
        # next beat's (`next_count`, `next_last`) are worked out as a beat issues.
        rd = Signal(READ_ROW)
        m.d.comb += rd.eq(rows_read.r_data)
        rd_started = Signal()
        rd_word = Signal(14)
        rd_left = Signal(17)                  # bytes of the row after the beats issued
        next_count = Signal(4)
        next_last = Signal()
        cur_word = Mux(rd_started, rd_word, rd.word)
        offset = Mux(rd_started, 0, rd.offset)
        count = Mux(rd_started, next_count, rd.first_count)
        is_last = Mux(rd_started, next_last, rd.first_last)
        # words read and not yet in the beat queue: one whose address is out now (`inflight`,
        # its data comes next cycle) and one whose data is in the register in front of the
        # queue (`arriving`); the queue keeps a place for each
        inflight, arriving = Signal(), Signal()
        # words read and not passed on by the queue, a counter (no adder before `issue`)
        held = Signal(range(BEAT_QUEUE + 1))
        issue = Signal()
        m.d.comb += issue.eq(rows_read.r_rdy & (held < BEAT_QUEUE - 1))
        m.d.sync += held.eq(held + issue - (beats.r_en & beats.r_rdy))
        m.d.comb += [self.obuf_addr.eq(cur_word), self.obuf_en.eq(issue)]
        beat_meta = Signal(BEAT)
        # after a beat that is not the row's last: the row's second beat (from the row), or
        # the one after a full beat of 8 bytes
        after_full = rd_left - 8
        with m.If(issue):
            m.d.sync += [rd_word.eq(cur_word + 1),
                         rd_left.eq(Mux(rd_started, after_full, rd.rest)),
                         next_count.eq(Mux(rd_started, Mux(rd_left <= 16, after_full, 8),
                                           rd.rest_count)),
                         next_last.eq(Mux(rd_started, rd_left <= 16, rd.rest_last)),
                         beat_meta.offset.eq(offset), beat_meta.count.eq(count),
                         beat_meta.first.eq(~rd_started), beat_meta.last.eq(is_last),
                         beat_meta.tag.eq(rd.tag)]
            with m.If(is_last):
                m.d.comb += rows_read.r_en.eq(1)
                m.d.sync += rd_started.eq(0)
            with m.Else():
                m.d.sync += rd_started.eq(1)
        m.d.sync += inflight.eq(issue)
        # the output cache's word goes into a register before the beat queue (a block RAM's
        # output, then routing, into LUT RAM was the core's worst placed path); no reset
        # (`arriving` says what it holds), so it can be the block RAM's output register
        arrived = Signal(BEAT, reset_less=True)
        m.d.sync += [arriving.eq(inflight), arrived.eq(beat_meta), arrived.data.eq(self.obuf_data)]
        m.d.comb += [beats.w_en.eq(arriving), beats.w_data.eq(arrived)]
        beat = Signal(BEAT)
        m.d.comb += beat.eq(beats.r_data)
        m.d.comb += [realign.i.valid.eq(beats.r_rdy & ~compress), realign.i.payload.eq(beat),
                     comp.i.valid.eq(beats.r_rdy & compress), comp.i.payload.data.eq(beat.data),
                     comp.i.payload.count.eq(beat.count), comp.i.payload.last.eq(beat.last),
                     beats.r_en.eq(Mux(compress, comp.i.ready, realign.i.ready))]

        # ---- stc: the compressed words queue for the bus, counted for the header.
        header_pushed = Signal()
        stream_words = Signal(29)     # words of the stream after its header
        unclaimed = Signal(range(64))  # queued words no burst has claimed yet
        rows_drained = ~arm & ~issuing & (rows_read.level == 0) & ~rows_read.r_rdy & (held == 0)
        # the stream has ended: every row read and compressed (a register, a cycle after
        # it holds: nothing enters once it does, so it stays true until the next start)
        stream_end = Signal()
        with m.If(self.start):
            m.d.sync += stream_end.eq(0)
        with m.Else():
            m.d.sync += stream_end.eq(compress & rows_drained & comp.idle & ~comp.o.valid)
        push_header = stream_end & ~header_pushed & (unclaimed == 0) & \
            (err == ErrorCode.NONE) & stream_q.w_rdy
        # (once the stream has ended the compressor holds no word, so `stream_end`, a
        # register, chooses between the header and the compressor's words: the count of
        # unclaimed words decides only the header's push, not the compressor's ready nor
        # the queue's data, and the count's own update waits for no comparison of it)
        with m.If(stream_end):
            m.d.comb += [stream_q.w_en.eq(push_header), stream_q.w_data.eq(stream_words << 3)]
        with m.Else():
            m.d.comb += [stream_q.w_en.eq(comp.o.valid & stream_q.w_rdy),
                         stream_q.w_data.eq(comp.o.payload)]
        m.d.comb += comp.o.ready.eq(stream_q.w_rdy & ~stream_end)
        stream_push = comp.o.valid & comp.o.ready
        with m.If(self.start):
            m.d.sync += [header_pushed.eq(0), stream_words.eq(0)]
        with m.Else():
            with m.If(push_header):
                m.d.sync += header_pushed.eq(1)
            with m.If(stream_push):
                m.d.sync += stream_words.eq(stream_words + 1)

        # ---- AXI address: split each row's destination range into bursts.
        wr = Signal(ROW)
        m.d.comb += wr.eq(rows_write.r_data)
        aw_busy = Signal()
        aw_addr = Signal(32)
        # `limit`: the beats a burst from `aw_addr` may have (the 4 KiB boundary), a register
        # set with `aw_addr`, never derived from it within a cycle.  After a burst, `aw_addr`
        # is the next burst's only if that burst was full (`limit` beats): a row's last burst
        # is followed by the next row's address, an stc stream's short one (at its end) by
        # the header's.
        limit = Signal(range(MAX_BURST + 1), init=MAX_BURST)
        limit_after_burst = burst_limit_after_full(m, aw_addr, 3)
        aw_left = Signal(14)  # beats of the row not yet covered by a burst
        # the row's next burst and whether it is the row's last: registers, worked out
        # with `aw_left` and `limit` (from the row as it is taken, then after each burst)
        row_burst = Signal(range(MAX_BURST + 1))
        row_last_burst = Signal()
        row_left, row_limit = Signal(14), Signal(range(MAX_BURST + 1))
        m.d.comb += [row_left.eq(wr.beats),
                     row_limit.eq(wr.limit)]
        first_burst, first_last = burst_size(m, row_left, row_limit)
        left_after = Signal(14)
        m.d.comb += left_after.eq(aw_left - row_burst)
        # the beats left and the limit after this burst, registered every cycle, then the
        # burst after this one from them into registers every cycle (`settled`: they are
        # current, two cycles after the row registers last changed), so neither the
        # burst's going nor the next burst's size follows a subtraction and a comparison in
        # one cycle (aw_addr through the limit and the size into next_last_r was the placed
        # core's worst path at 252b51d, 97.5 MHz); a row's burst that is not its last waits
        # for them (two cycles after the row's previous burst: its beats take longer)
        left_after_r = Signal(14)
        limit_after_r = Signal.like(limit_after_burst)
        m.d.sync += [left_after_r.eq(left_after), limit_after_r.eq(limit_after_burst)]
        next_burst, next_last = burst_size(m, left_after_r, limit_after_r)
        next_r, next_last_r = Signal.like(row_burst), Signal()
        settling, settled = Signal(), Signal()
        m.d.sync += [next_r.eq(next_burst), next_last_r.eq(next_last), settling.eq(1),
                     settled.eq(settling)]
        with m.If(~aw_busy & rows_write.r_rdy):
            m.d.comb += rows_write.r_en.eq(1)
            m.d.sync += [aw_busy.eq(1), aw_addr.eq(wr.ext & ~7), limit.eq(row_limit),
                         aw_left.eq(row_left), settling.eq(0), settled.eq(0),
                         row_burst.eq(first_burst), row_last_burst.eq(first_last)]
        burst = Signal(range(MAX_BURST + 1))
        # stc: a burst of the queued words once `limit` are there (fewer at the stream's
        # end), then the header's single beat at ext.  A burst's words are claimed, and the
        # next burst's address and limit worked out, the cycle after it goes (`stc_gone`,
        # from the registered `stc_claim`), when no stc burst may go: the burst's size,
        # which comes from a comparison, reaches neither an adder nor `unclaimed`.
        header_aw = Signal()
        stc_gone = Signal()
        stc_claim = Signal(range(MAX_BURST + 1))
        stream_ready = (unclaimed >= limit) | (stream_end & (unclaimed != 0))
        with m.If(~compress):
            m.d.comb += [burst.eq(row_burst),
                         awvalid.eq(aw_busy & bursts.w_rdy & (settled | row_last_burst))]
        with m.Elif(header_aw):
            m.d.comb += [burst.eq(1), awvalid.eq(bursts.w_rdy)]
        with m.Else():
            m.d.comb += [burst.eq(Mux(unclaimed < limit, unclaimed, limit)),
                         awvalid.eq(stream_ready & ~stc_gone & bursts.w_rdy)]
        # after this burst: a row's (`row_burst`) or, the cycle after, an stc stream's
        aw_next = next_burst_address(m, aw_addr, Mux(compress, stc_claim, row_burst), 3)
        m.d.comb += [aw_out.i.payload.addr.eq(Mux(header_aw, a.ext, aw_addr)),
                     aw_out.i.payload.len.eq(burst - 1),
                     bursts.w_data.eq(burst - 1), bursts.w_en.eq(awvalid & awready)]
        outstanding_b = Signal(range(1 << 12))
        pending_rows = Signal(range(1 << 12))  # rows pushed whose bursts are not all issued
        row_issued = Signal()
        aw_fire = awvalid & awready
        # a row's burst going: `awvalid` without the stc branch's comparisons, so the
        # stream's word count reaches none of the row registers below
        row_fire = Signal()
        m.d.comb += row_fire.eq(~compress & aw_busy & bursts.w_rdy & awready &
                                (settled | row_last_burst))
        with m.If(arm & compress):
            m.d.sync += aw_addr.eq(a.ext + 8)
        with m.Elif(arm_late & compress):
            # (a cycle later than aw_addr: no stream word reaches the queue that early)
            m.d.sync += limit.eq(burst_limit(m, aw_addr, 3))
        with m.Elif(compress):
            with m.If(aw_fire & header_aw):
                m.d.sync += header_aw.eq(0)
            with m.If(stc_gone):
                m.d.sync += [aw_addr.eq(aw_next), limit.eq(limit_after_burst)]
            with m.If(push_header):
                m.d.sync += header_aw.eq(1)
        with m.Elif(row_fire):
            m.d.sync += [aw_addr.eq(aw_next), limit.eq(limit_after_burst),
                         aw_left.eq(left_after), settling.eq(0), settled.eq(0),
                         row_burst.eq(next_r), row_last_burst.eq(next_last_r)]
            with m.If(row_last_burst):
                m.d.sync += aw_busy.eq(0)
                m.d.comb += row_issued.eq(1)
        with m.If(self.start):      # (last: start selects none of the address sums)
            m.d.sync += header_aw.eq(0)
        m.d.sync += pending_rows.eq(pending_rows + push_write - row_issued)
        m.d.sync += [stc_gone.eq(compress & aw_fire & ~header_aw), stc_claim.eq(burst)]
        with m.If(self.start):
            m.d.sync += [unclaimed.eq(0), stc_gone.eq(0)]
        with m.Else():
            m.d.sync += unclaimed.eq(unclaimed + stream_push - Mux(stc_gone, stc_claim, 0))

        # ---- AXI data: the realigned words, `wlast` at each burst's end.
        beat_in_burst = Signal(4)
        with m.If(compress):
            m.d.comb += [wvalid.eq(stream_q.r_rdy & bursts.r_rdy),
                         w_out.i.payload.data.eq(stream_q.r_data), w_out.i.payload.strb.eq(0xFF),
                         stream_q.r_en.eq(wready & bursts.r_rdy)]
        with m.Else():
            m.d.comb += [wvalid.eq(realign.o.valid & bursts.r_rdy),
                         w_out.i.payload.data.eq(realign.o.payload.data),
                         w_out.i.payload.strb.eq(realign.o.payload.be),
                         realign.o.ready.eq(wready & bursts.r_rdy)]
        wlast = w_out.i.payload.last
        m.d.comb += wlast.eq(beat_in_burst == bursts.r_data)
        with m.If(wvalid & wready):
            m.d.sync += beat_in_burst.eq(beat_in_burst + 1)
            m.d.sync += self.bytes_written.eq(
                self.bytes_written + sum(w_out.i.payload.strb[k] for k in range(8)))
            with m.If(wlast):
                m.d.comb += bursts.r_en.eq(1)
                m.d.sync += beat_in_burst.eq(0)

        # ---- AXI responses and completion.
        m.d.comb += self.bready.eq(1)
        bus_err = Signal()
        # (a burst counts from its address's entry into the output register on)
        m.d.sync += outstanding_b.eq(outstanding_b + aw_fire -
                                     (self.bvalid & self.bready))
        with m.If(self.bvalid & (self.bresp != RESP_OKAY)):
            m.d.sync += bus_err.eq(1)
        running = Signal()
        m.d.sync += self.done.eq(0)
        with m.If(self.start):
            m.d.sync += [running.eq(1), bus_err.eq(0)]
        with m.Elif(running):
            # every row's bursts issued and answered (a burst is answered after its data);
            # stc: the stream and its header too (or nothing, after an error)
            stream_done = stream_end & (header_pushed | (err != ErrorCode.NONE)) & \
                ~header_aw & (unclaimed == 0) & ~stream_q.r_rdy
            idle = (~arm & ~issuing & (pending_rows == 0) & (outstanding_b == 0) &
                    ~aw_fire & (~compress | stream_done))
            with m.If(idle):
                m.d.sync += [running.eq(0), self.done.eq(1),
                             self.error.eq(Mux(err != ErrorCode.NONE, err,
                                               Mux(bus_err, ErrorCode.STORE_BUS, ErrorCode.NONE)))]
        return m
