"""AXI4 memory-mapped interface definitions (the subset the core uses).

Signal names follow the AXI4 specification in lower case; in Verilog a member ``axi`` of a
component becomes ports ``axi__arvalid`` etc. (cocotbext-axi: ``AxiBus.from_prefix(dut,
"axi_")``).  The core is a master with ``CoreConfig.axi_data_bits`` of data (64 by default;
128 or 256), 32-bit addresses, INCR bursts of at most 16 beats that never cross a 4 KiB
boundary, and one ID bit per direction (``arid``: 0 for instruction fetch, 1 for data
loads).  On a bus wider than 64 bits the LD unit's bursts use the full width and the
instruction fetch and the ST unit make *narrow* bursts of 8-byte beats (``arsize`` /
``awsize`` 3: each beat on the byte lanes of its address), as AXI4 allows.
"""

from amaranth import Cat, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

ADDR_BITS = 32
DATA_BITS = 64  #: the default data width
DATA_WIDTHS = (64, 128, 256)  #: the data widths the core supports
ID_BITS = 1
MAX_BURST = 16  #: beats per burst
BOUNDARY = 4096  #: bursts never cross a multiple of this

RESP_OKAY, RESP_EXOKAY, RESP_SLVERR, RESP_DECERR = 0, 1, 2, 3

PAGE_BITS = (BOUNDARY - 1).bit_length()    #: address bits inside a 4 KiB page
BURST_BITS = (MAX_BURST - 1).bit_length()  #: bits of a beat's index inside a burst


def burst_limit(m: Module, addr: Value, beat_log2: int) -> Signal:
    """Beats a burst starting at the beat-aligned ``addr`` may have: ``MAX_BURST``, or fewer
    when the 4 KiB boundary is nearer.  It is nearer only in the page's last ``MAX_BURST``
    beats (the offset's bits above a burst's worth all ones), so no subtraction of the whole
    page offset is needed."""
    beat = addr[beat_log2:beat_log2 + BURST_BITS]
    near_end = addr[beat_log2 + BURST_BITS:PAGE_BITS].all() & (beat != 0)
    limit = Signal(range(MAX_BURST + 1))
    m.d.comb += limit.eq(Mux(near_end, MAX_BURST - beat, MAX_BURST))
    return limit


def burst_limit_after_full(m: Module, addr: Value, beat_log2: int) -> Signal:
    """:func:`burst_limit` at the address after a burst of ``burst_limit(addr)`` beats from
    the beat-aligned ``addr``, from ``addr``'s bits alone (no sum): the next page's first
    beat when that burst ends the page, else ``addr + MAX_BURST`` beats, which is in its
    page's last ``MAX_BURST`` beats when ``addr``'s burst index is the page's last but one."""
    beat = addr[beat_log2:beat_log2 + BURST_BITS]
    group = addr[beat_log2 + BURST_BITS:PAGE_BITS]
    ends_page = group.all() & (beat != 0)
    next_near_end = (group == (1 << len(group)) - 2) & (beat != 0)
    limit = Signal(range(MAX_BURST + 1))
    m.d.comb += limit.eq(Mux(next_near_end & ~ends_page, MAX_BURST - beat, MAX_BURST))
    return limit


def burst_size(m: Module, beats_left: Value, limit: Value) -> tuple[Signal, Signal]:
    """``(min(beats_left, limit), beats_left <= limit)``: the next burst's beats, and whether
    it is the last, from comparisons of ``limit``'s width (``limit <= MAX_BURST``)."""
    few = beats_left[BURST_BITS + 1:] == 0
    burst, last = Signal(range(MAX_BURST + 1)), Signal()
    m.d.comb += [burst.eq(Mux(few & (beats_left[:BURST_BITS + 1] < limit), beats_left, limit)),
                 last.eq(few & (beats_left[:BURST_BITS + 1] <= limit))]
    return burst, last


def burst_last_beat(m: Module, addr: Value, beat_log2: int) -> Signal:
    """``burst_limit(addr) - 1`` (a burst's ``arlen`` when it is full), without the
    subtraction: ``MAX_BURST - 1 - beat`` is the beat index's complement in the page's last
    ``MAX_BURST`` beats, else ``MAX_BURST - 1`` (which is also the complement of beat 0)."""
    beat = addr[beat_log2:beat_log2 + BURST_BITS]
    last = Signal(BURST_BITS)
    m.d.comb += last.eq(Mux(addr[beat_log2 + BURST_BITS:PAGE_BITS].all(), ~beat, MAX_BURST - 1))
    return last


def burst_last_beat_after_full(m: Module, addr: Value, beat_log2: int) -> Signal:
    """``burst_limit_after_full(addr) - 1``: the address after a full burst from ``addr`` is
    in its page's last ``MAX_BURST`` beats (at the same beat index) exactly when ``addr``'s
    burst index is the page's last but one; a burst that ends the page is followed by the
    next page's beat 0."""
    beat = addr[beat_log2:beat_log2 + BURST_BITS]
    group = addr[beat_log2 + BURST_BITS:PAGE_BITS]
    last = Signal(BURST_BITS)
    m.d.comb += last.eq(Mux(group == (1 << len(group)) - 2, ~beat, MAX_BURST - 1))
    return last


def burst_len(m: Module, left_m1: Value, last_beat: Value) -> tuple[Signal, Signal]:
    """``(min(left_m1, last_beat), left_m1 <= last_beat)``: the next burst's ``arlen`` and
    whether it is the request's last, from the beats left minus one and
    :func:`burst_last_beat`'s value: comparisons of ``BURST_BITS`` bits, no adder."""
    few = left_m1[BURST_BITS:] == 0
    arlen, last = Signal(BURST_BITS), Signal()
    m.d.comb += [arlen.eq(Mux(few & (left_m1[:BURST_BITS] < last_beat), left_m1, last_beat)),
                 last.eq(few & (left_m1[:BURST_BITS] <= last_beat))]
    return arlen, last


def next_burst_address(m: Module, addr: Value, burst: Value, beat_log2: int) -> Signal:
    """``addr + burst`` beats, for a burst that does not cross the 4 KiB boundary: the page
    offset's sum, and the page number incremented (in parallel) when the burst ends exactly
    at the boundary."""
    in_page = Signal(PAGE_BITS + 1)
    m.d.comb += in_page.eq(addr[:PAGE_BITS] + (burst << beat_log2))
    page_next = Signal(len(addr) - PAGE_BITS)
    m.d.comb += page_next.eq(addr[PAGE_BITS:] + 1)
    out = Signal(len(addr))
    m.d.comb += out.eq(Cat(in_page[:PAGE_BITS], Mux(in_page[PAGE_BITS], page_next,
                                                    addr[PAGE_BITS:])))
    return out


def beats_spanned(addr: Value, length: Value, beat_log2: int) -> Value:
    """Beats of ``2**beat_log2`` bytes that the bytes ``[addr, addr + length)`` touch
    (``length >= 1``): one short sum, not the difference of the first and last beats'
    addresses."""
    return (addr[:beat_log2] + length + ((1 << beat_log2) - 1)) >> beat_log2


def last_beat_spanned(addr: Value, length: Value, beat_log2: int) -> Value:
    """``beats_spanned(addr, length) - 1``: the index of the last beat the bytes
    ``[addr, addr + length)`` touch (``length >= 1``)."""
    return (addr[:beat_log2] + length - 1) >> beat_log2


class AxiReadSignature(wiring.Signature):
    """Read address + read data channels, from the master's point of view."""

    def __init__(self, id_bits: int = ID_BITS, data_bits: int = DATA_BITS):
        super().__init__({
            "arvalid": Out(1), "arready": In(1), "araddr": Out(ADDR_BITS), "arlen": Out(8),
            "arsize": Out(3), "arburst": Out(2), "arid": Out(id_bits),
            "rvalid": In(1), "rready": Out(1), "rdata": In(data_bits), "rresp": In(2),
            "rlast": In(1), "rid": In(id_bits),
        })


class AxiWriteSignature(wiring.Signature):
    """Write address + write data + write response channels, from the master's side."""

    def __init__(self, id_bits: int = ID_BITS, data_bits: int = DATA_BITS):
        super().__init__({
            "awvalid": Out(1), "awready": In(1), "awaddr": Out(ADDR_BITS), "awlen": Out(8),
            "awsize": Out(3), "awburst": Out(2), "awid": Out(id_bits),
            "wvalid": Out(1), "wready": In(1), "wdata": Out(data_bits),
            "wstrb": Out(data_bits // 8), "wlast": Out(1),
            "bvalid": In(1), "bready": Out(1), "bresp": In(2), "bid": In(id_bits),
        })


class AxiSignature(wiring.Signature):
    """A full AXI4 master port (flat member names, as on a Verilog module); ``id_bits``
    wide IDs (the interconnect's shared port has more: it adds the master's index) and
    ``data_bits`` of data."""

    def __init__(self, id_bits: int = ID_BITS, data_bits: int = DATA_BITS):
        if data_bits not in DATA_WIDTHS:
            raise ValueError(f"AXI data width must be one of {DATA_WIDTHS}, got {data_bits}")
        self.id_bits, self.data_bits = id_bits, data_bits
        members = {}
        members.update(AxiReadSignature(id_bits, data_bits).members)
        members.update(AxiWriteSignature(id_bits, data_bits).members)
        super().__init__(members)
