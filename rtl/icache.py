"""Instruction cache: direct-mapped lines of instruction words in block RAM, filled over AXI.

The specification is :class:`snpu.verif.sequencer.InstructionCache`: every word the
sequencer asks for is one access, a hit when its line is present, else a miss that fills
the line; after each access the next line of the ROM is prefetched if it is not present.
The hit / miss / prefetch counts equal the golden model's.
"""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from snpu.verif.sequencer import LINE_WORDS

from .axi import RESP_OKAY
from .microcode import PC_BITS
from .predecode import PREDECODED, Predecoder
from .target import NO_RW_CHECK, checked_read

#: a word as the cache delivers it, with its predecoded part (computed as the line fills)
FETCHED = data.StructLayout({"word": 128, "pc": PC_BITS, "error": 1, "pre": PREDECODED})
#: a request: the ROM word
FETCH_REQ = data.StructLayout({"pc": PC_BITS})
BEATS_PER_LINE = LINE_WORDS * 2
FILL_SLOTS = 2


class InstructionCache(wiring.Component):
    """Direct-mapped instruction cache of ``lines`` lines of :data:`LINE_WORDS` words.

    ``req`` takes the ROM word index of the next word the sequencer needs, from registers
    (the dispatcher holds it in one, and keeps it there until that word has come out on
    ``resp``).  It is taken whenever the cache holds no access, so ``req.ready`` comes
    from registers, and its line is looked up against the tags as it is taken (the tag RAM
    read the cycle before, at the index of the word read from block RAM then, which is the
    request's): if the line
    is present and filled, the word (read from block RAM the cycle before, see below) comes
    out on ``resp`` the next cycle; otherwise it comes out once its line has arrived.  Each
    request is one access, classified against the tags the cycle after it is taken, from
    the lookup's registered results: a miss writes the line's tag and queues its fill; if
    the next line of the ROM is not present, its tag is written and its fill queued (the
    prefetch: decided as a hit is classified, the cycle after a miss's).  The next request
    waits for those decisions, which the dispatcher's two cycles per word leave time for
    on hits.  Fills are 8-beat AXI bursts at ``rom_base + 64 * line`` (``rom_base`` is a
    multiple of 64: a line never crosses a 4 KiB boundary), at most :data:`FILL_SLOTS`
    queued or in flight, answered in order.  An access or prefetch that needs a slot while
    none is free, or that would rewrite the tag of a line still being filled, waits (an
    access is looked up again).  A beat answered with an AXI error marks its word
    (``error``: the dispatcher faults with ``FETCH`` if it reaches the word).  ``idle`` is
    low while fills are queued or in flight or an access or prefetch is still to be
    decided: the core does not finish before they have.  Each word is stored with its
    :class:`~.predecode.Predecoder` result (``resp.payload.pre``), computed as it arrives.

    Members
    -------
    start, rom_base, rom_words : In
        Begin a program: every line becomes invalid.  Lines at or past ``rom_words`` are
        never prefetched (``rom_words`` is taken into a register: it must hold its value
        from the cycle after ``start`` on; the core sets it with ``start``).
    req : In(stream(FETCH_REQ))
    next_pc : In
        While ``resp`` holds a word: the address ``req`` carries from the next cycle on if
        that word is taken now (the dispatcher's successor address).
    next_line : In
        The line after ``next_pc``'s (``next_pc // LINE_WORDS + 1``; the dispatcher makes
        it from sums in parallel with its choice of ``next_pc``, so no adder follows it).
    next_load : In
        ``next_pc`` is the next request (the dispatcher's word goes now, or it starts): the
        cache registers ``next_line`` for the next access's prefetch decision.
    resp : Out(stream(FETCHED))
    ar*, r* :
        AXI read channels (``arid`` chosen by the core's arbiter).
    idle : Out(1)
    hits, misses, prefetches : Out(32)
        Accesses so far, each counted the cycle after it is classified (a prefetch the
        cycle after it is decided).
    """

    def __init__(self, lines: int):
        if lines < 4 or lines & (lines - 1):
            raise ValueError(f"icache lines={lines} must be a power of two >= 4")
        self._lines = lines
        self._index_bits = (lines - 1).bit_length()
        self._tag_bits = PC_BITS - (LINE_WORDS - 1).bit_length() - self._index_bits
        self._data = Memory(shape=129 + PREDECODED.size, depth=lines * LINE_WORDS, init=[],
                            attrs=NO_RW_CHECK)
        # the tags in banks of 16 lines (an ECP5 LUT RAM's depth): a lookup compares every
        # bank's entry with the tag and then selects the bank's result, one bit, instead of
        # selecting a tag and comparing it
        self._bank_lines = min(16, lines)
        self._tags = [Memory(shape=self._tag_bits, depth=self._bank_lines, init=[])
                      for _ in range(lines // self._bank_lines)]
        super().__init__({
            "start": In(1), "rom_base": In(32), "rom_words": In(PC_BITS + 1),
            "req": In(stream.Signature(FETCH_REQ)),
            "next_pc": In(PC_BITS), "next_line": In(PC_BITS - (LINE_WORDS - 1).bit_length()),
            "next_load": In(1),
            "resp": Out(stream.Signature(FETCHED)),
            "arvalid": Out(1), "arready": In(1), "araddr": Out(32), "arlen": Out(8),
            "rvalid": In(1), "rready": Out(1), "rdata": In(64), "rresp": In(2), "rlast": In(1),
            "idle": Out(1),
            "hits": Out(32), "misses": Out(32), "prefetches": Out(32),
        })

    @property
    def lines(self) -> int:
        return self._lines

    def elaborate(self, platform):
        m = Module()
        L, IB = self._lines, self._index_bits
        W = (LINE_WORDS - 1).bit_length()
        LB = PC_BITS - W  # line number bits
        m.submodules.data = mem = self._data
        for k, bank in enumerate(self._tags):
            m.submodules[f"tags{k}"] = bank
        BL = (self._bank_lines - 1).bit_length()  # index bits inside a bank
        valid = Signal(L)   # tag written: the line is present or being filled
        ready = Signal(L)   # all the line's words have arrived

        # Fill slots, a queue in request order: [head] is the oldest.  A slot is queued
        # (waiting for AR) or requested (beats due).
        slot_v = Signal(FILL_SLOTS)
        slot_ar = Signal(FILL_SLOTS)  # AR done
        slot_line = Array(Signal(LB, name=f"slot_line{k}") for k in range(FILL_SLOTS))
        count = Signal(range(FILL_SLOTS + 1))
        m.d.comb += count.eq(sum(slot_v[k] for k in range(FILL_SLOTS)))
        push = Signal()                 # a new slot, queued the cycle after its lookup
        push_line = Signal(LB)
        cls = Signal()              # an access looked up last cycle: classified now
        pcheck = Signal()           # a missed access's prefetch (or one waiting for a slot)
        # (no fill queued or in flight, nor an access or prefetch still to be decided)
        m.d.comb += self.idle.eq((count == 0) & ~push & ~cls & ~pcheck)

        def filling(idx):
            return Cat(*[slot_v[k] & (slot_line[k][:IB] == idx) for k in range(FILL_SLOTS)]).any()

        # ---- Taking a request: from registers alone.  A request is taken whenever the
        # cache holds no access (no word on resp, none waiting for its line, none held back,
        # none to classify, no prefetch to decide), so `req.ready` never waits for a tag
        # lookup.  What the lookup finds is registered: in the cycle the request is taken it
        # decides only whether the word goes out next cycle (a ready hit); the cycle after,
        # the access is classified from those registers (`cls`).
        cur = Signal(PC_BITS)       # the pc of the access in progress (the one resp gives)
        read = Signal()             # resp holds a word (from the last read on)
        waiting = Signal()          # an access whose line is not ready yet
        retry = Signal()            # an access held back (its line's fill needs a free slot
                                    # or the set is being filled): looked up again
        accept = Signal()
        m.d.comb += [accept.eq(self.req.valid & ~read & ~waiting & ~retry & ~cls & ~pcheck),
                     self.req.ready.eq(accept)]
        doing = Signal()            # an access is looked up and classified this cycle
        m.d.comb += doing.eq(accept | retry)
        present_r, ready_r = Signal(), Signal()   # the lookup's results, for `cls`

        NB = len(self._tags)
        bank_bits = IB - BL

        def bank_entries(lo, name):
            """Every bank's tag at index ``lo`` inside the bank (LUT RAM reads)."""
            entries = []
            for k, bank in enumerate(self._tags):
                port = bank.read_port(domain="comb")
                entry = Signal(self._tag_bits, name=f"{name}_tag{k}")
                m.d.comb += [port.addr.eq(lo), entry.eq(port.data)]
                entries.append(entry)
            return entries

        def in_bank(bits, lo):
            """``bits`` (one per line) at index ``lo`` of every bank."""
            return Cat(*[bits[k * self._bank_lines:(k + 1) * self._bank_lines].bit_select(lo, 1)
                         for k in range(NB)])

        def bank_of(ln):
            return ln[BL:IB] if bank_bits else C(0, 1)

        def pushed_at(idx):
            """The slot queued this cycle is at index ``idx``: its tag and valid bit are
            written at the end of the cycle, so a lookup now must take them from `push_line`."""
            return push & (push_line[:IB] == idx)

        # ---- The access's line: present (tag written) and ready (filled)?  Looked up in
        # two halves.  The cycle before a request is taken, the cache reads the word that
        # request will ask for (`rd_addr`, below): the request's pc then is `rd_addr`'s (the
        # dispatcher's successor, taken in the cycle it is named, or the held request, or the
        # access in progress), so its index inside a bank is known a cycle early.  Every
        # bank's tag there (a tag written now bypassed) goes into a register, and the index
        # too; in the cycle the request is taken, every bank's valid and ready bits at that
        # registered index are selected (from registers: they are then as they were after
        # the cycle before), the tags compared with the request's and its bank selected (no
        # LUT RAM read and no 64-way selection on the path to `read`).
        addr = self.req.payload.pc
        line = Signal(LB)
        m.d.comb += line.eq(addr[W:])
        index = line[:IB]
        ahead_lo = Signal(BL)              # the next cycle's request's index inside a bank
        ahead_lo_r = Signal(BL)            # ... registered: the request's, as it is taken
        ahead_tags = [Signal(self._tag_bits, name=f"ahead_tag{k}") for k in range(NB)]
        ahead_entries = bank_entries(ahead_lo, "ahead")
        for k in range(NB):
            m.d.sync += ahead_tags[k].eq(Mux(pushed_at(Cat(ahead_lo, C(k, bank_bits))),
                                             push_line[IB:], ahead_entries[k]))
        m.d.sync += ahead_lo_r.eq(ahead_lo)
        ahead_valid, ahead_ready = Signal(NB), Signal(NB)
        m.d.comb += [ahead_valid.eq(in_bank(valid, ahead_lo_r)),
                     ahead_ready.eq(in_bank(ready, ahead_lo_r))]
        present = Signal()
        line_ready = Signal()
        tag_hits = Cat(*[t == line[IB:] for t in ahead_tags]) & ahead_valid
        m.d.comb += [present.eq(Mux(pushed_at(index), push_line[IB:] == line[IB:],
                                    tag_hits.bit_select(bank_of(line), 1))),
                     line_ready.eq(ahead_ready.bit_select(bank_of(line), 1) & ~pushed_at(index))]
        # a miss needs a free slot and must not rewrite the tag of a line still being filled
        # (decided as the access is classified, from registers; `cur` holds its pc)
        room1 = Signal()            # a register: see below, after the fill slots
        cur_index = cur[W:W + IB]
        held = Signal()
        m.d.comb += held.eq(~present_r & (filling(cur_index) | pushed_at(cur_index) | ~room1))

        # ---- The next line (the prefetch), decided as a hit is classified (for a miss the
        # cycle after, `pcheck`) from registers: its lookup is made as the access's is, into
        # registers (with the tag written at the end of that cycle bypassed), and it is
        # asked for if absent and inside the ROM (against rom_words, which is constant while
        # a program runs).
        # `nxt` is the line after the next request's, registered as that request is made
        # (`next_load`); the prefetch's own line is kept (`pf_line`), since the dispatcher
        # may ask for the next word while a prefetch waits for a slot.
        nxt = Signal(LB)
        with m.If(self.next_load):
            m.d.sync += nxt.eq(self.next_line)
        pf_line = Signal(LB)
        look_next = Signal(LB)
        m.d.comb += look_next.eq(Mux(pcheck, pf_line, nxt))
        # (also in two halves: every bank's tag compared, and the bits and the bypass of a
        # tag written now, into registers; the bank selected the cycle after, as it is used)
        next_hits, next_bank = Signal(NB), Signal(max(bank_bits, 1))
        next_pushed, next_pushed_same = Signal(), Signal()
        next_entries = bank_entries(look_next[:BL], "next")
        m.d.sync += [next_hits.eq(Cat(*[e == look_next[IB:] for e in next_entries])
                                  & in_bank(valid, look_next[:BL])),
                     next_bank.eq(bank_of(look_next)),
                     next_pushed.eq(pushed_at(look_next[:IB])),
                     next_pushed_same.eq(push_line[IB:] == look_next[IB:])]
        next_present = Signal()
        m.d.comb += next_present.eq(Mux(next_pushed, next_pushed_same,
                                        next_hits.bit_select(next_bank, 1)))
        next_in_rom = Signal()
        m.d.sync += next_in_rom.eq(Cat(C(0, W), look_next) < self.rom_words)
        want_next = Signal()
        m.d.comb += want_next.eq(~next_present & next_in_rom)
        # a prefetch waits for a slot, and for a fill of its set to finish
        pf_held = Signal()
        m.d.comb += pf_held.eq(filling(pf_line[:IB]) | pushed_at(pf_line[:IB])
                               | (count + push >= FILL_SLOTS))

        # ---- Classification, tag writes and fill slots (at most one new slot per cycle: a
        # hit's prefetch, or a miss and the cycle after it, its prefetch).
        tag_writes = [bank.write_port() for bank in self._tags]
        new = Signal()
        # the access's class, counted a cycle later (the counters' adders stay off the
        # lookup's path)
        hit, missed, prefetched = Signal(), Signal(), Signal()
        counted = Signal(3)
        m.d.sync += counted.eq(Cat(hit, missed, prefetched))
        m.d.sync += [self.hits.eq(self.hits + counted[0]), self.misses.eq(self.misses + counted[1]),
                     self.prefetches.eq(self.prefetches + counted[2])]
        new_line = Signal(LB)
        miss_new = Signal()         # the new slot is a classified miss's
        m.d.comb += new_line.eq(Mux(miss_new, cur[W:], pf_line))
        hit_now = Signal()          # the word can be read at once (a hit on a ready line)
        m.d.comb += hit_now.eq(doing & present & line_ready)
        with m.If(doing):
            m.d.sync += [cls.eq(1), retry.eq(0), present_r.eq(present), ready_r.eq(line_ready),
                         pf_line.eq(nxt)]
        with m.If(cls):
            m.d.sync += cls.eq(0)
            with m.If(held):
                m.d.sync += retry.eq(1)
            with m.Elif(~present_r):
                m.d.comb += [new.eq(1), miss_new.eq(1), missed.eq(1)]
                m.d.sync += pcheck.eq(1)
            with m.Else():
                m.d.comb += hit.eq(1)
                with m.If(want_next & ~pf_held):
                    m.d.comb += [new.eq(1), prefetched.eq(1)]
                with m.Elif(want_next):
                    m.d.sync += pcheck.eq(1)
        with m.If(pcheck):
            with m.If(~want_next):
                m.d.sync += pcheck.eq(0)
            with m.Elif(~pf_held):
                m.d.comb += [new.eq(1), prefetched.eq(1)]
                m.d.sync += pcheck.eq(0)
        # The tag is written, and the new slot queued, the cycle after (from registers: the
        # lookup reaches neither the tag RAM's write enable nor the slots); a lookup in that
        # cycle takes them from `push_line` (`pushed_at`).
        for k, tw in enumerate(tag_writes):
            m.d.sync += [tw.addr.eq(new_line[:BL]), tw.data.eq(new_line[IB:]),
                         tw.en.eq(new & (new_line[BL:IB] == k))]
        m.d.sync += [push.eq(new), push_line.eq(new_line)]

        # ---- Reading the word: at once on a ready hit, else when its line is ready.  The
        # block RAM is read a cycle before the word is taken, and the word taken into a
        # register (`out`, what resp gives): no path runs from the block RAM's output into
        # the dispatcher.  What is read is the word a request may take next cycle, from
        # registers and the dispatcher's successor address: while resp holds a word, its
        # successor (`next_pc`: the request of the next cycle if the word goes now);
        # while an access waits or is held back, its word; else the request's word.  (A
        # line is ready the cycle after its last word is written, so a word read the cycle
        # before may be the one written then: that write is bypassed.)
        rp = mem.read_port()
        rd_addr = Signal(W + IB)
        m.d.comb += [rd_addr.eq(Mux(read, self.next_pc[:W + IB],
                                    Mux(waiting | retry | cls, cur[:W + IB],
                                        self.req.payload.pc[:W + IB]))),
                     rp.addr.eq(rd_addr), rp.en.eq(1), ahead_lo.eq(rd_addr[W:W + BL])]
        rd_word = Signal(len(rp.data))     # the word read last cycle
        out = Signal(len(rp.data), reset_less=True)   # (its valid flag is `read`)
        # (a missed line's ready bit is cleared as its slot is queued, a cycle after the
        # lookup: until then it is the evicted line's)
        late = (waiting & ready.bit_select(cur[W:W + IB], 1)
                & ~(push & (push_line[:IB] == cur[W:W + IB])))
        # `cur` and `out` are loaded while they hold nothing the core uses, not only as an
        # access is taken or a word arrives: `accept` does not fan out to their enables
        with m.If(~read & ~waiting & ~retry & ~cls):
            m.d.sync += cur.eq(self.req.payload.pc)
        with m.If(~read):
            m.d.sync += out.eq(rd_word)
        with m.If(cls & ~held & ~(present_r & ready_r)):
            m.d.sync += waiting.eq(1)
        with m.Elif(late):
            m.d.sync += waiting.eq(0)
        with m.If(hit_now | late):
            m.d.sync += read.eq(1)
        with m.Elif(self.resp.ready):
            m.d.sync += read.eq(0)
        m.d.comb += [self.resp.valid.eq(read),
                     self.resp.payload.word.eq(out[:128]),
                     self.resp.payload.error.eq(out[128]),
                     self.resp.payload.pre.eq(out[129:]),
                     self.resp.payload.pc.eq(cur)]

        # ---- Fills: AR for the oldest queued slot, R beats into the oldest requested one.
        # slots are kept in order: slot 0 is the oldest; a new one goes after the others
        ar_slot = Signal(range(FILL_SLOTS))
        has_ar = Signal()
        for k in reversed(range(FILL_SLOTS)):
            with m.If(slot_v[k] & ~slot_ar[k]):
                m.d.comb += [ar_slot.eq(k), has_ar.eq(1)]
        m.d.comb += [self.arvalid.eq(has_ar),
                     self.araddr.eq(self.rom_base + (slot_line[ar_slot] << (W + 4))),
                     self.arlen.eq(BEATS_PER_LINE - 1)]
        # A word's two beats are registered (`low`, `high`); the cycle after its second
        # beat it is copied into a register (`word`) while the predecoder's first half
        # registers its checks, the cycle after that the word and the predecoder's result
        # go into the write registers (no bus input feeds the predecoder, and it feeds no
        # block RAM input; each half is about 5 LUT levels deep), it is written the cycle
        # after, and the line is ready the cycle after its last word is written.
        beat = Signal(range(BEATS_PER_LINE))
        # (these data registers, like `out` above, are not reset with the core's `start`,
        # only their valid flags are: a reset would fan `start` out to hundreds more
        # flip-flops, and a flip-flop with a reset packs only beside one with the same)
        low, high = Signal(64, reset_less=True), Signal(64, reset_less=True)
        low_err, word_err = Signal(), Signal()
        w_pend = Signal()                  # `low`, `high` hold a word to write now
        w_addr = Signal(W + IB)
        wp = mem.write_port()
        word, word_addr, word_pend = Signal(128, reset_less=True), Signal(W + IB), Signal()
        w_data = Signal(len(wp.data), reset_less=True)
        m.d.comb += wp.data.eq(w_data)
        word_bad = Signal()
        m.d.sync += [word.eq(Cat(low, high)), word_bad.eq(word_err), word_addr.eq(w_addr),
                     word_pend.eq(w_pend)]
        m.submodules.predecode = pre = Predecoder(latency=1)
        m.d.comb += pre.word.eq(Cat(low, high))   # (its result comes out as `word` holds it)
        m.d.sync += [wp.addr.eq(word_addr), w_data.eq(Cat(word, word_bad, pre.out)),
                     wp.en.eq(word_pend)]
        # the word read, with a write to the address read in the same cycle bypassed.  The
        # addresses are compared the cycle after, from registered copies, beside the block
        # RAM's clock-to-output: the dispatcher's successor reaches no comparator.
        bypass = Signal()
        written = Signal.like(wp.data, reset_less=True)
        rd_addr_r, wr_addr_r, wr_en_r = Signal.like(rd_addr), Signal.like(wp.addr), Signal()
        m.d.sync += [rd_addr_r.eq(rd_addr), wr_addr_r.eq(wp.addr), wr_en_r.eq(wp.en),
                     written.eq(w_data)]
        m.d.comb += [bypass.eq(wr_en_r & (wr_addr_r == rd_addr_r)),
                     rd_word.eq(Mux(bypass, written, checked_read(m, platform, rp, [wp], "rd")))]
        done = Signal()  # the oldest slot's last beat
        m.d.comb += self.rready.eq(slot_v[0] & slot_ar[0])
        err = self.rresp != RESP_OKAY
        m.d.sync += w_pend.eq(0)
        with m.If(self.rvalid & self.rready):
            m.d.sync += beat.eq(beat + 1)
            with m.If(~beat[0]):
                m.d.sync += [low.eq(self.rdata), low_err.eq(err)]
            with m.Else():
                m.d.sync += [high.eq(self.rdata), word_err.eq(low_err | err), w_pend.eq(1),
                             w_addr.eq(Cat(beat[1:], slot_line[0][:IB]))]
            with m.If(beat == BEATS_PER_LINE - 1):
                m.d.comb += done.eq(1)
        # slot bookkeeping: pop the oldest when done, push the new one at the end
        after_pop_v = Mux(done, slot_v >> 1, slot_v)
        after_pop_ar = Mux(done, slot_ar >> 1, slot_ar)
        ar_done = Signal(FILL_SLOTS)
        with m.If(self.arvalid & self.arready):
            m.d.comb += ar_done.eq(1 << ar_slot)
        ar_after = Mux(done, ar_done >> 1, ar_done)
        n_after = Signal(range(FILL_SLOTS + 1))
        m.d.comb += n_after.eq(count - done)
        m.d.sync += [slot_v.eq(after_pop_v | Mux(push, 1 << n_after, 0)),
                     slot_ar.eq(after_pop_ar | ar_after)]
        with m.If(done):
            for k in range(FILL_SLOTS - 1):
                m.d.sync += slot_line[k].eq(slot_line[k + 1])
        # the new line's valid and ready bits, decoded from `push_line`
        sel = Signal(L)
        m.d.comb += sel.eq(Const(1, L) << push_line[:IB])
        # a filled line's index on its way to `ready`, a stage per cycle: its last beat
        # arrived, its last word is in the predecoder's input register, its last word was
        # written (each a valid bit and the index; a line queued again meanwhile at the
        # same index is not ready)
        fill_v = Signal(3)
        fill_idx = [Signal(IB, name=f"fill_idx{k}") for k in range(3)]
        m.d.sync += [fill_v[0].eq(done), fill_idx[0].eq(slot_line[0][:IB])]
        for k in (1, 2):
            m.d.sync += [fill_v[k].eq(fill_v[k - 1] & ~pushed_at(fill_idx[k - 1])),
                         fill_idx[k].eq(fill_idx[k - 1])]
        fill_done = Signal(L)   # the line whose last word was written, decoded
        m.d.comb += fill_done.eq(Mux(fill_v[2], Const(1, L) << fill_idx[2], 0))
        with m.If(push):
            m.d.sync += slot_line[n_after].eq(push_line)
        valid_after, ready_after = Signal(L), Signal(L)   # valid, ready after this cycle
        m.d.comb += [valid_after.eq(valid | Mux(push, sel, 0)),
                     ready_after.eq((ready | fill_done) & ~Mux(push, sel, 0))]
        m.d.sync += [valid.eq(valid_after), ready.eq(ready_after)]

        # a free slot next cycle: the slots then, and the one queued then (a slot
        # decided now)
        count_next = Signal(range(FILL_SLOTS + 2))
        m.d.comb += count_next.eq(count + push - done)
        m.d.sync += room1.eq(Mux(new, count_next < FILL_SLOTS - 1, count_next < FILL_SLOTS))

        with m.If(self.start):
            m.d.sync += [valid.eq(0), ready.eq(0),
                         waiting.eq(0), read.eq(0), retry.eq(0),
                         cls.eq(0), pcheck.eq(0), room1.eq(1),
                         fill_v.eq(0), counted.eq(0), push.eq(0),
                         self.hits.eq(0), self.misses.eq(0), self.prefetches.eq(0)]
        return m
