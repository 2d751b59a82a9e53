"""Byte fetcher: a byte stream from a 64-bit-wide memory, starting at any byte address."""

from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .layouts import ADDR

WORD_BYTES = 8
RING_BYTES = 16  # two words


class ByteFetcher(wiring.Component):
    """Streams consecutive bytes of a memory whose words are 8 bytes wide.

    Pulse ``start`` with ``start_addr``: everything buffered is dropped and bytes from
    ``start_addr`` on become available.  Each cycle the window ``bytes`` holds the next
    ``avail`` bytes (at most ``window``); the consumer removes ``take <= avail`` of them.
    Words are prefetched into a two-word ring, so a consumer taking up to ``window`` bytes per
    cycle is never starved after the first word.

    ``pair_zero`` says the window's first two bytes are both 0 (meaningful with ``avail >= 2``),
    for a consumer reading a 2-byte count: it is not computed from ``bytes``; ``zero[j]``
    says window byte ``j`` is 0 (for one reading the count a byte at a time).  Likewise
    ``escape[j]`` says window byte ``j`` is 255 (a stride index's escape), from a flag per
    ring byte compared on the ring's registers and selected with the byte.

    ``take`` should be computed from counters (``avail``), not from the window's contents:
    then the only loop through this block is the ring pointer, and the window multiplexers sit
    on forward paths only.

    Latency from ``start`` to the first bytes: 2 cycles.  The memory read port is synchronous
    (data the cycle after the address).

    Parameters
    ----------
    window:
        Bytes visible (and takeable) per cycle, 1..8.
    word_addr_bits:
        Width of the memory's word address.
    """

    def __init__(self, window: int = 2, word_addr_bits: int = ADDR - 3):
        if not 1 <= window <= WORD_BYTES:
            raise ValueError(f"window must be in 1..{WORD_BYTES}, got {window}")
        self._window = window
        super().__init__({
            "start": In(1),
            "start_addr": In(ADDR),
            "bytes": Out(data.ArrayLayout(8, window)),
            "avail": Out(range(window + 1)),
            "pair_zero": Out(1),
            "zero": Out(window),
            "escape": Out(window),
            "take": In(range(window + 1)),
            "mem_addr": Out(word_addr_bits),
            "mem_en": Out(1),
            "mem_data": In(64),
        })

    @property
    def window(self) -> int:
        return self._window

    def elaborate(self, platform):
        m = Module()
        E = self._window
        ring = [Signal(64, name=f"slot{k}") for k in range(2)]
        ring_bytes = [ring[k // 8][8 * (k % 8):8 * (k % 8) + 8] for k in range(RING_BYTES)]
        fill = Signal(range(RING_BYTES + 1))  # valid bytes from the window's first on
        slot = Signal()                      # where the next arriving word goes
        skip = Signal(3)                     # bytes of the next arriving word before the start
        inflight = Signal()
        next_word = Signal(len(self.mem_addr))

        # the ring index of each window byte, a register of its own (idx[0] is the window's
        # first byte, the read pointer; idx[j] = idx[0] + j), so the window's multiplexers
        # start at registers with no adder before them
        idx = [Signal(4, name=f"idx{j}") for j in range(E)]
        rp = idx[0]
        # (an indexed Array, which yosys builds as a tree of 2:1 multiplexers, not a
        # 16-way case: 31 LUTs fewer in a lane's fetcher)
        ring_array = Array(ring_bytes)
        for j in range(E):
            m.d.comb += self.bytes[j].eq(ring_array[idx[j]])
        # pair_zero: the window's first two bytes are both 0, from a zero flag per ring byte
        # (compared on the ring's registers) selected by the read pointer: the comparison is
        # not behind the window's multiplexer
        ring_zero = [Signal(name=f"ring_zero{k}") for k in range(RING_BYTES)]
        m.d.comb += [z.eq(b == 0) for z, b in zip(ring_zero, ring_bytes)]
        pair_zero = Cat(ring_zero[k] & ring_zero[(k + 1) % RING_BYTES] for k in range(RING_BYTES))
        m.d.comb += self.pair_zero.eq(pair_zero.bit_select(rp, 1))
        ring_zero_bits = Cat(ring_zero)
        for j in range(E):
            m.d.comb += self.zero[j].eq(ring_zero_bits.bit_select(idx[j], 1))
        ring_escape = Signal(RING_BYTES)
        m.d.comb += [ring_escape[k].eq(b == 255) for k, b in enumerate(ring_bytes)]
        for j in range(E):
            m.d.comb += self.escape[j].eq(ring_escape.bit_select(idx[j], 1))
        # avail is a register (kept equal to min(window, fill)): consumers decide on it
        # without a path through the fill arithmetic.

        issue = Signal()
        # Prefetch from registered state only (not this cycle's take): no path from the
        # consumer to the memory port.
        m.d.comb += issue.eq(fill + Mux(inflight, WORD_BYTES, 0) <= RING_BYTES - WORD_BYTES)
        m.d.comb += [
            self.mem_en.eq(self.start | issue),
            self.mem_addr.eq(Mux(self.start, self.start_addr[3:], next_word)),
        ]

        # The next fill, avail and ring indices for every take the consumer may choose, from registers;
        # its take only selects among them (no adder or comparison after the consumer's
        # decision).  A take above fill is never chosen (take <= avail <= fill).
        gained = Signal(range(RING_BYTES + 1))   # the arriving word's bytes from the start
        m.d.comb += gained.eq(fill + Mux(inflight, WORD_BYTES - skip, 0))
        fill_next = Signal(range(RING_BYTES + 1))
        avail_next = Signal(range(E + 1))
        idx_next = [Signal(4, name=f"idx_next{j}") for j in range(E)]
        with m.Switch(self.take):
            for k in range(E + 1):
                with m.Case(k):
                    left = (gained - k)[:len(fill_next)]
                    m.d.comb += [fill_next.eq(left), avail_next.eq(Mux(left > E, E, left))]
                    m.d.comb += [idx_next[j].eq(rp + k + j) for j in range(E)]
        with m.If(self.start):
            m.d.sync += [idx[j].eq(self.start_addr[:3] + j) for j in range(E)]
            m.d.sync += [fill.eq(0), self.avail.eq(0), slot.eq(0),
                         inflight.eq(1), skip.eq(self.start_addr[:3]),
                         next_word.eq(self.start_addr[3:] + 1)]
        with m.Else():
            m.d.sync += [idx[j].eq(idx_next[j]) for j in range(E)]
            m.d.sync += [inflight.eq(issue), fill.eq(fill_next),
                         self.avail.eq(avail_next)]
            with m.If(issue):
                m.d.sync += next_word.eq(next_word + 1)
            with m.If(inflight):
                m.d.sync += [ring[0].eq(Mux(slot, ring[0], self.mem_data)),
                             ring[1].eq(Mux(slot, self.mem_data, ring[1])),
                             slot.eq(~slot), skip.eq(0)]
        return m


class ByteShifter(wiring.Component):
    """Streams consecutive bytes of a memory whose words are 8 bytes wide, one per cycle.

    The one-byte-window counterpart of :class:`ByteFetcher`, with its ports (``bytes``,
    ``avail``, ``zero``, ``escape``, ``take``, the memory port; no ``pair_zero``): the
    current word sits in a shift register whose low byte *is* the window, so no byte
    multiplexer follows the registers (a :class:`ByteFetcher` of one byte selects it out of
    a 16-byte ring: about 80 LUTs).  Each bit of the shift register is one LUT: the next
    word's bit when the register reloads, the bit a byte above when a byte is taken.

    A word read from the memory lands in a second register (``nxt``) and moves into the shift
    register as its last byte is taken (no bubble), or as soon as it arrives when the shift
    register is empty.  The next word is read as soon as ``nxt`` is free, from registers
    only.  Bytes before ``start_addr`` in its word are shifted out one per cycle before the
    first byte is shown (none for an aligned start).

    Latency from ``start`` to the first byte: 3 cycles, plus ``start_addr % 8``.
    Throughput: one byte per cycle.

    Parameters
    ----------
    word_addr_bits:
        Width of the memory's word address.
    """

    def __init__(self, word_addr_bits: int = ADDR - 3):
        super().__init__({
            "start": In(1),
            "start_addr": In(ADDR),
            "bytes": Out(data.ArrayLayout(8, 1)),
            "avail": Out(range(2)),
            "zero": Out(1),
            "escape": Out(1),
            "take": In(range(2)),
            "mem_addr": Out(word_addr_bits),
            "mem_en": Out(1),
            "mem_data": In(64),
        })

    @property
    def window(self) -> int:
        return 1

    def elaborate(self, platform):
        m = Module()
        cur = Signal(64)                       # the current word, its next byte lowest
        cur_n = Signal(range(WORD_BYTES + 1))  # bytes left in it
        nxt = Signal(64, reset_less=True)      # the word read ahead (nxt_valid says so)
        nxt_valid, inflight = Signal(), Signal()
        skip = Signal(3)                       # bytes still to drop before the first shown
        next_word = Signal(len(self.mem_addr))

        shown = Signal()   # a byte is in the window
        m.d.comb += shown.eq((cur_n != 0) & (skip == 0))
        head = cur[:8]
        m.d.comb += [self.bytes[0].eq(head), self.avail.eq(shown),
                     self.zero.eq(head == 0), self.escape.eq(head == 255)]
        # a byte leaves: taken, or dropped before the start address
        shift = Signal()
        m.d.comb += shift.eq(Mux(skip != 0, cur_n != 0, self.take[0]))
        last = Signal()    # the shift register's last byte leaves
        m.d.comb += last.eq(shift & (cur_n == 1))
        load = Signal()    # the read-ahead word moves into the shift register
        m.d.comb += load.eq(nxt_valid & ((cur_n == 0) | last))

        issue = Signal()   # read the next word (registers only)
        m.d.comb += issue.eq(~inflight & ~nxt_valid)
        m.d.comb += [self.mem_en.eq(self.start | issue),
                     self.mem_addr.eq(Mux(self.start, self.start_addr[3:], next_word))]

        with m.If(self.start):
            m.d.sync += [cur_n.eq(0), nxt_valid.eq(0), inflight.eq(1),
                         skip.eq(self.start_addr[:3]), next_word.eq(self.start_addr[3:] + 1)]
        with m.Else():
            m.d.sync += inflight.eq(issue)
            with m.If(issue):
                m.d.sync += next_word.eq(next_word + 1)
            with m.If(load):
                m.d.sync += [cur.eq(nxt), cur_n.eq(WORD_BYTES)]
            with m.Elif(shift):
                m.d.sync += [cur.eq(cur[8:]), cur_n.eq(cur_n - 1)]
            with m.If(shift & (skip != 0)):
                m.d.sync += skip.eq(skip - 1)
            # (a word arrives only into a free nxt: it is read only when nxt is free)
            with m.If(inflight):
                m.d.sync += [nxt.eq(self.mem_data), nxt_valid.eq(1)]
            with m.Elif(load):
                m.d.sync += nxt_valid.eq(0)
        return m
