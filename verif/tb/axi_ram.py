"""Simulation models in Amaranth: an AXI4 RAM with back-pressure, and the simulation top.

:class:`AxiRam` is the external memory of fast RTL simulations: the whole simulation runs in
Verilator (no Python per cycle), the testbench loads and reads the memory array through the
simulator's handles.  :class:`SimTop` is what the cocotb testbench drives: the array of
cores (one core: a 1 x 1 array) plus, depending on ``memory``, this RAM (``"hdl"``) or the
array's AXI port brought out for cocotbext-axi's ``AxiRam`` (``"axiram"``).
"""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from snpu.config import CoreConfig
from snpu.rtl.axi import RESP_DECERR, RESP_OKAY, RESP_SLVERR, AxiSignature
from snpu.rtl.array import Array


class _Lfsr(Elaboratable):
    """A 16-bit maximal LFSR; ``stall`` is high with probability ``rate / 256``."""

    def __init__(self, seed: int):
        self.seed = seed
        self.rate = Signal(8)
        self.stall = Signal()

    def elaborate(self, platform):
        m = Module()
        s = Signal(16, init=self.seed)
        m.d.sync += s.eq(Cat(s[1:], s[0] ^ s[2] ^ s[3] ^ s[5]))
        m.d.comb += self.stall.eq(s[:8] < self.rate)
        return m


def _next_beat(addr: Value, size: Value, max_size: int) -> Value:
    """The address of an INCR burst's beat after the one at ``addr``, beats of ``2**size``
    bytes (sizes 3 to ``max_size``; a narrow burst's first beat may be unaligned)."""
    nxt = (addr[3:] + 1) << 3
    for sz in range(4, max_size + 1):
        nxt = Mux(size == sz, (addr[sz:] + 1) << sz, nxt)
    return nxt[:32]


class _Port:
    """One port of :class:`RamArray`: its signals, as ``Memory`` ports name them."""

    def __init__(self, name: str, addr_bits: int, write: bool, word_bytes: int = 8):
        self.addr = Signal(addr_bits, name=f"{name}_addr")
        self.data = Signal(8 * word_bytes, name=f"{name}_data")
        self.en = Signal(word_bytes if write else 1, name=f"{name}_en")


class RamArray(Elaboratable):
    """The words of :class:`AxiRam`: ``depth`` 64-bit words with synchronous, non-transparent
    read ports (``data`` holds while ``en`` is low) and byte-enabled write ports, one each
    per AXI port.  The ports are ``word_bytes`` wide (the AXI bus's width: 8, 16 or 32
    bytes; addresses in such words), the storage stays in 64-bit words.

    It is a Verilog module of its own (:meth:`verilog`) instantiated here, not an Amaranth
    ``Memory``: Amaranth writes a memory's initial contents word by word, and converting the
    testbench's 4 MiB memory took about ten minutes per simulator build.  Verilator starts
    the array at zero; the testbench writes words through ``<instance>.mem`` and reads the
    whole array back in one step: with ``dump`` high at a clock edge the array is written
    to ``DUMP_FILE`` (``$writememh``, in the simulator's working directory), instead of half
    a million handle reads of a few microseconds each.  It starts at zero."""

    MODULE = "snpu_sim_ram_array"
    DUMP_FILE = "snpu_ram.hex"

    def __init__(self, depth: int, ports: int, word_bytes: int = 8):
        self.depth, self.word_bytes = depth, word_bytes
        self.parts = word_bytes // 8
        self.addr_bits = max(1, (depth // self.parts - 1).bit_length())
        self.dump = Signal()
        self.reads = [_Port(f"r{p}", self.addr_bits, False, word_bytes) for p in range(ports)]
        self.writes = [_Port(f"w{p}", self.addr_bits, True, word_bytes) for p in range(ports)]

    def read_port(self, p: int) -> _Port:
        return self.reads[p]

    def write_port(self, p: int) -> _Port:
        return self.writes[p]

    def elaborate(self, platform):
        conns = {"i_clk": ClockSignal(), "i_dump": self.dump}
        for r in self.reads:
            conns.update({f"i_{r.addr.name}": r.addr, f"i_{r.en.name}": r.en,
                          f"o_{r.data.name}": r.data})
        for w in self.writes:
            conns.update({f"i_{w.addr.name}": w.addr, f"i_{w.en.name}": w.en,
                          f"i_{w.data.name}": w.data})
        return Instance(self.MODULE, **conns)  # the instance is the RAM's submodule ``mem``

    def verilog(self) -> str:
        """The module's Verilog (one module per memory size and port count)."""
        a, n, k = self.addr_bits, self.word_bytes, (self.parts - 1).bit_length()
        bits = 8 * n

        def word(p, j):  # the 64-bit word of part j of port p's wide word
            return f"mem[{{{p}_addr, {k}'d{j}}}]" if k else f"mem[{p}_addr]"

        ports = ["input wire clk", "input wire dump"]
        body = [f"  reg [63:0] mem [{self.depth - 1}:0];",
                # zero at time 0 (Verilator does so anyway; Icarus would start at X)
                "  integer i;",
                f"  initial for (i = 0; i < {self.depth}; i = i + 1) mem[i] = 64'd0;",
                "  always @(posedge clk) begin",
                f'    if (dump) $writememh("{self.DUMP_FILE}", mem);']
        for p in range(len(self.reads)):
            ports += [f"input wire [{a - 1}:0] r{p}_addr", f"input wire r{p}_en",
                      f"output reg [{bits - 1}:0] r{p}_data"]
            parts = ", ".join(word(f"r{p}", j) for j in reversed(range(self.parts)))
            body.append(f"    if (r{p}_en) r{p}_data <= "
                        + (f"{{{parts}}};" if self.parts > 1 else f"{parts};"))
        for p in range(len(self.writes)):
            ports += [f"input wire [{a - 1}:0] w{p}_addr", f"input wire [{n - 1}:0] w{p}_en",
                      f"input wire [{bits - 1}:0] w{p}_data"]
            body += [f"    if (w{p}_en[{b}]) {word(f'w{p}', b // 8)}[{8 * (b % 8) + 7}:"
                     f"{8 * (b % 8)}] <= w{p}_data[{8 * b + 7}:{8 * b}];" for b in range(n)]
        body.append("  end")
        lines = [f"module {self.MODULE}(", "  " + ",\n  ".join(ports), ");", *body,
                 "endmodule", ""]
        return "\n".join(lines)


class AxiRam(wiring.Component):
    """An AXI4 slave RAM of ``size`` bytes (``data_bits`` of data: 64, 128 or 256; INCR
    bursts, narrow ones too: a beat of ``2**size`` bytes at a time; write strobes) with
    ``ports`` independent AXI4 slave ports ``axi[p]`` onto the same memory (a multi-channel
    memory: each port has its own queues and serves a beat per cycle; two ports writing the
    same word in one cycle is undefined, and the golden model reports it as a race first).

    On each port up to four read bursts are queued and streamed back to back; the write channel takes one
    burst at a time.  With ``stall_rate = r`` every handshake is held off with probability
    ``r / 256`` per cycle (pseudo-random), so the core sees back-pressure on every channel.
    Addresses in ``[err_lo, err_hi)`` answer SLVERR; addresses beyond ``size`` DECERR.
    Addresses in ``[far_lo, far_hi)`` are *far memory*
    (:class:`~snpu.verif.timing.FarMemory`): a read burst there waits ``far_latency`` cycles
    before its first word, and every beat there, read or written, takes ``far_beat``
    cycles (0 or 1: full speed).  With ``dump`` high at a clock edge the words are written
    to a file (:class:`RamArray`).
    """

    def __init__(self, size: int, id_bits: int = 1, ports: int = 1, data_bits: int = 64):
        if size % 8 or size & (size - 1):
            raise ValueError(f"size must be a power of two, got {size}")
        if ports < 1:
            raise ValueError(f"an AXI RAM needs at least one port, got {ports}")
        self._size = size
        self._id_bits = id_bits
        self.ports = ports
        self._bytes = data_bits // 8
        self.mem = RamArray(size // 8, ports, self._bytes)
        super().__init__({
            "axi": In(AxiSignature(id_bits, data_bits)).array(ports),
            "stall_rate": In(8),
            "err_lo": In(32),
            "err_hi": In(32),
            "far_lo": In(32),
            "far_hi": In(32),
            "far_latency": In(16),
            "far_beat": In(4),
            "dump": In(1),
        })

    def _resp(self, addr):
        return Mux(addr >= self._size, RESP_DECERR,
                   Mux((addr >= self.err_lo) & (addr < self.err_hi), RESP_SLVERR, RESP_OKAY))

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = self.mem
        m.d.comb += self.mem.dump.eq(self.dump)
        for p in range(self.ports):
            self._port(m, p)
        return m

    def _port(self, m: Module, p: int) -> None:
        """Port ``p``'s queues and state machines (submodules suffixed with ``p`` after the
        first port, so a one-port RAM keeps its names)."""
        bus = self.axi[p]
        mem = self.mem
        sfx = "" if p == 0 else f"_{p}"
        n = self._bytes
        lg = (n - 1).bit_length()
        bits = 8 * n
        m.submodules[f"ar{sfx}"] = arq = SyncFIFOBuffered(width=43, depth=4)
        m.submodules[f"rdata{sfx}"] = rq = SyncFIFOBuffered(width=bits + 3, depth=8)
        stall = []
        for k, seed in enumerate((0xACE1, 0x1D2C, 0xBEEF, 0x7A31, 0x0F0F)):
            lfsr = _Lfsr((seed + 0x3C5 * p) & 0xFFFF or 1)
            m.submodules[f"lfsr{k}{sfx}"] = lfsr
            m.d.comb += lfsr.rate.eq(self.stall_rate)
            stall.append(lfsr.stall)
        st_ar, st_r, st_aw, st_w, st_b = stall

        # ---- Reads: queue bursts, read one word per cycle into the data queue.
        m.d.comb += [bus.arready.eq(arq.w_rdy & ~st_ar), arq.w_en.eq(bus.arvalid & bus.arready),
                     arq.w_data.eq(Cat(bus.araddr, bus.arlen, bus.arsize))]
        rp = mem.read_port(p)
        cur_addr = Signal(32)
        cur_size = Signal(3)  # the burst's beat: 2**cur_size bytes
        cur_left = Signal(9)
        busy = Signal()
        inflight = Signal()
        meta = Signal(3)  # resp, last of the word in flight
        issue = Signal()
        # far memory: a burst's latency, then one word per far_beat cycles
        wait = Signal(16)
        pace = Signal(4)
        far_rd = Signal()
        m.d.comb += issue.eq(busy & (rq.level + inflight < rq.depth - 1) & (wait == 0)
                             & (~far_rd | (pace == 0)))
        with m.If(wait != 0):
            m.d.sync += wait.eq(wait - 1)
        with m.If(pace != 0):
            m.d.sync += pace.eq(pace - 1)
        with m.If(~busy & arq.r_rdy):
            m.d.comb += arq.r_en.eq(1)
            a = arq.r_data[:32]
            is_far = (a >= self.far_lo) & (a < self.far_hi)
            m.d.sync += [busy.eq(1), cur_addr.eq(a), cur_left.eq(arq.r_data[32:40] + 1),
                         cur_size.eq(arq.r_data[40:]),
                         far_rd.eq(is_far), wait.eq(Mux(is_far, self.far_latency, 0))]
        m.d.comb += [rp.addr.eq(cur_addr[lg:]), rp.en.eq(issue)]
        with m.If(issue):
            with m.If(far_rd & (self.far_beat > 1)):
                m.d.sync += pace.eq(self.far_beat - 1)
            # the next beat: aligned to its size (a narrow burst's first beat may not be)
            m.d.sync += [cur_addr.eq(_next_beat(cur_addr, cur_size, lg)),
                         cur_left.eq(cur_left - 1),
                         meta.eq(Cat(self._resp(cur_addr), cur_left == 1))]
            with m.If(cur_left == 1):
                m.d.sync += busy.eq(0)
        m.d.sync += inflight.eq(issue)
        m.d.comb += [rq.w_en.eq(inflight), rq.w_data.eq(Cat(rp.data, meta))]
        m.d.comb += [bus.rvalid.eq(rq.r_rdy & ~st_r), bus.rdata.eq(rq.r_data[:bits]),
                     bus.rresp.eq(rq.r_data[bits:bits + 2]), bus.rlast.eq(rq.r_data[bits + 2]),
                     rq.r_en.eq(bus.rvalid & bus.rready)]
        # echo the burst's id: bursts are answered in order, so a small id queue suffices
        idq = SyncFIFOBuffered(width=self._id_bits, depth=8)
        m.submodules[f"idq{sfx}"] = idq
        m.d.comb += [idq.w_en.eq(bus.arvalid & bus.arready), idq.w_data.eq(bus.arid),
                     bus.rid.eq(idq.r_data), idq.r_en.eq(bus.rvalid & bus.rready & bus.rlast)]

        # ---- Writes: one burst at a time.
        wp = mem.write_port(p)
        w_addr = Signal(32)
        w_size = Signal(3)
        w_err = Signal(2)
        w_id = Signal(self._id_bits)
        with m.FSM(name=f"write{sfx}"):
            with m.State("ADDR"):
                m.d.comb += bus.awready.eq(~st_aw)
                with m.If(bus.awvalid & bus.awready):
                    m.d.sync += [w_addr.eq(bus.awaddr), w_size.eq(bus.awsize),
                                 w_err.eq(RESP_OKAY), w_id.eq(bus.awid)]
                    m.next = "DATA"
            with m.State("DATA"):
                w_far = (w_addr >= self.far_lo) & (w_addr < self.far_hi) & (self.far_beat > 1)
                w_pace = Signal(4)
                with m.If(w_pace != 0):
                    m.d.sync += w_pace.eq(w_pace - 1)
                m.d.comb += bus.wready.eq(~st_w & (~w_far | (w_pace == 0)))
                with m.If(bus.wvalid & bus.wready & w_far):
                    m.d.sync += w_pace.eq(self.far_beat - 1)
                resp = self._resp(w_addr)
                m.d.comb += [wp.addr.eq(w_addr[lg:]), wp.data.eq(bus.wdata),
                             wp.en.eq(Mux(bus.wvalid & bus.wready & (resp == RESP_OKAY), bus.wstrb, 0))]
                with m.If(bus.wvalid & bus.wready):
                    m.d.sync += w_addr.eq(_next_beat(w_addr, w_size, lg))
                    with m.If(resp != RESP_OKAY):
                        m.d.sync += w_err.eq(resp)
                    with m.If(bus.wlast):
                        m.next = "RESP"
            with m.State("RESP"):
                m.d.comb += [bus.bvalid.eq(~st_b), bus.bresp.eq(w_err), bus.bid.eq(w_id)]
                with m.If(bus.bvalid & bus.bready):
                    m.next = "ADDR"


class SimTop(wiring.Component):
    """The tiled array (:class:`~snpu.rtl.array.Array`, ``mesh = (width, height)``; a
    single core is the 1 x 1 array) as the cocotb testbench drives it.

    ``memory = "hdl"``: the array's AXI ports (``memory_ports``, default one per column)
    talk to an :class:`AxiRam` of ``mem_bytes`` with as many ports inside the design
    (``stall_rate``, ``err_lo``/``err_hi`` drive its back-pressure and error range,
    ``dump`` writes its words to a file).  Every input, ``rst`` included, is registered
    once before it reaches the design (see :meth:`elaborate`).
    ``memory = "axiram"``: the AXI port (one) is brought out as ``axi__*`` ports for
    cocotbext-axi.  ``core_module``: the cores are instances of this Verilog module
    (see :func:`~snpu.rtl.array.array_verilog`).
    """

    def __init__(self, config: CoreConfig, memory: str = "hdl", mem_bytes: int = 1 << 20,
                 mesh: tuple[int, int] = (1, 1), core_module: str | None = None,
                 memory_ports: int | None = None):
        if memory not in ("hdl", "axiram"):
            raise ValueError(f"memory must be 'hdl' or 'axiram', got {memory!r}")
        self.array = Array(config, *mesh, core_module=core_module, memory_ports=memory_ports)
        if memory == "axiram" and self.array.ports != 1:
            raise ValueError(f"memory 'axiram' drives one AXI port; this array has "
                             f"{self.array.ports}")
        self.memory = memory
        id_bits = self.array.axi[0].signature.id_bits
        self.ram = (AxiRam(mem_bytes, id_bits, self.array.ports, config.axi_data_bits)
                    if memory == "hdl" else None)
        ports = {name: member for name, member in self.array.signature.members.items()
                 if name != "axi"}
        if memory == "hdl":
            # the RAM's own inputs (back-pressure, error and far ranges, dump) are ports too
            self._ram_inputs = [n for n in self.ram.signature.members if n != "axi"]
            ports.update({"clk": In(1), "rst": In(1)})
            ports.update({n: self.ram.signature.members[n] for n in self._ram_inputs})
        else:
            ports["axi"] = Out(AxiSignature(id_bits, config.axi_data_bits))
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        m.submodules.array = array = self.array
        inputs = m.d.comb
        if self.ram is not None:
            # Every input of the design, reset included, passes a register first: no logic
            # depends on a top-level input combinationally, so Verilator's "input
            # combinational" region, evaluated on every call of the model (twice per
            # clock), holds none of the design's logic.
            m.domains.sync = sync = ClockDomain("sync")
            m.domains.tb = tb = ClockDomain("tb", reset_less=True)
            rst = Signal(init=1)
            m.d.comb += [sync.clk.eq(self.clk), tb.clk.eq(self.clk), sync.rst.eq(rst)]
            m.d.tb += rst.eq(self.rst)
            inputs = m.d.tb
        for name in self.signature.members:
            if name == "axi" or name not in self.array.signature.members:
                continue  # connected below, or the top's own: clock, reset, the RAM's inputs
            if self.signature.members[name].flow == In:
                inputs += getattr(array, name).eq(getattr(self, name))
            else:
                m.d.comb += getattr(self, name).eq(getattr(array, name))
        if self.ram is not None:
            m.submodules.ram = ram = self.ram
            for p in range(self.array.ports):
                wiring.connect(m, array.axi[p], ram.axi[p])
            inputs += [getattr(ram, n).eq(getattr(self, n)) for n in self._ram_inputs]
        else:
            wiring.connect(m, array.axi[0], wiring.flipped(self.axi))
        return m


def core_verilog(config: CoreConfig, name: str) -> str:
    """Verilog of the core's module ``<name>_core`` (most of a simulator build's Verilog,
    and half a minute of its time: the same for every memory model and mesh)."""
    from amaranth.back import verilog

    from snpu.rtl.core import Core

    return verilog.convert(Core(config), name=f"{name}_core")


def sim_verilog(config: CoreConfig, memory: str, mem_bytes: int, mesh: tuple[int, int],
                name: str, memory_ports: int | None, core: str) -> str:
    """Verilog of the simulation top ``name``: ``core``, the core's module once (as
    :func:`core_verilog` made it), then the array and the memory around it."""
    from amaranth.back import verilog

    sim_top = SimTop(config, memory, mem_bytes, mesh, core_module=f"{name}_core",
                     memory_ports=memory_ports)
    top = verilog.convert(sim_top, name=name)
    ram = sim_top.ram.mem.verilog() if sim_top.ram is not None else ""
    return core + "\n" + top + "\n" + ram
