"""Local memory: a core's scratchpad in block RAM, reached by its LD / ST units over AXI
(at ``isa.LOCAL_BASE``) and by its NET unit (send reads, arriving packets' writes)."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .axi import RESP_DECERR, RESP_OKAY, AxiSignature
from .target import NO_RW_CHECK, checked_read

NET_WRITE = data.StructLayout({"addr": 17, "data": 64, "en": 8})


class LocalMemory(wiring.Component):
    """``size`` bytes of 64-bit words in block RAM with one read and one write port.

    The AXI side is a slave (INCR bursts, write strobes; addresses are local byte offsets,
    taken modulo 2**28 of the core's address): up to two read bursts are queued and
    streamed back one word per cycle, one write burst at a time; an address at or past
    ``size`` answers DECERR (the unit that asked faults with ``LOAD_BUS`` /
    ``STORE_BUS``).  The NET side reads words for ``send`` (``net_rd``: one request per
    cycle, the word on ``net_rdata`` four cycles after, no back-pressure: the NET unit asks
    only when it has room) and writes arriving packets' words (``net_wr``, with byte
    enables; an arriving word is registered before it is arbitrated and lands in the
    memory two cycles after it is taken).  The read port alternates between the AXI side
    and the NET side when both want it; arriving packets win the write port, so the
    network always drains.  The block
    RAMs' inputs come from registers (the read address and enable as arbitrated, the write
    address, data and enables as chosen), registered here beside the memory: a 64 KiB
    memory is 32 block RAMs across the die, and neither arbitration's choice feeds their
    pins in the cycle it is made.  Reads and writes are delayed alike, so their order is
    kept.  The block RAMs' output goes into a register, and from there into a second one,
    before it reaches either side's queue: a block RAM's clock-to-output is most of a cycle
    at 125 MHz, and the first register's bits sit beside their block RAMs, which are spread
    across the die (the 64-bit words of a 64 KiB memory are 2 bits in each of 32), so the
    way to the queues has a cycle of its own.  A word leaves four cycles after its read is
    taken (``net_rdata`` four cycles after ``net_rd``).

    Members
    -------
    axi : In(AxiSignature())
    net_rd : In(stream(word address)); net_rdata : Out(64); net_rvalid : Out(1)
    net_wr : In(stream(NET_WRITE))
    """

    def __init__(self, size: int):
        if size % 8 or size & (size - 1):
            raise ValueError(f"local memory size must be a power of two, got {size}")
        self._size = size
        self.mem = Memory(shape=64, depth=size // 8, init=[], attrs=NO_RW_CHECK)
        self._ar = SyncFIFOBuffered(width=36, depth=2)
        self._rdata = SyncFIFOBuffered(width=67, depth=10)
        super().__init__({
            "axi": In(AxiSignature()),
            "net_rd": In(stream.Signature(17)),
            "net_rdata": Out(64),
            "net_rvalid": Out(1),
            "net_wr": In(stream.Signature(NET_WRITE)),
        })

    def _resp(self, addr):
        return Mux(addr[:28] >= self._size, RESP_DECERR, RESP_OKAY)

    def elaborate(self, platform):
        m = Module()
        bus = self.axi
        m.submodules.mem = mem = self.mem
        m.submodules.ar = arq = self._ar
        m.submodules.rdata = rq = self._rdata
        rp = mem.read_port()
        wp = mem.write_port(granularity=8)

        # ---- AXI reads: queue bursts, one word per cycle into the data queue.
        m.d.comb += [bus.arready.eq(arq.w_rdy), arq.w_en.eq(bus.arvalid & bus.arready),
                     arq.w_data.eq(Cat(bus.araddr[:28], bus.arlen))]
        cur_addr = Signal(28)
        cur_left = Signal(9)
        busy = Signal()
        inflight0 = Signal()  # a read's address is in the block RAMs' address register ...
        inflight = Signal()   # ... the word is read from the block RAM this cycle ...
        inflight2 = Signal()  # ... and is in the output register this cycle ...
        inflight3 = Signal()  # ... and in the second one
        meta0 = Signal(3)     # resp, last of the word whose address is registered
        meta = Signal(3)      # ... of the word read
        meta2 = Signal(3)     # ... of the word in the output register
        meta3 = Signal(3)     # ... of the word in the second one
        word = Signal(64, reset_less=True)    # the block RAM's output, registered
        word2 = Signal(64, reset_less=True)   # ... and registered again
        axi_wants = Signal()
        # room in the data queue for one more word, a register: next cycle's words queued
        # or in flight are at most this cycle's plus this cycle's read (a word leaving is not
        # counted, so the room may show up a cycle late), so no adder lies between the
        # queue's level and the read port's arbitration
        room = Signal()
        m.d.comb += axi_wants.eq(busy & room)
        with m.If(~busy & arq.r_rdy):
            m.d.comb += arq.r_en.eq(1)
            m.d.sync += [busy.eq(1), cur_addr.eq(arq.r_data[:28]), cur_left.eq(arq.r_data[28:] + 1)]
        # read port arbitration: alternate when both sides want it
        prefer_net = Signal()
        net_go = Signal()
        axi_go = Signal()
        m.d.comb += [net_go.eq(self.net_rd.valid & (prefer_net | ~axi_wants)),
                     axi_go.eq(axi_wants & ~net_go),
                     self.net_rd.ready.eq(net_go),
                     ]
        # the read's address and enable into registers at the block RAMs
        rd_addr = Signal.like(rp.addr)
        rd_en = Signal()
        m.d.sync += [rd_addr.eq(Mux(net_go, self.net_rd.payload, cur_addr[3:])),
                     rd_en.eq(net_go | axi_go)]
        m.d.comb += [rp.addr.eq(rd_addr), rp.en.eq(rd_en)]
        with m.If(self.net_rd.valid & axi_wants):
            m.d.sync += prefer_net.eq(~net_go)
        with m.If(axi_go):
            m.d.sync += [cur_addr.eq(cur_addr + 8), cur_left.eq(cur_left - 1),
                         meta0.eq(Cat(self._resp(cur_addr), cur_left == 1))]
            with m.If(cur_left == 1):
                m.d.sync += busy.eq(0)
        net_read0, net_read, net_read2 = Signal(), Signal(), Signal()
        m.d.sync += [inflight0.eq(axi_go), inflight.eq(inflight0), inflight2.eq(inflight),
                     inflight3.eq(inflight2),
                     meta.eq(meta0), meta2.eq(meta), meta3.eq(meta2),
                     word.eq(checked_read(m, platform, rp, [wp], "rd")), word2.eq(word),
                     net_read0.eq(net_go), net_read.eq(net_read0), net_read2.eq(net_read),
                     self.net_rvalid.eq(net_read2)]
        # (the words queued and in flight are summed from registers; the read issued now,
        # late from the arbitration, only selects between two comparisons)
        queued = Signal(range(rq.depth + 5))
        m.d.comb += queued.eq(rq.level + inflight0 + inflight + inflight2 + inflight3)
        m.d.sync += room.eq(Mux(axi_go, queued < rq.depth - 2, queued < rq.depth - 1))
        m.d.comb += [self.net_rdata.eq(word2),
                     rq.w_en.eq(inflight3), rq.w_data.eq(Cat(word2, meta3)),
                     bus.rvalid.eq(rq.r_rdy), bus.rdata.eq(rq.r_data[:64]),
                     bus.rresp.eq(rq.r_data[64:66]), bus.rlast.eq(rq.r_data[66]),
                     rq.r_en.eq(bus.rvalid & bus.rready)]
        idq = SyncFIFOBuffered(width=1, depth=4)  # bursts are answered in order
        m.submodules.idq = idq
        m.d.comb += [idq.w_en.eq(bus.arvalid & bus.arready), idq.w_data.eq(bus.arid),
                     bus.rid.eq(idq.r_data), idq.r_en.eq(bus.rvalid & bus.rready & bus.rlast)]

        # ---- Writes: arriving packets first, then one AXI burst at a time; the chosen
        # write into registers at the block RAMs (`wr`), written the cycle after.
        wr = Signal(NET_WRITE)
        m.d.comb += [wp.addr.eq(wr.addr), wp.data.eq(wr.data), wp.en.eq(wr.en)]
        m.d.comb += self.net_wr.ready.eq(1)
        # an arriving word enters a register before it is arbitrated, so the AXI side's
        # `wready` is a function of registers: the network's valid reached the ST unit's
        # write skid buffer through the interconnect (the placed 1-lane core's worst path at
        # 13d9cb1, 100.0 MHz)
        net_in = Signal(NET_WRITE, reset_less=True)
        net_in_valid = Signal()
        m.d.sync += [net_in_valid.eq(self.net_wr.valid), net_in.eq(self.net_wr.payload)]
        w_addr = Signal(28)
        w_err = Signal(2)
        axi_w = Signal()
        m.d.sync += wr.en.eq(0)
        with m.If(net_in_valid):
            m.d.sync += [wr.addr.eq(net_in.addr), wr.data.eq(net_in.data), wr.en.eq(net_in.en)]
        with m.FSM():
            with m.State("ADDR"):
                m.d.comb += bus.awready.eq(1)
                with m.If(bus.awvalid):
                    m.d.sync += [w_addr.eq(bus.awaddr[:28]), w_err.eq(RESP_OKAY)]
                    m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += [bus.wready.eq(~net_in_valid), axi_w.eq(bus.wvalid & bus.wready)]
                resp = self._resp(w_addr)
                with m.If(~net_in_valid):
                    m.d.sync += [wr.addr.eq(w_addr[3:]), wr.data.eq(bus.wdata),
                                 wr.en.eq(Mux(axi_w & (resp == RESP_OKAY), bus.wstrb, 0))]
                with m.If(axi_w):
                    m.d.sync += w_addr.eq(w_addr + 8)
                    with m.If(resp != RESP_OKAY):
                        m.d.sync += w_err.eq(resp)
                    with m.If(bus.wlast):
                        m.next = "RESP"
            with m.State("RESP"):
                m.d.comb += [bus.bvalid.eq(1), bus.bresp.eq(w_err), bus.bid.eq(0)]
                with m.If(bus.bready):
                    m.next = "ADDR"
        return m
