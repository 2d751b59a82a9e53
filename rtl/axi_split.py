"""Address decoders that send an AXI master's bursts to local memory or to the external
bus by address (``isa.LOCAL_BASE`` and up: local memory)."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from snpu.verif.isa import LOCAL_BASE

from .skid import room_flag


def _read_channels(flip: bool, data_bits: int = 64):
    d, u = (In, Out) if flip else (Out, In)
    return {"arvalid": d(1), "arready": u(1), "araddr": d(32), "arlen": d(8),
            "rvalid": u(1), "rready": d(1), "rdata": u(data_bits), "rresp": u(2), "rlast": u(1)}


def _write_channels(flip: bool):
    d, u = (In, Out) if flip else (Out, In)
    return {"awvalid": d(1), "awready": u(1), "awaddr": d(32), "awlen": d(8),
            "wvalid": d(1), "wready": u(1), "wdata": d(64), "wstrb": d(8), "wlast": d(1),
            "bvalid": u(1), "bready": d(1), "bresp": u(2)}


def is_local(addr: Value) -> Value:
    """``addr`` lies in local memory's 256 MiB region (``isa.LOCAL_BASE`` and up)."""
    return addr[28:] == (LOCAL_BASE >> 28)


class ReadSplit(wiring.Component):
    """A read master (``m_*``, e.g. the LD unit) to two slaves: external (``e_*``) and local
    memory (``l_*``).  Bursts go out in order to either side; read data comes back in the
    same order (only the side of the oldest outstanding burst may answer), up to
    ``depth`` bursts outstanding.  Every side is ``data_bits`` wide.

    The master says where a burst goes: ``m_arlocal`` is :func:`is_local` of its
    ``m_araddr``, from a register of the master's (a :class:`~.dma_reader.DmaReader`'s
    ``ardecode``), so the split's handshake and the arbitration after it start at a
    flip-flop, not at an address comparison."""

    def __init__(self, depth: int = 4, data_bits: int = 64):
        self._depth = depth
        self._order = SyncFIFOBuffered(width=1, depth=depth)
        super().__init__({"m_arlocal": In(1),
                          **{f"m_{k}": v for k, v in _read_channels(True, data_bits).items()},
                          **{f"e_{k}": v for k, v in _read_channels(False, data_bits).items()},
                          **{f"l_{k}": v for k, v in _read_channels(False, data_bits).items()}})

    def elaborate(self, platform):
        m = Module()
        m.submodules.order = order = self._order
        local = self.m_arlocal
        # (the order queue's room as a register: the slaves' arready reaches the queue's
        # write, not a comparison of its level in front of it)
        accepted = Signal()
        room = room_flag(m, self._depth, accepted, order.r_en)
        for side, sel in (("e", ~local), ("l", local)):
            m.d.comb += [getattr(self, f"{side}_arvalid").eq(self.m_arvalid & sel & room),
                         getattr(self, f"{side}_araddr").eq(self.m_araddr),
                         getattr(self, f"{side}_arlen").eq(self.m_arlen)]
        m.d.comb += [self.m_arready.eq(room & Mux(local, self.l_arready, self.e_arready)),
                     accepted.eq(self.m_arvalid & self.m_arready)]
        # A burst's side is queued the cycle after its address handshake, from registers:
        # the handshake (the bus's arbitration between the instruction fetch and this
        # master, then the slave's arready) reaches two flip-flops, not the queue's write
        # (103.7 MHz placed at 35a5cba).  The queue holds it from the third cycle after the
        # handshake, before either slave's first beat (local memory's comes four cycles
        # after the handshake, the external bus's later); a beat that came sooner would
        # wait for it.
        queued, queued_local = Signal(), Signal()
        m.d.sync += [queued.eq(accepted), queued_local.eq(local)]
        m.d.comb += [order.w_en.eq(queued), order.w_data.eq(queued_local)]
        head_local = order.r_data
        for field in ("rdata", "rresp", "rlast"):
            m.d.comb += getattr(self, f"m_{field}").eq(
                Mux(head_local, getattr(self, f"l_{field}"), getattr(self, f"e_{field}")))
        m.d.comb += [self.m_rvalid.eq(order.r_rdy & Mux(head_local, self.l_rvalid, self.e_rvalid)),
                     self.l_rready.eq(order.r_rdy & head_local & self.m_rready),
                     self.e_rready.eq(order.r_rdy & ~head_local & self.m_rready),
                     order.r_en.eq(self.m_rvalid & self.m_rready & self.m_rlast)]
        return m


class WriteSplit(wiring.Component):
    """A write master (``m_*``, e.g. the ST unit) to two slaves, external (``e_*``) and
    local memory (``l_*``), by the burst's address; write data follows its burst, responses
    come back in burst order."""

    def __init__(self, depth: int = 4):
        self._depth = depth
        self._w_order = SyncFIFOBuffered(width=1, depth=depth)
        self._b_order = SyncFIFOBuffered(width=1, depth=depth)
        super().__init__({**{f"m_{k}": v for k, v in _write_channels(True).items()},
                          **{f"e_{k}": v for k, v in _write_channels(False).items()},
                          **{f"l_{k}": v for k, v in _write_channels(False).items()}})

    def elaborate(self, platform):
        m = Module()
        m.submodules.w_order = wq = self._w_order
        m.submodules.b_order = bq = self._b_order
        local = is_local(self.m_awaddr)
        # (both queues hold every burst accepted until its data / response has gone: their
        # room as registers, kept beside their counts)
        accepted = Signal()
        room = (room_flag(m, self._depth, accepted, wq.r_en, "w_room") &
                room_flag(m, self._depth, accepted, bq.r_en, "b_room"))
        for side, sel in (("e", ~local), ("l", local)):
            m.d.comb += [getattr(self, f"{side}_awvalid").eq(self.m_awvalid & sel & room),
                         getattr(self, f"{side}_awaddr").eq(self.m_awaddr),
                         getattr(self, f"{side}_awlen").eq(self.m_awlen)]
        m.d.comb += [self.m_awready.eq(room & Mux(local, self.l_awready, self.e_awready)),
                     accepted.eq(self.m_awvalid & self.m_awready),
                     wq.w_en.eq(accepted), wq.w_data.eq(local),
                     bq.w_en.eq(accepted), bq.w_data.eq(local)]
        w_local = wq.r_data
        for side, sel in (("e", ~w_local), ("l", w_local)):
            m.d.comb += [getattr(self, f"{side}_wvalid").eq(self.m_wvalid & wq.r_rdy & sel),
                         getattr(self, f"{side}_wdata").eq(self.m_wdata),
                         getattr(self, f"{side}_wstrb").eq(self.m_wstrb),
                         getattr(self, f"{side}_wlast").eq(self.m_wlast)]
        m.d.comb += [self.m_wready.eq(wq.r_rdy & Mux(w_local, self.l_wready, self.e_wready)),
                     wq.r_en.eq(self.m_wvalid & self.m_wready & self.m_wlast)]
        b_local = bq.r_data
        m.d.comb += [self.m_bvalid.eq(bq.r_rdy & Mux(b_local, self.l_bvalid, self.e_bvalid)),
                     self.m_bresp.eq(Mux(b_local, self.l_bresp, self.e_bresp)),
                     self.l_bready.eq(bq.r_rdy & b_local & self.m_bready),
                     self.e_bready.eq(bq.r_rdy & ~b_local & self.m_bready),
                     bq.r_en.eq(self.m_bvalid & self.m_bready)]
        return m


class ReadUpsizer(wiring.Component):
    """A read master of ``data_bits``-wide beats (``m_*``: the LD unit's bursts to local
    memory, beat-aligned) onto a 64-bit slave (``s_*``: local memory): each burst of ``n``
    wide beats becomes a burst of ``n * data_bits / 64`` 8-byte beats, gathered back into
    wide beats (a response other than OKAY in any part is the wide beat's).

    Throughput one 8-byte beat per cycle (a wide beat every ``data_bits / 64`` cycles);
    latency one cycle more than the slave's."""

    def __init__(self, data_bits: int):
        self._parts = data_bits // 64
        super().__init__({**{f"m_{k}": v for k, v in _read_channels(True, data_bits).items()},
                          **{f"s_{k}": v for k, v in _read_channels(False, 64).items()}})

    def elaborate(self, platform):
        m = Module()
        n = self._parts
        m.d.comb += [self.s_arvalid.eq(self.m_arvalid), self.m_arready.eq(self.s_arready),
                     self.s_araddr.eq(self.m_araddr),
                     # ((arlen + 1) * n - 1 for n a power of two: no adder)
                     self.s_arlen.eq(Cat(C(n - 1, (n - 1).bit_length()), self.m_arlen)[:8])]
        part = Signal(range(n))
        gathered = Signal(64 * (n - 1))    # the parts before the last
        resp = Signal(2)                   # the worst response of those parts
        out_valid = Signal()
        out = Signal(64 * n)
        out_resp, out_last = Signal(2), Signal()
        final = part == n - 1
        m.d.comb += [self.s_rready.eq(~final | ~out_valid | self.m_rready),
                     self.m_rvalid.eq(out_valid), self.m_rdata.eq(out),
                     self.m_rresp.eq(out_resp), self.m_rlast.eq(out_last)]
        with m.If(self.m_rvalid & self.m_rready):
            m.d.sync += out_valid.eq(0)
        with m.If(self.s_rvalid & self.s_rready):
            worst = Mux(self.s_rresp > resp, self.s_rresp, resp)
            with m.If(final):
                m.d.sync += [out_valid.eq(1), out.eq(Cat(gathered, self.s_rdata)),
                             out_resp.eq(worst), out_last.eq(self.s_rlast),
                             part.eq(0), resp.eq(0)]
            with m.Else():
                m.d.sync += [gathered.word_select(part, 64).eq(self.s_rdata),
                             resp.eq(worst), part.eq(part + 1)]
        return m
