"""Compressed activations in hardware: the chunk compressor (``stc``) and expander (``ldc``).

Both move the stream :func:`snpu.verif.act_compress.encode_stream` specifies: per chunk of
64 values of a row, a 64-bit mask word of its non-zero values, then those values packed and
zero-padded to whole words.  (The stream's length header is written and read by the ST and
LD units around these blocks.)
"""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from .bits import popcount_bytes, sum_tree, thermometer
from .block_fifo import BlockRamFIFO
from .realign import WORD
from .skid import PipeRegister, SkidBuffer

#: a dense input word of a row: ``count`` valid bytes (1..8) from byte 0; ``last``: the
#: row's last word
DENSE = data.StructLayout({"data": 64, "count": 4, "last": 1})
#: a dense word in the compressor's register stage: its non-zero bytes (mask), those bytes
#: packed from byte 0, their count, and the row's ``last`` flag
_STAGED = data.StructLayout({"nz": 8, "packed": 64, "k": 4, "k_ge": 10, "last": 1})
#: a dense word with its non-zero valid bytes found, and each byte's rank among them (how
#: many lie below it; byte 0's is 0 and not kept) (the compressor's first register stage)
_FOUND = data.StructLayout({"nz": 8, "rank": 3 * 7, "data": 64, "last": 1})


def _nonzero_bytes(m: Module, word: Value, count: Value, name: str) -> Value:
    """Bit ``b``: byte ``b`` of ``word`` is non-zero and among the first ``count``."""
    nz = Signal(8, name=name)
    m.d.comb += nz.eq(Cat(*[(word.word_select(b, 8) != 0) & (b < count) for b in range(8)]))
    return nz


def stream_misaligned(onchip: Value, ext: Value, rows: Value, stride: Value) -> Value:
    """An ``ldc`` / ``stc`` the units refuse with ``ALIGN``: its on-chip operand, its stream
    address or (with more than one row) the on-chip stride between rows not 8-aligned."""
    return (onchip[:3] != 0) | (ext[:3] != 0) | ((rows > 1) & (stride[:3] != 0))


def _ranks(m: Module, keep: Value, name: str) -> list[Signal]:
    """Per byte ``b``: how many bytes below it ``keep`` keeps (a prefix popcount)."""
    rank = [Signal(3, name=f"{name}_rank{b}") for b in range(8)]
    for b in range(1, 8):
        m.d.comb += rank[b].eq(sum((keep[k] for k in range(b)), Const(0, 3)))
    return rank


def _compact(m: Module, word: Value, keep: Value, rank: list[Value], name: str) -> Value:
    """The bytes of ``word`` whose ``keep`` bit is set, moved to the low end in order (the
    rest zero): byte ``i`` of the result is the byte with ``i`` kept bytes below it
    (``rank[b]``, from :func:`_ranks`)."""
    out = Signal(64, name=name)
    for i in range(8):
        picks = [Mux(keep[b] & (rank[b] == i), word.word_select(b, 8), 0) for b in range(i, 8)]
        acc = picks[0]
        for p in picks[1:]:
            acc = acc | p
        m.d.comb += out.word_select(i, 8).eq(acc)
    return out


class ChunkCompressor(wiring.Component):
    """Dense row words in, the compressed stream's words out (``stc``).

    Each input word's non-zero bytes (of its ``count`` valid ones) set 8 bits of the chunk's
    mask and are packed, in order, into a byte packer that pushes whole value words into a
    value queue; at a chunk's end (its 8th word, or the row's last) the packer's remainder is
    pushed zero-padded and the mask goes to a header queue with the chunk's value-word count.
    The output side sends a chunk's mask, then its value words, while the next chunk is
    packed.

    Throughput: one input word per cycle, plus one cycle at a chunk's end when its last word
    leaves more than 8 packed bytes (the remainder is pushed a cycle later); one output word
    per cycle.  Latency: an input word's non-zero bytes and their ranks are found into a
    register stage, packed into a second the cycle after, and merged into the packer the
    cycle after that; a chunk's words leave after its last input word is merged (the mask
    goes first), through an output skid buffer (a cycle).  In the ST unit a chunk takes the
    longer of its input words and its output words (:func:`snpu.verif.timing.stc_cycles`).

    Members
    -------
    i : In(stream(DENSE))
    o : Out(stream(64))
    idle : Out(1)
        Nothing accepted is still inside (the row words taken so far have all left).
    """

    i: In(stream.Signature(DENSE))
    o: Out(stream.Signature(64))
    idle: Out(1)

    def __init__(self):
        self._values = BlockRamFIFO(width=64, depth=18)
        self._headers = SyncFIFOBuffered(width=64 + 4, depth=4)
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.values = values = self._values
        m.submodules.headers = headers = self._headers

        # ---- Packing side.
        word_in_chunk = Signal(3)
        mask = Signal(64)
        value_words = Signal(4)   # value words of the chunk pushed so far
        pend = Signal(56)         # packed bytes not yet a whole word
        pend_n = Signal(3)
        flushing = Signal()       # the chunk's remainder is pushed this cycle

        # Stage 1: the input word's non-zero bytes (of its valid ones) and their ranks into
        # a pipeline register beside the word; stage 2: the bytes packed by their ranks and
        # counted into another (finding the bytes and packing them in one cycle was 8 LUT
        # levels; with the ranks in stage 2 that stage was 8 levels, 98.7 MHz placed).
        m.submodules.found = found = PipeRegister(_FOUND)
        found_nz = _nonzero_bytes(m, self.i.payload.data, self.i.payload.count, "in_nz")
        m.d.comb += [found.i.valid.eq(self.i.valid), self.i.ready.eq(found.i.ready),
                     found.i.payload.nz.eq(found_nz),
                     found.i.payload.rank.eq(Cat(*_ranks(m, found_nz, "in_nz")[1:])),
                     found.i.payload.data.eq(self.i.payload.data),
                     found.i.payload.last.eq(self.i.payload.last)]
        m.submodules.stage = stage = PipeRegister(_STAGED)
        in_nz = found.o.payload.nz
        in_rank = [C(0, 3)] + [found.o.payload.rank[3 * b:3 * b + 3] for b in range(7)]
        in_packed = _compact(m, found.o.payload.data, in_nz, in_rank, "in_packed")
        # (the count from the top byte's rank and flag: four inputs per bit)
        in_count = Signal(4, name="in_nz_count")
        m.d.comb += in_count.eq(in_rank[7] + in_nz[7])
        m.d.comb += [stage.i.valid.eq(found.o.valid), found.o.ready.eq(stage.i.ready),
                     stage.i.payload.nz.eq(in_nz), stage.i.payload.packed.eq(in_packed),
                     stage.i.payload.k.eq(in_count),
                     # (bit j: at least j non-zero bytes, for the packer's decisions)
                     stage.i.payload.k_ge.eq(thermometer(m, in_count, 9, "in_nz_at_least")),
                     stage.i.payload.last.eq(found.o.payload.last)]
        nz, packed, k, last = (stage.o.payload[f] for f in ("nz", "packed", "k", "last"))
        # Stage 2: the packer merges the staged word into the pending bytes.
        merged = Signal(120)
        m.d.comb += merged.eq(pend | (packed << (pend_n * 8)))
        total = Signal(4)
        m.d.comb += total.eq(pend_n + k)
        # total >= 8, total > 8 and total != 0 without the sum: the staged word's counts
        # (k >= j, registered) selected by the pending bytes' count, so the value queue's
        # write enable waits for one multiplexer, not an adder and a comparison
        k_ge = stage.o.payload.k_ge
        fills, spills = Signal(), Signal()
        with m.Switch(pend_n):
            for q in range(8):
                with m.Case(q):
                    m.d.comb += [fills.eq(k_ge[8 - q]), spills.eq(k_ge[9 - q])]
        nonempty = Signal()
        m.d.comb += nonempty.eq((pend_n != 0) | k_ge[1])
        chunk_end = last | (word_in_chunk == 7)
        full_mask = Signal(64)
        m.d.comb += full_mask.eq(mask | (nz << (word_in_chunk * 8)))

        # Room in both queues for what a cycle pushes (a value word and a header at most): a
        # register, from the levels a cycle before, one entry short of full, so no queue's
        # level comparison reaches the packer's decisions.
        room = Signal()
        m.d.sync += room.eq((values.level < values.depth - 1) & (headers.level < headers.depth - 1))
        take = Signal()           # the packer takes the staged word
        m.d.comb += [take.eq(stage.o.valid & ~flushing & room),
                     stage.o.ready.eq(take)]
        with m.If(flushing):
            with m.If(room):
                m.d.comb += [values.w_en.eq(1), values.w_data.eq(pend),
                             headers.w_en.eq(1), headers.w_data.eq(Cat(mask, value_words + 1))]
                m.d.sync += [flushing.eq(0), pend.eq(0), pend_n.eq(0), mask.eq(0),
                             value_words.eq(0)]
        with m.Elif(take):
            m.d.sync += word_in_chunk.eq(Mux(chunk_end, 0, word_in_chunk + 1))
            with m.If(~chunk_end):
                m.d.sync += mask.eq(full_mask)
                with m.If(fills):
                    m.d.comb += [values.w_en.eq(1), values.w_data.eq(merged[:64])]
                    m.d.sync += [pend.eq(merged[64:]), pend_n.eq(total - 8),
                                 value_words.eq(value_words + 1)]
                with m.Else():
                    m.d.sync += [pend.eq(merged[:56]), pend_n.eq(total)]
            with m.Elif(spills):
                # a whole word now, the remainder (zero-padded) and the mask next cycle
                m.d.comb += [values.w_en.eq(1), values.w_data.eq(merged[:64])]
                m.d.sync += [pend.eq(merged[64:]), pend_n.eq(total - 8), mask.eq(full_mask),
                             value_words.eq(value_words + 1), flushing.eq(1)]
            with m.Else():
                m.d.comb += [values.w_en.eq(nonempty), values.w_data.eq(merged[:64]),
                             headers.w_en.eq(1),
                             headers.w_data.eq(Cat(full_mask, value_words + nonempty))]
                m.d.sync += [pend.eq(0), pend_n.eq(0), mask.eq(0), value_words.eq(0)]

        # ---- Output side: a chunk's mask, then its value words, through a skid buffer
        # (`out`): the taker's ready reaches neither queue's read enable.
        m.submodules.out = out = SkidBuffer(64)
        wiring.connect(m, out.o, wiring.flipped(self.o))
        body_left = Signal(4)
        with m.If(body_left == 0):
            m.d.comb += [out.i.valid.eq(headers.r_rdy), out.i.payload.eq(headers.r_data[:64])]
            with m.If(out.i.valid & out.i.ready):
                m.d.comb += headers.r_en.eq(1)
                m.d.sync += body_left.eq(headers.r_data[64:])
        with m.Else():
            m.d.comb += [out.i.valid.eq(values.r_rdy), out.i.payload.eq(values.r_data),
                         values.r_en.eq(out.i.ready)]
            with m.If(out.i.valid & out.i.ready):
                m.d.sync += body_left.eq(body_left - 1)

        m.d.comb += self.idle.eq(~found.o.valid & ~stage.o.valid & (word_in_chunk == 0) &
                                 ~flushing &
                                 (body_left == 0) & ~headers.r_rdy & ~values.r_rdy &
                                 (headers.level == 0) & (values.level == 0) &
                                 ~out.o.valid)
        return m


class ChunkExpander(wiring.Component):
    """The compressed stream's words in, dense row words out (``ldc``).

    Started with the instruction's ``rows`` and ``cols``.  Per chunk: its mask word (one
    cycle), then one dense word per cycle: word ``j`` takes ``popcount(mask byte j)`` bytes
    from a 16-byte window that value words are shifted into as needed, and spreads them to
    the mask's set bits (zeros elsewhere).  Bytes past the row's end are disabled in the
    word's byte enables (their values are consumed and dropped); value words the chunk still
    holds after its last dense word (mask bits past the row's end) are skipped.  Output words
    carry the row's ``last`` flag, as the :class:`~.realign.Realigner`'s do, so the LD unit
    writes them as it writes loaded rows.

    Stream words are registered as they enter, with the popcount of each of their bytes
    (two LUT levels), so the mask's count and the first word's decisions start at registers.

    Throughput: ``1 + ceil(width / 8)`` cycles per chunk of ``width`` values
    (:func:`snpu.verif.timing.ldc_cycles`); one cycle more of latency (the input register).

    Members
    -------
    i : In(stream(64))
    o : Out(stream(WORD))
    start : In(1)
        Begin an instruction of ``rows`` rows of ``cols`` values; not while busy
        (``finished`` low): raise ``clear`` a cycle or more before to abandon one.
    clear : In(1)
        Abandon the instruction in progress (``finished`` rises the cycle after).  ``start``
        then takes no part in the expansion's decisions (they wait for ``busy`` alone, a
        register), so it only loads the registers it sets.
    finished : Out(1)
        Every row has been expanded and the last chunk's words taken (until the next
        ``start``).
    starving : Out(1)
        It cannot go on without another stream word, and holds none (the LD unit's check
        of a stream shorter than its header says).
    """

    i: In(stream.Signature(64))
    o: Out(stream.Signature(WORD))
    start: In(1)
    clear: In(1)
    rows: In(12)
    cols: In(16)
    finished: Out(1)
    starving: Out(1)

    def elaborate(self, platform):
        m = Module()
        rows_left = Signal(12)
        cols = Signal(16)
        left_in_row = Signal(16)  # the row's values not yet expanded
        mask = Signal(64)
        byte = Signal(3)          # the chunk's dense word being made
        value_left = Signal(4)    # value words of the chunk not yet taken
        window = Signal(64)       # packed value bytes taken and not yet used
        window_n = Signal(4)
        head = Signal()           # waiting for a chunk's mask word
        skipping = Signal()       # dropping the chunk's unused value words
        busy = Signal()
        m.d.comb += self.finished.eq(~busy)

        # The input register: a stream word and its bytes' popcounts (`word_*`), taken when
        # empty or when the word in it is used (`word_ready`); emptied by `start`.
        word_valid = Signal()
        word = Signal(64)
        word_ready = Signal()
        word_pc = [Signal(4, name=f"word_pc{k}") for k in range(8)]
        m.d.comb += self.i.ready.eq(~word_valid | word_ready)
        with m.If(self.i.ready):
            m.d.sync += [word_valid.eq(self.i.valid), word.eq(self.i.payload)]
            m.d.sync += [pc.eq(n) for pc, n in zip(word_pc, popcount_bytes(m, self.i.payload))]
        with m.If(self.start):
            m.d.sync += word_valid.eq(0)

        with m.If(self.start):
            m.d.sync += [rows_left.eq(self.rows), cols.eq(self.cols), left_in_row.eq(self.cols),
                         busy.eq((self.rows != 0) & (self.cols != 0)), head.eq(1),
                         skipping.eq(0)]

        # mask word -> the chunk's value words
        count = Signal(7)
        m.d.comb += count.eq(sum_tree(word_pc))
        last_word_of_row = left_in_row <= 8
        chunk_last = last_word_of_row | (byte == 7)

        # The current mask byte and its count, registered (written when the mask arrives and
        # when the byte advances), so the word's decisions start at registers.
        keep = Signal(8)
        need = Signal(4)
        mask_pc = Signal(32)   # the mask's bytes' popcounts, 4 bits each
        # a value word is taken with this dense word (the window holds fewer bytes than it
        # needs, and the chunk has value words left): a register, worked out with `window_n`,
        # `need` and `value_left` as a mask arrives and as a dense word goes, so the word's
        # multiplexers start at registers (skipping a chunk's unused words does not use it,
        # and the next mask sets it again)
        take_word = Signal()
        # the window holds fewer bytes than the dense word needs (window_n < need): a
        # register set wherever the two are, so the output's valid waits for no comparison
        window_short = Signal()
        # The dense word's byte b is the packed byte rank(b) (keep's bits below b) of the
        # window followed by the value word (when one is taken): the window's byte rank(b)
        # when rank(b) < window_n, else the word's byte rank(b) - window_n.  Which of the two,
        # and the byte indices, are registers (`pick_word`, `rank`, `word_byte`), worked out
        # with `keep` and `window_n` (from the next mask byte, `keep_next`, and its ranks),
        # so the word is two multiplexers after its registers, not a shift, an OR and a
        # selection.
        rank = [Signal(3, name=f"rank{b}") for b in range(8)]
        word_byte = [Signal(3, name=f"word_byte{b}") for b in range(8)]
        pick_word = Signal(8)     # byte b comes from the value word (rank(b) >= window_n)
        keep_next = Signal(8)     # the mask's byte after `keep` (the next dense word's)
        # ... and its ranks, registered with it (only the window's fill is compared with
        # them as a dense word goes)
        rank_next = [Signal(3, name=f"rank_next{b}") for b in range(8)]

        def ranks_of(keep_bits):
            return [sum((keep_bits[k] for k in range(b)), Const(0, 3))[:3] for b in range(8)]

        def place(ranks, filled):
            """Loads `rank`, `word_byte` and `pick_word` for a dense word whose mask byte
            has ``ranks``, after a window of ``filled`` bytes."""
            return [*[r.eq(v) for r, v in zip(rank, ranks)],
                    *[w.eq((v - filled)[:3]) for w, v in zip(word_byte, ranks)],
                    pick_word.eq(Cat(*[v >= filled for v in ranks]))]

        def load_next(keep_bits):
            """Loads `keep_next` and its ranks."""
            return [keep_next.eq(keep_bits),
                    *[r.eq(v) for r, v in zip(rank_next, ranks_of(keep_bits))]]

        dense = Signal(64, name="dense")
        for b in range(8):
            m.d.comb += dense.word_select(b, 8).eq(
                Mux(keep[b], Mux(pick_word[b] & take_word, word.word_select(word_byte[b], 8),
                                 window.word_select(rank[b], 8)), 0))
        be = Signal(8)
        m.d.comb += be.eq(Mux(last_word_of_row, (Const(1, 9) << left_in_row[:4]) - 1, 0xFF))
        m.d.comb += [self.o.payload.data.eq(dense), self.o.payload.be.eq(be),
                     self.o.payload.last.eq(last_word_of_row)]

        with m.If(~busy):
            pass  # idle (or starting: not busy then): nothing is taken or given
        with m.Elif(head):
            m.d.comb += word_ready.eq(1)
            with m.If(word_valid):
                # (a mask with a kept value in its first byte has value words)
                m.d.sync += [mask.eq(word), value_left.eq((count + 7) >> 3),
                             byte.eq(0), window.eq(0), window_n.eq(0), head.eq(0),
                             keep.eq(word[:8]), need.eq(word_pc[0]), mask_pc.eq(Cat(*word_pc)),
                             take_word.eq(word_pc[0] != 0), window_short.eq(word_pc[0] != 0),
                             *place(ranks_of(word[:8]), 0), *load_next(word[8:16])]
        with m.Elif(skipping):
            m.d.comb += word_ready.eq(1)
            with m.If(word_valid):
                m.d.sync += value_left.eq(value_left - 1)
                with m.If(value_left == 1):
                    m.d.sync += [skipping.eq(0), head.eq(rows_left != 0),
                                 busy.eq(rows_left != 0)]
        with m.Else():
            # (a value word taken makes enough bytes: the window held fewer than `need` <= 8)
            enough = Mux(take_word, word_valid, ~window_short)
            m.d.comb += [self.o.valid.eq(enough),
                         word_ready.eq(take_word & self.o.ready)]
            with m.If(self.o.valid & self.o.ready):
                # the window after this word's bytes: the rest of the new value word when one
                # is taken (the window then held fewer bytes than needed), else the rest of
                # the window; both shifts start at registers, take_word only selects
                rest_of_word = word >> ((need - window_n)[:4] * 8)
                rest_of_window = window >> (need * 8)
                window_n_after = Signal(4)
                need_after = mask_pc.word_select((byte + 1)[:3], 4)  # (byte 0 after 7)
                short_after = window_n_after < need_after
                value_left_after = Signal(4)
                m.d.comb += [
                    window_n_after.eq(Mux(take_word, window_n + 8 - need, window_n - need)),
                    value_left_after.eq(value_left - take_word)]
                m.d.sync += [window.eq(Mux(take_word, rest_of_word, rest_of_window)[:64]),
                             window_n.eq(window_n_after), value_left.eq(value_left_after),
                             byte.eq(byte + 1), keep.eq(keep_next), need.eq(need_after),
                             *place(rank_next, window_n_after),
                             *load_next(mask.word_select((byte + 2)[:3], 8)),
                             window_short.eq(short_after),
                             take_word.eq(short_after & (value_left_after != 0))]
                with m.If(last_word_of_row):
                    m.d.sync += [left_in_row.eq(cols), rows_left.eq(rows_left - 1)]
                with m.Else():
                    m.d.sync += left_in_row.eq(left_in_row - 8)
                with m.If(chunk_last):
                    rest = value_left - take_word
                    the_end = last_word_of_row & (rows_left == 1)
                    with m.If(rest != 0):
                        m.d.sync += skipping.eq(1)
                    with m.Elif(the_end):
                        m.d.sync += busy.eq(0)
                    with m.Else():
                        m.d.sync += head.eq(1)
        m.d.comb += self.starving.eq(busy & ~word_valid &
                                     (head | skipping | (~head & ~skipping & take_word)))
        with m.If(self.clear):
            m.d.sync += busy.eq(0)
        return m
