"""The snpu core: seed 000's sparse neural-network operation module, composed."""

from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from snpu.config import CoreConfig

from .acc import Accumulators
from .axi import AxiSignature
from .buffers import OutputCache, ParamMemory
from .dispatch import Dispatcher
from .icache import InstructionCache
from .ld_unit import LoadUnit
from .microcode import PC_BITS, UNITS, micro_layout
from .mx_unit import MatrixController
from .st_unit import StoreUnit
from .status import ErrorCode
from .tokens import TokenChannels
from .unit import UnitFrontEnd
from .vx_unit import VectorUnit

#: performance counters, in the order of the ``counters`` output
COUNTERS = (
    "cycles",            # from start to done
    "ld_busy", "mx_busy", "vx_busy", "st_busy",          # cycles each unit was executing
    "ld_stall", "mx_stall", "vx_stall", "st_stall",      # ... of which waiting for tokens
    "ld_instructions", "mx_instructions", "vx_instructions", "st_instructions",
    "mac_cycles",        # cycles the MX unit spent in fc
    "pairs",             # neuron/weight pairs multiplied
    "dense_pairs",       # pairs a dense core would have multiplied
    "dma_read_bytes", "dma_write_bytes",
    "icache_hits", "icache_misses", "icache_prefetches",  # instruction cache accesses
)


class Core(wiring.Component):
    """One snpu core.

    Blocks (``docs/architecture.md``): instruction fetch (the instruction cache, filled over
    AXI) -> dispatcher (decodes each instruction into a microinstruction, checks legality)
    -> one queue per unit -> the LD, MX, VX and ST units, each behind a front end that takes
    and gives dependency tokens.  LD fills the neuron buffer (through the sparse processing
    unit), the weight banks, the accumulators and the parameter memory; MX runs the lanes
    (mapping unit + MACs) into the accumulators; VX pools, adds, requantises into the output
    cache; ST writes the output cache back.  One AXI4 master port (64-bit): reads are shared
    by fetch (``arid`` 0) and LD (``arid`` 1) round-robin per burst; writes come from ST.

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
        self._dispatch = Dispatcher()
        self._queues = {u: SyncFIFOBuffered(width=micro_layout(u).size, depth=config.queue_depth)
                        for u in UNITS}
        self._front = {u: UnitFrontEnd(u) for u in UNITS}
        self._tokens = TokenChannels(config.token_depth)
        self._ld = LoadUnit(config)
        self._mx = MatrixController(config)
        self._vx = VectorUnit(config)
        self._st = StoreUnit(config)
        self._acc = Accumulators(config)
        self._param = ParamMemory(config)
        self._obuf = OutputCache(config)
        super().__init__({
            "axi": Out(AxiSignature()),
            "start": In(1),
            "rom_base": In(32),
            "rom_words": In(PC_BITS + 1),
            "busy": Out(1),
            "done": Out(1),
            "error": Out(ErrorCode),
            "error_pc": Out(PC_BITS),
            "counters": Out(data.ArrayLayout(64, len(COUNTERS))),
        })

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
        for name, sub in (("fetch", fetch), ("dispatch", disp), ("tokens", tok), ("ld", ld),
                          ("mx", mx), ("vx", vx), ("st", st)):
            m.submodules[name] = ResetInserter(self.start)(sub)
        for name, sub in (("acc", acc), ("param", prm), ("obuf", obuf)):
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
        wiring.connect(m, fetch.resp, disp.fetch_resp)

        # ---- Queues and front ends.
        idle = [~self._front[u].busy & ~self._queues[u].r_rdy & (self._queues[u].level == 0)
                for u in UNITS]
        m.d.comb += disp.units_idle.eq(Cat(*idle).all())
        for k, u in enumerate(UNITS):
            q, fe = self._queues[u], self._front[u]
            src = disp.queue(u)
            m.d.comb += [q.w_data.eq(src.payload), q.w_en.eq(src.valid), src.ready.eq(q.w_rdy),
                         fe.micro.valid.eq(q.r_rdy), fe.micro.payload.eq(q.r_data),
                         q.r_en.eq(fe.micro.ready), fe.halt.eq(halt),
                         tok.wait_mask[k].eq(fe.wait_mask), fe.wait_ok.eq(tok.wait_ok[k]),
                         tok.take[k].eq(fe.take),
                         tok.signal_mask[k].eq(fe.signal_mask), fe.signal_ok.eq(tok.signal_ok[k]),
                         tok.give[k].eq(fe.give)]

        fe_ld, fe_mx, fe_vx, fe_st = (self._front[u] for u in UNITS)
        # LD
        m.d.comb += [ld.start.eq(fe_ld.start), ld.args.eq(fe_ld.args.ld), fe_ld.done.eq(ld.done),
                     ld.regs.eq(fe_ld.regs.value)]
        # MX
        m.d.comb += [mx.start.eq(fe_mx.start), mx.args.eq(fe_mx.args.fc), fe_mx.done.eq(mx.done),
                     mx.regs.eq(fe_mx.regs.value)]
        for name in ("nbuf_w", "nidx_w", "wbuf_w", "widx_w"):
            wiring.connect(m, getattr(ld, name), getattr(mx, name))
        m.d.comb += mx.w_lane.eq(ld.w_lane)
        # VX
        m.d.comb += [vx.start.eq(fe_vx.start), vx.op.eq(fe_vx.op), vx.args.eq(fe_vx.args),
                     fe_vx.done.eq(vx.done), vx.regs.eq(fe_vx.regs.value)]
        # ST
        m.d.comb += [st.start.eq(fe_st.start), st.args.eq(fe_st.args.st), fe_st.done.eq(st.done),
                     st.regs.eq(fe_st.regs.value)]

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

        # ---- AXI: read arbitration (fetch id 0, LD id 1), writes from ST.
        bus = self.axi
        last_ld = Signal()  # round robin: who won the last address handshake
        pick_ld = Signal()
        m.d.comb += pick_ld.eq(ld.arvalid & (~fetch.arvalid | ~last_ld))
        m.d.comb += [
            bus.arvalid.eq(fetch.arvalid | ld.arvalid),
            bus.araddr.eq(Mux(pick_ld, ld.araddr, fetch.araddr)),
            bus.arlen.eq(Mux(pick_ld, ld.arlen, fetch.arlen)),
            bus.arid.eq(pick_ld), bus.arsize.eq(3), bus.arburst.eq(1),
            ld.arready.eq(bus.arready & pick_ld), fetch.arready.eq(bus.arready & ~pick_ld),
            bus.rready.eq(Mux(bus.rid, ld.rready, fetch.rready)),
            ld.rvalid.eq(bus.rvalid & bus.rid), fetch.rvalid.eq(bus.rvalid & ~bus.rid),
        ]
        with m.If(bus.arvalid & bus.arready):
            m.d.sync += last_ld.eq(pick_ld)
        for dst in (ld, fetch):
            m.d.comb += [dst.rdata.eq(bus.rdata), dst.rresp.eq(bus.rresp), dst.rlast.eq(bus.rlast)]
        m.d.comb += [
            bus.awvalid.eq(st.awvalid), bus.awaddr.eq(st.awaddr), bus.awlen.eq(st.awlen),
            bus.awsize.eq(3), bus.awburst.eq(1), bus.awid.eq(0), st.awready.eq(bus.awready),
            bus.wvalid.eq(st.wvalid), bus.wdata.eq(st.wdata), bus.wstrb.eq(st.wstrb),
            bus.wlast.eq(st.wlast), st.wready.eq(bus.wready),
            st.bvalid.eq(bus.bvalid), st.bresp.eq(bus.bresp), bus.bready.eq(st.bready),
        ]

        # ---- Faults: the first one wins.
        unit_errors = ((fe_ld, ld.done, ld.error), (fe_mx, mx.done, mx.error),
                       (fe_vx, vx.done, vx.error), (fe_st, st.done, st.error))
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
                     cnt["icache_prefetches"].eq(fetch.prefetches)]
        return m
