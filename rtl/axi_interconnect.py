"""AXI4 interconnect: a group of the array's cores share one external-memory port."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from .axi import ID_BITS, AxiSignature

_AR = ("araddr", "arlen", "arsize", "arburst")
_AW = ("awaddr", "awlen", "awsize", "awburst")
_W = ("wdata", "wstrb", "wlast")


class _RoundRobin(Elaboratable):
    """Grants one of ``n`` requesters, the first one after the previous winner (cyclically),
    and holds the grant while ``hold`` is high (an address handshake not yet done: AXI
    forbids changing a valid address).  A requester waits at most ``n - 1`` grants."""

    def __init__(self, n: int):
        self.n = n
        self.requests = Signal(n)
        self.hold = Signal()
        self.grant = Signal(range(max(n, 2)))
        self.valid = Signal()

    def elaborate(self, platform):
        m = Module()
        n = self.n
        last = Signal(range(max(n, 2)))
        held = Signal()
        held_grant = Signal.like(self.grant)
        pick = Signal.like(self.grant)
        for k in reversed(range(1, n + 1)):
            for lw in range(n):
                cand = (lw + k) % n
                with m.If((last == lw) & self.requests[cand]):
                    m.d.comb += pick.eq(cand)
        m.d.comb += [self.grant.eq(Mux(held, held_grant, pick)),
                     self.valid.eq(held | self.requests.any())]
        with m.If(self.valid):
            m.d.sync += [held.eq(self.hold), held_grant.eq(self.grant), last.eq(self.grant)]
        return m


def index_bits_for(n: int) -> int:
    """ID bits an interconnect of ``n`` masters adds to carry the master's index."""
    return max(1, (n - 1).bit_length())


class AxiInterconnect(wiring.Component):
    """``n`` AXI4 masters (``s[k]``, each with ``ID_BITS`` IDs) onto one slave port ``m``.

    * **Reads**: address requests are granted round-robin (a granted request keeps its
      grant until the slave accepts it); the request goes out with ``arid = (k, arid)``.
      Read data is routed back by the upper ID bits, so bursts of different masters may
      interleave as the slave likes and back-pressure from one master stalls only its
      own data.
    * **Writes**: write addresses are granted round-robin the same way; the granted
      master's index joins a queue, and the write-data channel carries the bursts in that
      order (AXI4 has no write interleaving).  Write responses are routed back by ID.
    * Nothing is combinationally ready without the slave being ready, so the
      interconnect adds no cycle of latency; throughput is the slave's.

    Members
    -------
    s : In(AxiSignature()).array(n)
        The masters' ports (``data_bits`` wide).
    m : Out(AxiSignature(ID_BITS + index bits))
        The shared port, as wide (``index_bits``: at least enough for ``n``; more to give
        several interconnects the same ID width).
    """

    def __init__(self, n: int, *, write_depth: int = 4, index_bits: int | None = None,
                 data_bits: int = 64):
        need = index_bits_for(max(n, 1))
        if n < 1 or (index_bits is not None and index_bits < need):
            # refused: Amaranth would also warn, when this object is collected, that it
            # was never elaborated; the error says all there is to say
            self._MustUse__silence = True
            raise ValueError(f"an interconnect needs at least one master, got {n}" if n < 1
                             else f"{n} masters need {need} index bits, got {index_bits}")
        self.n = n
        self.index_bits = need if index_bits is None else index_bits
        self._ar = _RoundRobin(n)
        self._aw = _RoundRobin(n)
        self._worder = SyncFIFOBuffered(width=self.index_bits, depth=write_depth)
        super().__init__({
            "s": In(AxiSignature(data_bits=data_bits)).array(n),
            "m": Out(AxiSignature(ID_BITS + self.index_bits, data_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        n, s, bus = self.n, self.s, self.m
        m.submodules.ar = ar = self._ar
        m.submodules.aw = aw = self._aw
        m.submodules.worder = worder = self._worder

        def pick(field, grant):
            return Array([getattr(s[k], field) for k in range(n)])[grant]

        # ---- Read address: round robin, the index in the upper ID bits.
        m.d.comb += [ar.requests.eq(Cat(s[k].arvalid for k in range(n))),
                     ar.hold.eq(bus.arvalid & ~bus.arready),
                     bus.arvalid.eq(ar.valid & pick("arvalid", ar.grant)),
                     bus.arid.eq(Cat(pick("arid", ar.grant), ar.grant))]
        for f in _AR:
            m.d.comb += getattr(bus, f).eq(pick(f, ar.grant))
        for k in range(n):
            m.d.comb += s[k].arready.eq(bus.arready & ar.valid & (ar.grant == k))

        # ---- Read data: by ID.
        r_to = bus.rid[ID_BITS:]
        m.d.comb += bus.rready.eq(pick("rready", r_to))
        for k in range(n):
            m.d.comb += [s[k].rvalid.eq(bus.rvalid & (r_to == k)), s[k].rdata.eq(bus.rdata),
                         s[k].rresp.eq(bus.rresp), s[k].rlast.eq(bus.rlast),
                         s[k].rid.eq(bus.rid[:ID_BITS])]

        # ---- Write address: round robin while the data-order queue has room.
        m.d.comb += [aw.requests.eq(Mux(worder.w_rdy, Cat(s[k].awvalid for k in range(n)), 0)),
                     aw.hold.eq(bus.awvalid & ~bus.awready),
                     bus.awvalid.eq(aw.valid & pick("awvalid", aw.grant) & worder.w_rdy),
                     bus.awid.eq(Cat(pick("awid", aw.grant), aw.grant)),
                     worder.w_en.eq(bus.awvalid & bus.awready),
                     worder.w_data.eq(aw.grant)]
        for f in _AW:
            m.d.comb += getattr(bus, f).eq(pick(f, aw.grant))
        for k in range(n):
            m.d.comb += s[k].awready.eq(bus.awready & bus.awvalid & (aw.grant == k))

        # ---- Write data: the bursts in address order.
        w_from = worder.r_data
        m.d.comb += [bus.wvalid.eq(worder.r_rdy & pick("wvalid", w_from)),
                     worder.r_en.eq(bus.wvalid & bus.wready & bus.wlast)]
        for f in _W:
            m.d.comb += getattr(bus, f).eq(pick(f, w_from))
        for k in range(n):
            m.d.comb += s[k].wready.eq(bus.wready & worder.r_rdy & (w_from == k))

        # ---- Write responses: by ID.
        b_to = bus.bid[ID_BITS:]
        m.d.comb += bus.bready.eq(pick("bready", b_to))
        for k in range(n):
            m.d.comb += [s[k].bvalid.eq(bus.bvalid & (b_to == k)), s[k].bresp.eq(bus.bresp),
                         s[k].bid.eq(bus.bid[:ID_BITS])]
        return m
