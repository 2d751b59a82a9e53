"""The snpu core: seed 000's sparse neural-network operation module, composed."""

from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from snpu.config import CoreConfig

from .acc import Accumulators
from .axi_split import ReadSplit, ReadUpsizer, WriteSplit
from .axi import AxiSignature
from .buffers import OutputCache, ParamMemory
from .dispatch import Dispatcher
from .icache import InstructionCache
from .ld_unit import LoadUnit
from .local_memory import LocalMemory
from .microcode import PC_BITS, UNITS, micro_layout
from .mx_unit import MatrixController
from .net_unit import NetUnit
from .noc import FLIT
from .st_unit import StoreUnit
from .status import ErrorCode
from .tokens import TokenChannels
from .unit import UnitFrontEnd
from .vx_unit import VectorUnit
from amaranth.lib import stream
from snpu.verif.isa import MESH_BITS

#: performance counters, in the order of the ``counters`` output
COUNTERS = (
    "cycles",            # from start to done
    "ld_busy", "mx_busy", "vx_busy", "st_busy", "net_busy",  # cycles each unit was executing
    "ld_stall", "mx_stall", "vx_stall", "st_stall", "net_stall",  # ... waiting for tokens
    "ld_instructions", "mx_instructions", "vx_instructions", "st_instructions",
    "net_instructions",
    "mac_cycles",        # cycles the MX unit spent in fc
    "pairs",             # neuron/weight pairs multiplied
    "dense_pairs",       # pairs a dense core would have multiplied
    "dma_read_bytes", "dma_write_bytes",
    "icache_hits", "icache_misses", "icache_prefetches",  # instruction cache accesses
    "net_bytes_sent", "net_bytes_received",
)


def core_signature(axi_data_bits: int = 64) -> wiring.Signature:
    """The core's ports (the same for every configuration but the AXI bus's width)."""
    return wiring.Signature({
        "axi": Out(AxiSignature(data_bits=axi_data_bits)),
        "start": In(1),
        "rom_base": In(32),
        "rom_words": In(PC_BITS + 1),
        # the mesh: this core's place, the mesh size, the router's local port
        "mesh_x": In(MESH_BITS), "mesh_y": In(MESH_BITS),
        "mesh_w": In(MESH_BITS + 1), "mesh_h": In(MESH_BITS + 1),
        "noc_out": Out(stream.Signature(FLIT)),
        "noc_in": In(stream.Signature(FLIT)),
        "busy": Out(1),
        "done": Out(1),
        "error": Out(ErrorCode),
        "error_pc": Out(PC_BITS),
        "counters": Out(data.ArrayLayout(64, len(COUNTERS))),
    })


class Core(wiring.Component):
    """One snpu core.

    Blocks (``docs/architecture.md``): instruction fetch (the instruction cache, filled over
    AXI) -> dispatcher (decodes each instruction into a microinstruction, checks legality)
    -> one queue per unit -> the LD, MX, VX and ST units, each behind a front end that takes
    and gives dependency tokens.  LD fills the neuron buffer (through the sparse processing
    unit), the weight banks, the accumulators and the parameter memory; MX runs the lanes
    (mapping unit + MACs) into the accumulators; VX pools, adds, requantises into the output
    cache; ST writes the output cache back.  One AXI4 master port (``axi_data_bits``: 64,
    128 or 256): reads are shared by fetch (``arid`` 0) and LD (``arid`` 1) round-robin per
    burst; writes come from ST.  On a bus wider than 64 bits only LD uses the full width;
    fetch reads and ST writes are narrow bursts of 8-byte beats (``arsize`` / ``awsize``
    3), each beat on the byte lanes of its address, and LD's bursts to local memory (64
    bits wide) pass a :class:`~.axi_split.ReadUpsizer`.

    Control/status: pulse ``start`` with ``rom_base`` (16-byte aligned); ``busy`` until
    ``done`` (which stays high until the next ``start``).  ``error`` (an
    :class:`~.status.ErrorCode`) and ``error_pc`` (the ROM word) report the first fault;
    after a fault the core stops dispatching, lets the units finish the instruction they
    hold, and raises ``done``.  ``start`` resets every register outside the memories.

    Parameters
    ----------
    config:
        The core's parameters (lanes, buffer sizes, queue and token depths).
    """

    def __init__(self, config: CoreConfig | None = None):
        self._cfg = config = config or CoreConfig()
        self._fetch = InstructionCache(config.icache_lines)
        self._dispatch = Dispatcher(config)
        self._queues = {u: SyncFIFOBuffered(width=micro_layout(u).size, depth=config.queue_depth)
                        for u in UNITS}
        self._front = {u: UnitFrontEnd(u) for u in UNITS}
        self._tokens = TokenChannels(config.token_depth)
        self._ld = LoadUnit(config)
        self._mx = MatrixController(config)
        self._vx = VectorUnit(config)
        self._st = StoreUnit(config)
        self._net = NetUnit(config)
        self._local = LocalMemory(config.local_bytes)
        self._ld_split = ReadSplit(data_bits=config.axi_data_bits)
        self._ld_upsizer = (ReadUpsizer(config.axi_data_bits) if config.axi_data_bits > 64
                            else None)
        self._st_split = WriteSplit()
        self._acc = Accumulators(config)
        self._param = ParamMemory(config)
        self._obuf = OutputCache(config)
        super().__init__(core_signature(config.axi_data_bits))

    @property
    def config(self) -> CoreConfig:
        return self._cfg

    def elaborate(self, platform):
        m = Module()
        c = self._cfg
        P = c.lanes
        fetch, disp, tok = self._fetch, self._dispatch, self._tokens
        ld, mx, vx, st = self._ld, self._mx, self._vx, self._st
        acc, prm, obuf = self._acc, self._param, self._obuf
        # Every register outside the memories restarts with `start` (queues, prefetched
        # instructions, tokens, configuration registers, counters); fetching begins a cycle
        # later.  Memory contents are kept.
        net, local = self._net, self._local
        # (the cores of a mesh start together: no packet of a program arrives before start)
        for name, sub in (("fetch", fetch), ("dispatch", disp), ("tokens", tok), ("ld", ld),
                          ("mx", mx), ("vx", vx), ("st", st), ("net", net),
                          ("ld_split", self._ld_split), ("st_split", self._st_split)):
            m.submodules[name] = ResetInserter(self.start)(sub)
        for name, sub in (("acc", acc), ("param", prm), ("obuf", obuf), ("local_mem", local)):
            m.submodules[name] = sub
        for u in UNITS:
            m.submodules[f"queue_{u.name.lower()}"] = ResetInserter(self.start)(self._queues[u])
            m.submodules[f"front_{u.name.lower()}"] = ResetInserter(self.start)(self._front[u])

        # ---- Control.
        running = Signal()
        begin = Signal()  # the cycle after start: the dispatcher asks for word 0
        rom_base = Signal(32)
        rom_words = Signal(PC_BITS + 1)
        fault = Signal(ErrorCode)
        fault_pc = Signal(PC_BITS)
        halt = Signal()  # a fault: stop dispatching and accepting
        m.d.sync += begin.eq(self.start)
        with m.If(self.start):
            m.d.sync += [rom_base.eq(self.rom_base), rom_words.eq(self.rom_words)]
        m.d.comb += [self.busy.eq(running), self.error.eq(fault), self.error_pc.eq(fault_pc),
                     fetch.start.eq(self.start), fetch.rom_base.eq(rom_base),
                     fetch.rom_words.eq(rom_words),
                     disp.start.eq(begin), disp.rom_words.eq(rom_words), disp.stop.eq(halt)]
        wiring.connect(m, disp.fetch_req, fetch.req)
        m.d.comb += [fetch.next_pc.eq(disp.fetch_next_pc), fetch.next_line.eq(disp.fetch_next_line),
                     fetch.next_load.eq(disp.fetch_next_load)]
        wiring.connect(m, fetch.resp, disp.fetch_resp)

        # ---- Queues and front ends.
        idle = [~self._front[u].busy & ~self._queues[u].r_rdy & (self._queues[u].level == 0)
                for u in UNITS]
        # registered: the units' busy flags come from all over the core, and a word that
        # waits for them (and `halted`) may see them a cycle late.  No word is missed: one
        # dispatched now is in its queue from next cycle on, and the next word goes two
        # cycles after this one at the earliest (DISPATCH_CYCLES).
        units_idle = Signal()
        m.d.sync += units_idle.eq(Cat(*idle).all())
        m.d.comb += disp.units_idle.eq(units_idle)
        for k, u in enumerate(UNITS):
            q, fe = self._queues[u], self._front[u]
            src = disp.queue(u)
            m.d.comb += [q.w_data.eq(src.payload), q.w_en.eq(src.valid), src.ready.eq(q.w_rdy),
                         fe.micro.valid.eq(q.r_rdy), fe.micro.payload.eq(q.r_data),
                         q.r_en.eq(fe.micro.ready), fe.halt.eq(halt),
                         tok.wait_mask[k].eq(fe.wait_mask), fe.wait_ok.eq(tok.wait_ok[k]),
                         tok.wait_mask_next[k].eq(fe.wait_mask_next),
                         tok.signal_mask_next[k].eq(fe.signal_mask_next),
                         tok.take[k].eq(fe.take),
                         tok.signal_mask[k].eq(fe.signal_mask), fe.signal_ok.eq(tok.signal_ok[k]),
                         tok.give[k].eq(fe.give)]

        fe_ld, fe_mx, fe_vx, fe_st, fe_net = (self._front[u] for u in UNITS)
        # LD
        m.d.comb += [ld.start.eq(fe_ld.start), ld.op.eq(fe_ld.op), ld.args.eq(fe_ld.args), fe_ld.done.eq(ld.done),
                     ld.regs.eq(fe_ld.regs_now)]
        # MX
        m.d.comb += [mx.start.eq(fe_mx.start), mx.args.eq(fe_mx.args.fc), fe_mx.done.eq(mx.done),
                     mx.regs.eq(fe_mx.regs_now),
                     mx.regs_file.eq(fe_mx.regs.value), mx.taking.eq(fe_mx.taking),
                     mx.taken.eq(fe_mx.taken.args.fc)]
        for name in ("nbuf_w", "nidx_w", "wbuf_w", "widx_w"):
            wiring.connect(m, getattr(ld, name), getattr(mx, name))
        m.d.comb += mx.w_lane.eq(ld.w_lane)
        # VX
        m.d.comb += [vx.start.eq(fe_vx.start), vx.op.eq(fe_vx.op), vx.args.eq(fe_vx.args),
                     fe_vx.done.eq(vx.done), vx.regs.eq(fe_vx.regs_now)]
        # ST
        m.d.comb += [st.start.eq(fe_st.start), st.op.eq(fe_st.op), st.args.eq(fe_st.args), fe_st.done.eq(st.done),
                     st.regs.eq(fe_st.regs_now)]

        # NET
        m.d.comb += [net.start.eq(fe_net.start), net.op.eq(fe_net.op), net.args.eq(fe_net.args),
                     fe_net.done.eq(net.done), net.regs.eq(fe_net.regs_now),
                     net.x.eq(self.mesh_x), net.y.eq(self.mesh_y),
                     net.w.eq(self.mesh_w), net.h.eq(self.mesh_h)]
        wiring.connect(m, net.inject, wiring.flipped(self.noc_out))
        wiring.connect(m, wiring.flipped(self.noc_in), net.eject)
        wiring.connect(m, net.mem_rd, local.net_rd)
        wiring.connect(m, net.mem_wr, local.net_wr)
        m.d.comb += [net.mem_rdata.eq(local.net_rdata), net.mem_rvalid.eq(local.net_rvalid)]

        # ---- Shared memories.
        m.d.comb += [acc.vx_rd_en.eq(vx.acc_rd_en), acc.vx_rd_row.eq(vx.acc_rd_row),
                     vx.acc_rd_data.eq(acc.vx_rd_data), acc.vx_wr_en.eq(vx.acc_wr_en),
                     acc.vx_wr.eq(vx.acc_wr)]
        wiring.connect(m, ld.acc_w, acc.ld_w)
        for g in range(P):
            wiring.connect(m, mx.acc_w[g], acc.mx_w[g])
            wiring.connect(m, mx.acc_rd[g], acc.mx_rd[g])
            m.d.comb += mx.acc_rd_data[g].eq(acc.mx_rd_data[g])
        wiring.connect(m, ld.param_w, prm.w)
        m.d.comb += [prm.r_en.eq(vx.prm_en), prm.r_row.eq(vx.prm_row), vx.prm_data.eq(prm.r_data),
                     obuf.w_en.eq(vx.obuf_en), obuf.w_addr.eq(vx.obuf_addr),
                     obuf.w_data.eq(vx.obuf_data),
                     obuf.r_en.eq(st.obuf_en), obuf.r_word.eq(st.obuf_addr),
                     st.obuf_data.eq(obuf.r_data)]

        # ---- Local memory or external bus, by address: LD's reads, ST's writes.
        lsp, ssp = self._ld_split, self._st_split
        for k in ("arvalid", "araddr", "arlen", "rready"):
            m.d.comb += getattr(lsp, f"m_{k}").eq(getattr(ld, k))
        m.d.comb += lsp.m_arlocal.eq(ld.arlocal)
        for k in ("arready", "rvalid", "rdata", "rresp", "rlast"):
            m.d.comb += getattr(ld, k).eq(getattr(lsp, f"m_{k}"))
        for k in ("awvalid", "awaddr", "awlen", "wvalid", "wdata", "wstrb", "wlast", "bready"):
            m.d.comb += getattr(ssp, f"m_{k}").eq(getattr(st, k))
        for k in ("awready", "wready", "bvalid", "bresp"):
            m.d.comb += getattr(st, k).eq(getattr(ssp, f"m_{k}"))
        lax = local.axi
        # LD's reads of local memory (64 bits wide): through the upsizer on a wider bus
        if self._ld_upsizer is not None:
            m.submodules.ld_upsizer = up = ResetInserter(self.start)(self._ld_upsizer)
            for k in ("arvalid", "araddr", "arlen", "rready"):
                m.d.comb += getattr(up, f"m_{k}").eq(getattr(lsp, f"l_{k}"))
            for k in ("arready", "rvalid", "rdata", "rresp", "rlast"):
                m.d.comb += getattr(lsp, f"l_{k}").eq(getattr(up, f"m_{k}"))
            lrd = _Prefixed(up, "s_")
        else:
            lrd = _Prefixed(lsp, "l_")
        m.d.comb += [lax.arvalid.eq(lrd.arvalid), lax.araddr.eq(lrd.araddr),
                     lax.arlen.eq(lrd.arlen), lax.arsize.eq(3), lax.arburst.eq(1),
                     lax.arid.eq(1), lrd.arready.eq(lax.arready),
                     lrd.rvalid.eq(lax.rvalid), lrd.rdata.eq(lax.rdata),
                     lrd.rresp.eq(lax.rresp), lrd.rlast.eq(lax.rlast),
                     lax.rready.eq(lrd.rready),
                     lax.awvalid.eq(ssp.l_awvalid), lax.awaddr.eq(ssp.l_awaddr),
                     lax.awlen.eq(ssp.l_awlen), lax.awsize.eq(3), lax.awburst.eq(1),
                     lax.awid.eq(0), ssp.l_awready.eq(lax.awready),
                     lax.wvalid.eq(ssp.l_wvalid), lax.wdata.eq(ssp.l_wdata),
                     lax.wstrb.eq(ssp.l_wstrb), lax.wlast.eq(ssp.l_wlast),
                     ssp.l_wready.eq(lax.wready), ssp.l_bvalid.eq(lax.bvalid),
                     ssp.l_bresp.eq(lax.bresp), lax.bready.eq(ssp.l_bready)]

        # ---- AXI: read arbitration (fetch id 0, LD id 1), writes from ST.
        bus = self.axi
        B = c.axi_bytes
        parts = B // 8                  # 8-byte beats of a narrow burst per bus word
        last_ld = Signal()  # round robin: who won the last address handshake
        pick_ld = Signal()
        m.d.comb += pick_ld.eq(lsp.e_arvalid & (~fetch.arvalid | ~last_ld))
        m.d.comb += [
            bus.arvalid.eq(fetch.arvalid | lsp.e_arvalid),
            bus.araddr.eq(Mux(pick_ld, lsp.e_araddr, fetch.araddr)),
            bus.arlen.eq(Mux(pick_ld, lsp.e_arlen, fetch.arlen)),
            bus.arid.eq(pick_ld), bus.arsize.eq(Mux(pick_ld, (B - 1).bit_length(), 3)),
            bus.arburst.eq(1),
            lsp.e_arready.eq(bus.arready & pick_ld), fetch.arready.eq(bus.arready & ~pick_ld),
            bus.rready.eq(Mux(bus.rid, lsp.e_rready, fetch.rready)),
            lsp.e_rvalid.eq(bus.rvalid & bus.rid), fetch.rvalid.eq(bus.rvalid & ~bus.rid),
            lsp.e_rdata.eq(bus.rdata), lsp.e_rresp.eq(bus.rresp), lsp.e_rlast.eq(bus.rlast),
            fetch.rresp.eq(bus.rresp), fetch.rlast.eq(bus.rlast),
        ]
        with m.If(bus.arvalid & bus.arready):
            m.d.sync += last_ld.eq(pick_ld)
        if parts == 1:
            m.d.comb += fetch.rdata.eq(bus.rdata)
        else:
            # a line fill is 64-byte aligned: its k-th 8-byte beat is on part k % parts
            fetch_beat = Signal(3)
            with m.If(fetch.rvalid & fetch.rready):
                m.d.sync += fetch_beat.eq(fetch_beat + 1)
            with m.If(self.start):
                m.d.sync += fetch_beat.eq(0)
            m.d.comb += fetch.rdata.eq(bus.rdata.word_select(fetch_beat[:(parts - 1).bit_length()],
                                                             64))
        m.d.comb += [
            bus.awvalid.eq(ssp.e_awvalid), bus.awaddr.eq(ssp.e_awaddr), bus.awlen.eq(ssp.e_awlen),
            bus.awsize.eq(3), bus.awburst.eq(1), bus.awid.eq(0), ssp.e_awready.eq(bus.awready),
            bus.wvalid.eq(ssp.e_wvalid), bus.wlast.eq(ssp.e_wlast), ssp.e_wready.eq(bus.wready),
            ssp.e_bvalid.eq(bus.bvalid), ssp.e_bresp.eq(bus.bresp), bus.bready.eq(ssp.e_bready),
        ]
        if parts == 1:
            m.d.comb += [bus.wdata.eq(ssp.e_wdata), bus.wstrb.eq(ssp.e_wstrb)]
        else:
            # ST's narrow bursts: beat k of a burst at `awaddr` is on part
            # (awaddr / 8 + k) % parts; the bursts' first parts wait in order for their data
            k = (parts - 1).bit_length()
            m.submodules.st_parts = st_parts = ResetInserter(self.start)(
                SyncFIFOBuffered(width=k, depth=4))
            w_part = Signal(k)
            w_going = Signal()  # the burst's first beat has gone
            part_now = Mux(w_going, w_part, st_parts.r_data)
            m.d.comb += [st_parts.w_en.eq(bus.awvalid & bus.awready),
                         st_parts.w_data.eq(ssp.e_awaddr[3:3 + k]),
                         bus.wdata.eq(ssp.e_wdata.replicate(parts)),
                         bus.wstrb.eq(ssp.e_wstrb << (part_now << 3))]
            with m.If(bus.wvalid & bus.wready):
                m.d.sync += [w_part.eq(part_now + 1), w_going.eq(~bus.wlast)]
                m.d.comb += st_parts.r_en.eq(bus.wlast)
            with m.If(self.start):
                m.d.sync += w_going.eq(0)

        # ---- Faults: the first one wins.
        unit_errors = ((fe_ld, ld.done, ld.error), (fe_mx, mx.done, mx.error),
                       (fe_vx, vx.done, vx.error), (fe_st, st.done, st.error),
                       (fe_net, net.done, net.error))
        with m.If(self.start):
            m.d.sync += [fault.eq(ErrorCode.NONE), fault_pc.eq(0), halt.eq(0)]
        with m.Elif(~halt):
            with m.If(disp.error != ErrorCode.NONE):
                m.d.sync += [fault.eq(disp.error), fault_pc.eq(disp.error_pc), halt.eq(1)]
            for fe, done, err in unit_errors:
                with m.Elif(done & (err != ErrorCode.NONE)):
                    m.d.sync += [fault.eq(err), fault_pc.eq(fe.pc), halt.eq(1)]

        # ---- Completion (after a fault: once no unit holds an instruction).
        units_quiet = Cat(*[~self._front[u].busy for u in UNITS]).all()
        with m.If(self.start):
            m.d.sync += [running.eq(1), self.done.eq(0)]
        # the instruction cache's fills in flight complete first (their beats are owed)
        with m.Elif(running & fetch.idle & (disp.halted | (halt & units_quiet))):
            m.d.sync += [running.eq(0), self.done.eq(1)]

        # ---- Performance counters (since start).
        cnt = {name: self.counters[k] for k, name in enumerate(COUNTERS)}
        with m.If(self.start):
            m.d.sync += cnt["cycles"].eq(0)
            for u in UNITS:
                m.d.sync += cnt[f"{u.name.lower()}_busy"].eq(0)
        with m.Elif(running):
            m.d.sync += cnt["cycles"].eq(cnt["cycles"] + 1)
            for u in UNITS:
                m.d.sync += cnt[f"{u.name.lower()}_busy"].eq(
                    cnt[f"{u.name.lower()}_busy"] + self._front[u].running)
        for u in UNITS:
            m.d.comb += [cnt[f"{u.name.lower()}_stall"].eq(self._front[u].stall_cycles),
                         cnt[f"{u.name.lower()}_instructions"].eq(self._front[u].instructions)]
        m.d.comb += [cnt["mac_cycles"].eq(mx.busy_cycles), cnt["pairs"].eq(mx.pairs),
                     cnt["dense_pairs"].eq(mx.dense_pairs),
                     cnt["dma_read_bytes"].eq(ld.bytes_read), cnt["dma_write_bytes"].eq(st.bytes_written),
                     cnt["icache_hits"].eq(fetch.hits), cnt["icache_misses"].eq(fetch.misses),
                     cnt["icache_prefetches"].eq(fetch.prefetches),
                     cnt["net_bytes_sent"].eq(net.bytes_sent),
                     cnt["net_bytes_received"].eq(net.bytes_received)]
        return m


class _Prefixed:
    """``obj``'s members named ``prefix + name``, as attributes ``name``."""

    def __init__(self, obj, prefix: str):
        self._obj, self._prefix = obj, prefix

    def __getattr__(self, name):
        return getattr(self._obj, self._prefix + name)
