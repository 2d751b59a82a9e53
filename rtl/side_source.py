"""Index source for one side (neurons or weights) of a lane's mapping unit."""

from amaranth import *
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from snpu.verif.index import FORMAT_CODES, STRIDE_ESCAPE as ESCAPE
from snpu.verif.timing import STRIDE_REPLAY_CHUNKS

from .bits import popcount_bytes, sum_tree, thermometer
from .direct_to_stride import DirectToStride
from .fetch import ByteFetcher, ByteShifter
from .layouts import ADDR, CHUNK, chunk_layout, entry_layout
from .skid import SkidBuffer
from .stride_to_direct import MAX_WINDOW, StrideToDirect
from .target import NO_RW_CHECK, checked_read


class Fmt(enum.Enum, shape=2):
    """Index format of one side (the codes of ``mx.nfmt`` / ``mx.wfmt``)."""

    DENSE = FORMAT_CODES["dense"]
    DIRECT = FORMAT_CODES["direct"]
    STRIDE = FORMAT_CODES["stride"]


#: What a row's length ``n`` decides, the same for every source of an fc (both sides walk
#: rows of ``n`` positions): registers a source computes as it starts, which the lanes'
#: weight sources take from the neuron source instead of computing their own copies
#: (``shared_shape``).  ``last_chunk``: the row's chunks less one; ``one_chunk``: the row
#: has one chunk (both valid from the cycle after ``start``); ``last_mask``: the positions
#: of the row's last chunk inside the row (from the third cycle after ``start``, before
#: the first chunk's word is masked).
ROW_SHAPE = data.StructLayout({"last_chunk": 11, "one_chunk": 1, "last_mask": CHUNK})


class SideSource(wiring.Component):
    """Walks the rows of an ``fc`` for one side and produces that side's connection index.

    Rows are visited vector by vector (``nvec``), ``rows`` per vector.  On the neuron side
    (``rows_follow = 0``) every row re-reads vector ``v``'s index at
    ``idx_base + v * idx_vec_stride`` with values at ``val_base + v * val_vec_stride``; on the
    weight side (``rows_follow = 1``) the rows' indices and values follow each other from the
    bases, restarting at every vector.

    Output, per row:

    * ``to_entries = 0``: ``max(1, ceil(n / 64))`` chunks on ``chunks`` (dense: all ones;
      direct: the index words; stride: expanded by a :class:`StrideToDirect`, claim 9).  A
      chunk's ``base`` is where its first element's value lives.
    * ``to_entries = 1``: the row's stride entries and a terminator on ``entries`` (stride: as
      stored; direct: converted by a :class:`DirectToStride`, claim 10), for the merge.  An
      entry's ``base`` is the row's value base, or without ``convert`` (a lane's weight
      side, whose stride values are stored packed) the entry's own value address.

    The two conversions exist only with ``convert`` (the neuron side).

    *Replay* (neuron side, stride to chunks): every row of a vector reads the same index, so
    only the vector's first row is converted; its chunks' bits are kept in a block RAM of
    ``replay_chunks`` words as they leave, and the vector's other rows are read back from it
    by the words engine, as if it were a direct index (which recomputes the packed bases).
    A row of more than ``replay_chunks`` chunks is converted again for every row.  The
    hand-over from the converter to the replay and back costs a few cycles per vector (the
    converter's last chunk leaves the skid buffer, the words engine's pipeline fills).

    Throughput: one chunk per cycle (dense, direct, a replayed stride row; a converted
    stride row when a chunk holds at most ``window`` entries); one entry per cycle on the
    entry path.  Row overhead: none for dense / direct, about 3 cycles for a converted
    stride row (count read).  Latency (dense / direct / replay): a chunk enters the output
    queue five cycles after its index word is read (the block RAM's word registered, then
    masked into a register, per-byte counts, their sum, the value base); the stride
    converter's chunks leave through a :class:`~.skid.SkidBuffer` (a cycle), the entries
    (a stored stride row's, the direct-to-stride converter's) through another (a cycle).

    Parameters
    ----------
    window:
        Stride entries the expander takes per cycle (2..4; the byte window's width).
    convert:
        Build the converters (stride to direct, direct to stride) and the replay memory.
        Without them (a lane's weight side: the compiler stores weights in the format their
        path takes) a stride index leaves only as entries and a dense or direct one only as
        chunks; the MX unit faults an fc asking for anything else (``FORMAT``) before the
        lanes start.
    replay_chunks:
        Depth of the replay memory in chunks (a power of two; rows of up to
        ``64 * replay_chunks`` positions are converted once per vector).
    shared_shape:
        Take the row's :data:`ROW_SHAPE` from the ``shape`` input (another source's
        ``shape`` output, started in the same cycle with the same ``n``) instead of
        computing it (yosys merges identical per-lane copies anyway: 119 LUT sites in the
        16-lane core).  Without it ``shape`` is an output.

    Members
    -------
    start : In(1)
        Begin an instruction; the configuration inputs must stay stable until ``busy`` falls.
    busy : Out(1)
    error : Out(1)
        A stride position beyond ``n`` (sticky until the next ``start``; without
        ``convert`` the entries' positions are not checked here: a lane's merge does).
    mem_addr, mem_en, mem_data
        Synchronous read port of the side's 64-bit index memory.
    """

    def __init__(self, window: int = 2, *, convert: bool = True,
                 replay_chunks: int = STRIDE_REPLAY_CHUNKS, shared_shape: bool = False):
        if not 2 <= window <= MAX_WINDOW:
            raise ValueError(f"window must be in 2..{MAX_WINDOW} (the count is 2 bytes), "
                             f"got {window}")
        if replay_chunks < 1 or replay_chunks & (replay_chunks - 1) or replay_chunks > 1024:
            raise ValueError(f"replay_chunks must be a power of two in 1..1024, "
                             f"got {replay_chunks}")
        if shared_shape and convert:
            raise ValueError("shared_shape needs convert=False (the replay reads the row's "
                             "chunk count, which only a source's own shape has)")
        self._window = window
        self._replay_chunks = replay_chunks
        self._replay = (Memory(shape=CHUNK, depth=replay_chunks, init=[], attrs=NO_RW_CHECK)
                        if convert else None)
        self._fifo = SyncFIFOBuffered(width=len(Signal(chunk_layout()).as_value()), depth=10)
        self._convert = convert
        self._shared_shape = shared_shape
        self._d2s = DirectToStride() if convert else None
        # (without the converter nothing takes more than a byte per cycle: the entries leave
        # one per cycle and the count is read a byte at a time, a cycle more per row, which
        # the lane's merge mostly hides behind the neuron side's entries; a one-byte shift
        # register has no window multiplexer)
        self._fetch = ByteFetcher(window) if convert else ByteShifter()
        self._s2d = StrideToDirect(window) if convert else None
        super().__init__({
            "start": In(1),
            "busy": Out(1),
            "error": Out(1),
            "fmt": In(Fmt),
            "packed": In(1),
            "to_entries": In(1),
            "rows_follow": In(1),
            "n": In(16),
            "nvec": In(12),
            "rows": In(12),
            "idx_base": In(ADDR),
            "val_base": In(ADDR),
            "idx_vec_stride": In(16),
            "val_vec_stride": In(16),
            "chunks": Out(stream.Signature(chunk_layout())),
            "entries": Out(stream.Signature(entry_layout())),
            "mem_addr": Out(ADDR - 3),
            "mem_en": Out(1),
            "mem_data": In(64),
            "shape": (In if shared_shape else Out)(ROW_SHAPE),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = fifo = self._fifo
        m.submodules.fetch = fetch = self._fetch
        # the entries (a stored stride row's, or the direct-to-stride converter's) leave
        # through a skid buffer: the fetcher's window byte reaches no lane's entry queue in
        # the cycle it is selected, and the lanes' queues' room reaches neither the
        # fetcher's take nor the converter's stages (the ready is a register)
        m.submodules.entry_out = entry_out = SkidBuffer(entry_layout())
        entries_ready = entry_out.i.ready
        convert = self._convert
        if convert:
            m.submodules.s2d = s2d = self._s2d
            m.submodules.out_skid = out_skid = SkidBuffer(chunk_layout())
            m.submodules.d2s = d2s = self._d2s
            m.submodules.replay = replay_mem = self._replay
            replay_w, replay_r = replay_mem.write_port(), replay_mem.read_port()

        # Configuration-derived values, computed once at start (short paths afterwards).
        shared = self._shared_shape
        nchunks = Signal(11)
        last_chunk, last_row, last_vec = Signal(11), Signal(12), Signal(12)
        with m.If(self.start):
            m.d.sync += [last_row.eq(self.rows - 1), last_vec.eq(self.nvec - 1)]
        is_stride = Signal()
        m.d.comb += is_stride.eq(self.fmt == Fmt.STRIDE)
        # a stride row's chunks are replayed (the neuron side's rows re-read one index; the
        # row fits the replay memory), registered: it is read rows after start
        replay_ok = Signal()
        if convert:
            m.d.sync += replay_ok.eq(~self.to_entries & ~self.rows_follow &
                                     (nchunks <= self._replay_chunks))

        # ---- Words engine (dense / direct): issue one chunk per cycle, receive a cycle later.
        w_active = Signal()
        w_v, w_k, w_c = Signal(12), Signal(12), Signal(11)
        w_vec_idx = Signal(ADDR)
        # the index word the next issue reads, a counter: +1 per chunk, back to the vector's
        # first word at a row's end (or on, when the rows follow each other), to the next
        # vector's at a vector's end (no adder between it and the memory's address)
        w_word = Signal(ADDR - 3)
        inflight = Signal()
        q_pending = Signal(3)  # chunks in the receiver's later stages
        # room for one more chunk, registered: the chunks in flight and in the FIFO after
        # this cycle are at most this cycle's plus its issue (a chunk leaving only makes more
        # room), so if those are below the depth, a chunk issued next cycle fits; the FIFO's
        # level never reaches the issue decision in the same cycle
        credit = Signal()
        issue = Signal()
        # replay (stride rows read back from the replay memory): the stride engine starts
        # the words engine on one vector's rows 1.. with w_go; the chunks then leave from
        # the FIFO (replaying)
        w_go, replaying = Signal(), Signal()
        s_vec_val = Signal(ADDR)
        m.d.comb += issue.eq(w_active & credit)
        m.d.sync += credit.eq(fifo.level + inflight + q_pending + issue < fifo.depth)
        # w_c, w_k and w_v at their last values: flags kept beside the counters (each
        # compared against its next value as the counter moves), so an issue decides on
        # registers, not on a comparison
        c_last, row_last, vec_last = Signal(), Signal(), Signal()
        one_chunk, one_row = Signal(), Signal()   # chunks == 1, rows == 1 (set at start)
        # (row_one_chunk: one_chunk as the start sets it, for the start itself)
        row_one_chunk = self.n <= CHUNK
        # metadata travelling with the read
        r_valid, r_clast, r_rowlast = Signal(), Signal(), Signal()
        # the row's last chunk's positions (n - 64 * (chunks - 1) of them), a register set
        # two cycles after start (the first issue comes the cycle after start, its word is
        # masked two cycles after that, three after start); every other chunk has all 64
        last_mask = Signal(CHUNK)
        n_reg = Signal(16)
        with m.If(self.start):
            m.d.sync += n_reg.eq(self.n)
        # the row's shape: another source's, or worked out here as this one starts
        if shared:
            m.d.comb += [last_chunk.eq(self.shape.last_chunk), one_chunk.eq(self.shape.one_chunk),
                         last_mask.eq(self.shape.last_mask)]
        else:
            with m.If(self.start):
                chunks = Mux(self.n == 0, 1, (self.n + CHUNK - 1) >> 6)
                m.d.sync += [nchunks.eq(chunks), last_chunk.eq(chunks - 1),
                             one_chunk.eq(row_one_chunk)]
            # the last chunk's last position (n > 0) and n == 0 into registers the cycle
            # after start, the mask from them the cycle after that: no subtraction before
            # the thermometer
            start_d, start_dd = Signal(), Signal()
            m.d.sync += [start_d.eq(self.start), start_dd.eq(start_d)]
            last_pos = Signal(range(CHUNK), name="last_pos")
            n_zero = Signal()
            with m.If(start_d):
                m.d.sync += [last_pos.eq(n_reg - 1), n_zero.eq(n_reg == 0)]
            with m.If(start_dd):
                m.d.sync += last_mask.eq(Mux(n_zero, 0,
                                             thermometer(m, last_pos, CHUNK, "last_mask")))
            m.d.comb += [self.shape.last_chunk.eq(last_chunk),
                         self.shape.one_chunk.eq(one_chunk), self.shape.last_mask.eq(last_mask)]
        with m.If(self.start):
            m.d.sync += [w_active.eq(~is_stride & (self.nvec != 0) & (self.rows != 0)),
                         w_v.eq(0), w_k.eq(0), w_c.eq(0),
                         w_vec_idx.eq(self.idx_base), w_word.eq(self.idx_base[3:]),
                         one_row.eq(self.rows == 1),
                         c_last.eq(row_one_chunk), row_last.eq(self.rows == 1),
                         vec_last.eq(self.nvec == 1)]
        with m.Elif(w_go):
            # a replay: rows 1.. of the vector, every one from the replay memory's word 0
            m.d.sync += [w_active.eq(1), w_k.eq(1), w_c.eq(0), w_v.eq(last_vec),
                         w_vec_idx.eq(0), w_word.eq(0),
                         c_last.eq(one_chunk), row_last.eq(last_row == 1), vec_last.eq(1)]
        with m.Elif(issue):
            m.d.sync += [w_c.eq(w_c + 1), c_last.eq(w_c + 1 == last_chunk), w_word.eq(w_word + 1)]
            with m.If(c_last):
                m.d.sync += [w_c.eq(0), w_k.eq(w_k + 1), c_last.eq(one_chunk),
                             row_last.eq(w_k + 1 == last_row),
                             w_word.eq(Mux(self.rows_follow, w_word + 1, w_vec_idx[3:]))]
                with m.If(row_last):
                    m.d.sync += [w_k.eq(0), w_v.eq(w_v + 1), row_last.eq(one_row),
                                 vec_last.eq(w_v + 1 == last_vec),
                                 w_vec_idx.eq(w_vec_idx + self.idx_vec_stride),
                                 w_word.eq((w_vec_idx + self.idx_vec_stride)[3:])]
                    with m.If(vec_last):
                        m.d.sync += w_active.eq(0)
        m.d.sync += [inflight.eq(issue), r_valid.eq(issue), r_clast.eq(c_last),
                     r_rowlast.eq(row_last)]

        # receive (stage 0): the block RAMs' words into registers as they are, each its
        # own (a block RAM's clock-to-output is most of a cycle: no multiplexer after it);
        # the index memory's, and a replayed stride row's from the replay memory
        d_valid, d_clast, d_rowlast = Signal(), Signal(), Signal()
        d_word = Signal(CHUNK, reset_less=True)   # (no reset: d_valid says what it holds)
        m.d.sync += [d_valid.eq(r_valid & ~self.start), d_clast.eq(r_clast),
                     d_rowlast.eq(r_rowlast), d_word.eq(self.mem_data)]
        word = d_word
        if convert:
            d_replay = Signal(CHUNK, reset_less=True)
            m.d.sync += d_replay.eq(checked_read(m, platform, replay_r, [replay_w], "replay"))
            # (a selection by the format, which holds)
            word = Mux(is_stride, d_replay, d_word)
        # receive (stage 1): mask the row's last chunk's tail (a LUT or two per bit)
        bits = Signal(CHUNK)
        m.d.comb += bits.eq(Mux(self.fmt == Fmt.DENSE, (1 << CHUNK) - 1, word) &
                            Mux(d_clast, last_mask, (1 << CHUNK) - 1))
        b_valid, b_clast, b_rowlast = Signal(), Signal(), Signal()
        b_bits = Signal(CHUNK)
        m.d.sync += [b_valid.eq(d_valid & ~self.start), b_clast.eq(d_clast),
                     b_rowlast.eq(d_rowlast), b_bits.eq(bits)]
        # receive (stage 2): count the kept elements per byte
        q_valid, q_clast, q_rowlast = Signal(), Signal(), Signal()
        q_bits = Signal(CHUNK)
        q_parts = [Signal(4, name=f"q_part{k}") for k in range(CHUNK // 8)]
        m.d.sync += [q_valid.eq(b_valid & ~self.start), q_clast.eq(b_clast),
                     q_rowlast.eq(b_rowlast), q_bits.eq(b_bits)]
        m.d.sync += [d.eq(p) for d, p in zip(q_parts, popcount_bytes(m, b_bits, name="kept"))]
        # receive (stage 3): sum the byte counts
        k_valid, k_clast, k_rowlast = Signal(), Signal(), Signal()
        k_bits = Signal(CHUNK)
        k_kept = Signal(range(CHUNK + 1))
        m.d.sync += [k_valid.eq(q_valid & ~self.start), k_clast.eq(q_clast),
                     k_rowlast.eq(q_rowlast), k_bits.eq(q_bits), k_kept.eq(sum_tree(q_parts))]
        # receive (stage 4): the value base; into the FIFO
        rv_vec, rv_row, rv_run = Signal(ADDR), Signal(ADDR), Signal(ADDR)
        run_next = Signal(ADDR)
        m.d.comb += run_next.eq(rv_run + Mux(self.packed, k_kept, CHUNK))
        chunk_payload = Signal(chunk_layout())
        m.d.comb += [chunk_payload.bits.eq(k_bits), chunk_payload.base.eq(rv_run),
                     chunk_payload.last.eq(k_clast)]
        m.d.comb += [fifo.w_data.eq(chunk_payload), fifo.w_en.eq(k_valid)]
        with m.If(self.start):
            m.d.sync += [rv_vec.eq(self.val_base), rv_row.eq(self.val_base),
                         rv_run.eq(self.val_base)]
        with m.Elif(w_go):
            m.d.sync += [rv_vec.eq(s_vec_val), rv_row.eq(s_vec_val), rv_run.eq(s_vec_val)]
        with m.Elif(k_valid):
            m.d.sync += rv_run.eq(run_next)
            with m.If(k_clast):
                next_row = Mux(self.rows_follow, Mux(self.packed, run_next, rv_row + self.n), rv_vec)
                m.d.sync += [rv_row.eq(next_row), rv_run.eq(next_row)]
                with m.If(k_rowlast):
                    m.d.sync += [rv_vec.eq(rv_vec + self.val_vec_stride),
                                 rv_row.eq(rv_vec + self.val_vec_stride),
                                 rv_run.eq(rv_vec + self.val_vec_stride)]

        # ---- Stride engine: count, then the converter or the raw entries.
        s_v, s_k = Signal(12), Signal(12)
        s_vec_idx, s_row_val = Signal(ADDR), Signal(ADDR)
        remaining = Signal(16)
        rem_zero = Signal()  # remaining == 0, kept beside it
        cursor = Signal(18)
        s_kept = Signal(ADDR)
        s_error = Signal()
        emit_term, emit_entry = Signal(), Signal()
        # The fetcher restarts at the row's index in ROW_START, except on the weight side's
        # rows after row 0 (they follow each other: it keeps streaming).  Decided where
        # ROW_START is entered, into a register: no comparison before the fetcher's start.
        # It is high only in ROW_START (set only as ROW_START is entered, for one cycle), so
        # it starts the fetcher on its own, without the state's decode.
        row_fetch = Signal()
        m.d.sync += row_fetch.eq(0)
        m.d.comb += [fetch.start.eq(row_fetch), fetch.start_addr.eq(s_vec_idx)]
        # The fetcher's take: the converter's (zero unless it is busy, inside CONVERT) or the
        # count's and the entries' (zero outside COUNT and EMIT), so an OR rather than a
        # multiplexer on the state puts the converter's take into the fetcher.
        take_own = Signal.like(fetch.take)
        s2d_go = Signal()   # start the converter (CONVERT's first cycle)
        # The stride engine's registers are loaded by every start (an instruction starts
        # only with the engine idle), whatever the format and counts: only the state and
        # row_fetch wait for the comparisons of the counts, not the registers' enables.
        stride_go = Signal()
        m.d.comb += stride_go.eq(self.start & is_stride & (self.nvec != 0) & (self.rows != 0))
        with m.If(self.start):
            m.d.sync += [s_v.eq(0), s_k.eq(0), s_vec_idx.eq(self.idx_base),
                         s_vec_val.eq(self.val_base), s_row_val.eq(self.val_base),
                         s_error.eq(0), row_fetch.eq(stride_go)]
        with m.FSM() as stride_fsm:
            with m.State("IDLE"):
                with m.If(stride_go):
                    m.next = "ROW_START"
            with m.State("ROW_START"):
                m.next = "COUNT"
            if convert:
                with m.State("COUNT"):
                    # the row's 2-byte count, both bytes in one cycle
                    with m.If(fetch.avail >= 2):
                        m.d.comb += take_own.eq(2)
                        count = Cat(fetch.bytes[0], fetch.bytes[1])
                        m.d.sync += [remaining.eq(count), s_kept.eq(0),
                                     rem_zero.eq(fetch.pair_zero)]
                        with m.If(self.to_entries):
                            m.next = "EMIT"
                        with m.Else():
                            m.d.sync += s2d_go.eq(1)
                            m.next = "CONVERT"
            else:
                # (a one-byte window: the count a byte per cycle, low byte first)
                low_zero = Signal()
                with m.State("COUNT"):
                    with m.If(fetch.avail != 0):
                        m.d.comb += take_own.eq(1)
                        m.d.sync += [remaining[:8].eq(fetch.bytes[0]), low_zero.eq(fetch.zero[0])]
                        m.next = "COUNT_HIGH"
                with m.State("COUNT_HIGH"):
                    with m.If(fetch.avail != 0):
                        m.d.comb += take_own.eq(1)
                        m.d.sync += [remaining[8:].eq(fetch.bytes[0]),
                                     rem_zero.eq(low_zero & fetch.zero[0])]
                        m.next = "EMIT"
            if convert:
                with m.State("CONVERT"):
                    # the converter starts in this state's first cycle (s2d_go, below), from
                    # the count registered as it was read, and is busy the cycle after
                    m.d.sync += s2d_go.eq(0)
                    with m.If(~s2d.busy & ~s2d_go):
                        m.d.sync += s_kept.eq(s2d.kept)
                        m.d.sync += s_error.eq(s_error | s2d.error)
                        m.next = "ROW_DONE"
            with m.State("EMIT"):
                with m.If(rem_zero):
                    m.d.comb += emit_term.eq(1)
                    with m.If(entries_ready):
                        m.next = "ROW_DONE"
                with m.Elif(fetch.avail != 0):
                    m.d.comb += emit_entry.eq(1)
                with m.If(emit_entry & entries_ready):
                    m.d.comb += take_own.eq(1)
                    m.d.sync += [remaining.eq(remaining - 1), rem_zero.eq(remaining == 1)]
                    if not convert:
                        # (the entries carry their values' addresses: the next element's
                        # is one on, past a kept one)
                        with m.If(~fetch.escape[0]):
                            m.d.sync += s_row_val.eq(s_row_val + 1)
            def next_vector():
                m.d.sync += [s_k.eq(0), s_v.eq(s_v + 1),
                             s_vec_idx.eq(s_vec_idx + self.idx_vec_stride),
                             s_vec_val.eq(s_vec_val + self.val_vec_stride),
                             s_row_val.eq(s_vec_val + self.val_vec_stride)]
                with m.If(s_v == last_vec):
                    m.d.sync += row_fetch.eq(0)
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += row_fetch.eq(1)

            with m.State("ROW_DONE"):
                m.d.sync += s_k.eq(s_k + 1)
                if convert:
                    m.d.sync += s_row_val.eq(Mux(self.rows_follow,
                                                 s_row_val + Mux(self.packed, s_kept, self.n),
                                                 s_vec_val))
                else:
                    # (following rows start where this one's values end: its entries
                    # moved the address past them)
                    with m.If(~self.rows_follow):
                        m.d.sync += s_row_val.eq(s_vec_val)
                m.next = "ROW_START"
                m.d.sync += row_fetch.eq(~self.rows_follow)
                with m.If(s_k == last_row):
                    next_vector()
                if convert:  # (row 0 of several: never the last row above)
                    with m.If(replay_ok & (s_k == 0) & (last_row != 0)):
                        m.d.sync += row_fetch.eq(0)
                        m.next = "REPLAY_WAIT"
            if convert:
                with m.State("REPLAY_WAIT"):
                    # the converter's last chunk has left: the FIFO's chunks go next
                    with m.If(~out_skid.o.valid):
                        m.d.comb += w_go.eq(1)
                        m.d.sync += replaying.eq(1)
                        m.next = "REPLAY"
                with m.State("REPLAY"):
                    # the vector's other rows, read back, have all left
                    with m.If(~(w_active | r_valid | d_valid | b_valid | q_valid | k_valid) &
                              (fifo.level == 0)):
                        m.d.sync += replaying.eq(0)
                        m.next = "ROW_START"
                        next_vector()

        # Position check of emitted entries, one cycle behind (off the fetcher's path).
        # (Without the converter -- a lane's weight side -- the entries go only into the
        # lane's merge, which works out their positions anyway and checks them there.)
        chk_position = Signal()
        if convert:
            chk_valid, chk_value = Signal(), Signal(8)
            m.d.sync += [chk_valid.eq(emit_entry & entries_ready), chk_value.eq(fetch.bytes[0])]
            # (an entry is counted as kept here too, a cycle after it goes: the row's end is
            # read in ROW_DONE, two cycles after its last entry at the earliest)
            with m.If(chk_valid & (chk_value != ESCAPE)):
                m.d.sync += s_kept.eq(s_kept + 1)
            with m.If(stride_fsm.ongoing("COUNT")):
                m.d.sync += cursor.eq(0)
            with m.Elif(chk_valid):
                m.d.sync += cursor.eq(cursor + chk_value)
            # ... and the position against n a cycle later, on the cursor it moved to (no
            # adder before the comparison; the next row's COUNT, which clears the cursor,
            # comes four cycles after the row's last entry at the earliest: terminator,
            # ROW_DONE, ROW_START)
            m.d.sync += chk_position.eq(chk_valid & (chk_value != ESCAPE))
            with m.If(chk_position & (cursor >= n_reg)):
                m.d.sync += s_error.eq(1)

        m.d.comb += fetch.take.eq(take_own | (s2d.take if convert else 0))
        if convert:
            # s2d_go is high only in CONVERT's first cycle: the converter's start is the
            # register itself, not decoded with the state (it loads most of the converter's
            # registers); the count is registered as it was read (the fetcher's window
            # feeds no register of the converter: the two sit apart on the die)
            m.d.comb += [s2d.start.eq(s2d_go), s2d.count.eq(remaining)]
            m.d.comb += [s2d.n.eq(self.n), s2d.val_base.eq(s_row_val),
                         s2d.packed.eq(self.packed), s2d.bytes.eq(fetch.bytes),
                         s2d.escape.eq(fetch.escape),
                         s2d.avail.eq(fetch.avail)]
            # the converted chunks' bits into the replay memory, word k = the row's chunk k
            replay_k = Signal(range(self._replay_chunks))
            with m.If(s2d.start):
                m.d.sync += replay_k.eq(0)
            with m.Elif(s2d.o.valid & s2d.o.ready):
                m.d.sync += replay_k.eq(replay_k + 1)
            m.d.comb += [replay_w.addr.eq(replay_k), replay_w.data.eq(s2d.o.payload.bits),
                         replay_w.en.eq(s2d.o.valid & s2d.o.ready & replay_ok),
                         replay_r.addr.eq(w_c), replay_r.en.eq(issue)]

        # ---- Memory port: words engine or fetcher.
        m.d.comb += [
            self.mem_addr.eq(Mux(is_stride, fetch.mem_addr, w_word)),
            self.mem_en.eq(Mux(is_stride, fetch.mem_en, issue & (self.fmt == Fmt.DIRECT))),
            fetch.mem_data.eq(self.mem_data),
        ]

        # ---- Outputs.
        fifo_chunk = Signal(chunk_layout())
        m.d.comb += fifo_chunk.eq(fifo.r_data)
        # Who reads the FIFO -- the chunks' output (`fifo_chunks`) or the direct-to-stride
        # converter (`fifo_d2s`) -- and whether the chunks come from the stride converter's
        # skid buffer instead (`skid_chunks`): registers, from the format (constant while
        # the source runs) and `replaying`, so the FIFO's read enable is one AND-OR of them
        # with the readies, not a decoding of the format in front of the FIFO's level; the
        # outputs' valids and the chunks' multiplexer follow the same flags.  They are a
        # cycle late, which is in time: the first chunk reaches the FIFO several cycles
        # after a start (words engine, block RAM, three stages) or after `replaying` rises
        # (REPLAY_WAIT starts the words engine), and `replaying` falls only with the FIFO
        # and the stages empty; the skid buffer is empty when `replaying` rises (REPLAY_WAIT
        # waits for it) and when it falls (a row's conversion starts after ROW_START).
        fifo_chunks, fifo_d2s, skid_chunks = Signal(), Signal(), Signal()
        if convert:
            m.d.sync += [fifo_chunks.eq(Mux(is_stride, replaying, ~self.to_entries)),
                         fifo_d2s.eq(~is_stride & self.to_entries),
                         skid_chunks.eq(is_stride & ~replaying)]
        else:
            m.d.sync += fifo_chunks.eq(~is_stride)
        m.d.comb += [fifo.r_en.eq(fifo_chunks & self.chunks.ready |
                                  (fifo_d2s & d2s.i.ready if convert else 0)),
                     self.chunks.valid.eq(fifo_chunks & fifo.r_rdy),
                     self.chunks.payload.eq(fifo_chunk)]
        if convert:
            # the stride converter's chunks through a skid buffer: its output handshake
            # (which ends its chunk assembly) does not wait for the lanes' queues
            wiring.connect(m, s2d.o, out_skid.i)
            m.d.comb += [out_skid.o.ready.eq(skid_chunks & self.chunks.ready),
                         d2s.i.valid.eq(fifo_d2s & fifo.r_rdy), d2s.i.payload.eq(fifo_chunk)]
            with m.If(skid_chunks):
                m.d.comb += [self.chunks.valid.eq(out_skid.o.valid & ~self.to_entries),
                             self.chunks.payload.eq(out_skid.o.payload)]
        # the entries: the stride engine's own, or the direct-to-stride converter's
        with m.If(is_stride):
            m.d.comb += [
                entry_out.i.valid.eq(emit_term | emit_entry),
                entry_out.i.payload.value.eq(Mux(emit_term, 0, fetch.bytes[0])),
                entry_out.i.payload.base.eq(s_row_val),
                entry_out.i.payload.none.eq(emit_term),
                entry_out.i.payload.last.eq(emit_term),
            ]
        if convert:
            # (the converter's ready is the skid buffer's, a register, whatever the format:
            # it holds no chunk on a stride index, whose chunks never reach it)
            m.d.comb += d2s.o.ready.eq(entry_out.i.ready)
            with m.If(~is_stride):
                m.d.comb += [entry_out.i.valid.eq(d2s.o.valid),
                             entry_out.i.payload.eq(d2s.o.payload)]
        wiring.connect(m, entry_out.o, wiring.flipped(self.entries))

        m.d.comb += self.error.eq(s_error | (s2d.error if convert else 0))
        m.d.comb += q_pending.eq(d_valid + b_valid + q_valid + k_valid)
        m.d.comb += self.busy.eq(w_active | r_valid | d_valid | b_valid | q_valid | k_valid |
                                 ~stride_fsm.ongoing("IDLE") | entry_out.o.valid | chk_position
                                 | (out_skid.o.valid if convert else 0))
        return m
