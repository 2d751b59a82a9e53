"""AXI4 memory-mapped interface definitions (the subset the core uses).

Signal names follow the AXI4 specification in lower case; in Verilog a member ``axi`` of a
component becomes ports ``axi__arvalid`` etc. (cocotbext-axi: ``AxiBus.from_prefix(dut,
"axi_")``).  The core is a master with 64-bit data, 32-bit addresses, INCR bursts of at most
16 beats that never cross a 4 KiB boundary, and one ID bit per direction (``arid``: 0 for
instruction fetch, 1 for data loads).
"""

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

ADDR_BITS = 32
DATA_BITS = 64
ID_BITS = 1
MAX_BURST = 16  #: beats per burst
BOUNDARY = 4096  #: bursts never cross a multiple of this

RESP_OKAY, RESP_EXOKAY, RESP_SLVERR, RESP_DECERR = 0, 1, 2, 3


class AxiReadSignature(wiring.Signature):
    """Read address + read data channels, from the master's point of view."""

    def __init__(self, id_bits: int = ID_BITS):
        super().__init__({
            "arvalid": Out(1), "arready": In(1), "araddr": Out(ADDR_BITS), "arlen": Out(8),
            "arsize": Out(3), "arburst": Out(2), "arid": Out(id_bits),
            "rvalid": In(1), "rready": Out(1), "rdata": In(DATA_BITS), "rresp": In(2),
            "rlast": In(1), "rid": In(id_bits),
        })


class AxiWriteSignature(wiring.Signature):
    """Write address + write data + write response channels, from the master's side."""

    def __init__(self, id_bits: int = ID_BITS):
        super().__init__({
            "awvalid": Out(1), "awready": In(1), "awaddr": Out(ADDR_BITS), "awlen": Out(8),
            "awsize": Out(3), "awburst": Out(2), "awid": Out(id_bits),
            "wvalid": Out(1), "wready": In(1), "wdata": Out(DATA_BITS),
            "wstrb": Out(DATA_BITS // 8), "wlast": Out(1),
            "bvalid": In(1), "bready": Out(1), "bresp": In(2), "bid": In(id_bits),
        })


class AxiSignature(wiring.Signature):
    """A full AXI4 master port (flat member names, as on a Verilog module); ``id_bits``
    wide IDs (the interconnect's shared port has more: it adds the master's index)."""

    def __init__(self, id_bits: int = ID_BITS):
        self.id_bits = id_bits
        members = {}
        members.update(AxiReadSignature(id_bits).members)
        members.update(AxiWriteSignature(id_bits).members)
        super().__init__(members)
