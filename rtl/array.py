"""The tiled array: a ``width x height`` mesh of cores, one router each, and the AXI4
interconnects to the shared external memory (one port per group of columns)."""

from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from snpu.config import CoreConfig, memory_port
from snpu.config import memory_ports as _memory_ports
from .axi import ID_BITS, AxiSignature
from .axi_interconnect import AxiInterconnect, index_bits_for
from .core import COUNTERS, Core, core_signature
from .mesh import RouterMesh
from .mesh import node_index as core_index
from .microcode import PC_BITS
from .router import PORTS
from .status import ErrorCode


class Array(wiring.Component):
    """``width x height`` cores (same configuration) on a :class:`~.mesh.RouterMesh`: core
    (x, y) sits at column x, row y (north is y + 1) on its router's local port.
    The external memory has ``memory_ports`` AXI4 ports ``axi[p]`` (default: one per mesh
    column; :func:`snpu.config.memory_ports`), all onto the same memory.  The cores of
    column ``x`` use port :func:`snpu.config.memory_port` ``(x, width, memory_ports)``
    through that port's :class:`~.axi_interconnect.AxiInterconnect` (the ID's upper bits
    carry the core's index within its port's group, row-major).

    Control/status: pulse ``start`` with each core's ``rom_base`` / ``rom_words`` (all
    cores start in the same cycle: no packet can arrive at a core before its start
    resets its NET unit).  ``done`` rises when every core is done, or as soon as one
    core has stopped on a fault (the others may be waiting for packets it will never
    send); ``error[k]`` / ``error_pc[k]`` are core k's status, ``busy`` is high while any
    core runs.  ``counters[k]`` are core k's performance counters (:data:`.core.COUNTERS`),
    ``router_flits[k][p]`` the flits core k's router has sent out of port ``p``
    (:data:`.noc.PORT_NAMES`).

    Per-core ports are indexed by :func:`core_index`.

    ``core_module``: instantiate the cores as instances of this Verilog module (the core's
    own Verilog, emitted once: :func:`array_verilog`) instead of elaborating each copy.
    """

    def __init__(self, config: CoreConfig | None = None, width: int = 2, height: int = 2, *,
                 core_module: str | None = None, memory_ports: int | None = None):
        self.config = config or CoreConfig()
        self.width, self.height = width, height
        self.ports = ports = _memory_ports((width, height), memory_ports)
        n = width * height
        #: port -> the core indices (row-major) it serves, in its interconnect's order
        self.port_cores = [[core_index(x, y, width) for y in range(height) for x in range(width)
                            if memory_port(x, width, ports) == p] for p in range(ports)]
        # the cores, or (instantiating a Verilog module) just their interfaces
        self.cores = [Core(self.config) if core_module is None
                      else core_signature(self.config.axi_data_bits).create(path=(f"core{k}",))
                      for k in range(n)]
        self.network = RouterMesh(width, height)
        index_bits = index_bits_for(max(len(g) for g in self.port_cores))
        self.interconnects = [AxiInterconnect(len(g), index_bits=index_bits,
                                              data_bits=self.config.axi_data_bits)
                              for g in self.port_cores]
        self.core_module = core_module
        super().__init__({
            "start": In(1),
            "rom_base": In(data.ArrayLayout(32, n)),
            "rom_words": In(data.ArrayLayout(PC_BITS + 1, n)),
            "busy": Out(1),
            "done": Out(1),
            "error": Out(data.ArrayLayout(ErrorCode, n)),
            "error_pc": Out(data.ArrayLayout(PC_BITS, n)),
            "counters": Out(data.ArrayLayout(data.ArrayLayout(64, len(COUNTERS)), n)),
            "router_flits": Out(data.ArrayLayout(data.ArrayLayout(32, PORTS), n)),
            "axi": Out(AxiSignature(ID_BITS + index_bits,
                                    self.config.axi_data_bits)).array(ports),
        })

    def elaborate(self, platform):
        m = Module()
        w, h = self.width, self.height
        m.submodules.network = net = self.network
        port_of = {}  # core index -> (interconnect, its slave index)
        for p, (ic, group) in enumerate(zip(self.interconnects, self.port_cores)):
            m.submodules[f"interconnect{p}"] = ic
            wiring.connect(m, ic.m, wiring.flipped(self.axi[p]))
            port_of.update({k: (ic, j) for j, k in enumerate(group)})
        dones, faults, busy = [], [], []
        for y in range(h):
            for x in range(w):
                k = core_index(x, y, w)
                core = self.cores[k]
                m.submodules[f"core_{x}_{y}"] = (_instance(self.core_module, core)
                                                 if self.core_module else core)
                m.d.comb += [core.mesh_x.eq(x), core.mesh_y.eq(y),
                             core.mesh_w.eq(w), core.mesh_h.eq(h),
                             core.start.eq(self.start), core.rom_base.eq(self.rom_base[k]),
                             core.rom_words.eq(self.rom_words[k]),
                             self.error[k].eq(core.error), self.error_pc[k].eq(core.error_pc),
                             self.counters[k].eq(core.counters)]
                for p in range(PORTS):
                    m.d.comb += self.router_flits[k][p].eq(net.flits[k][p])
                ic, j = port_of[k]
                wiring.connect(m, core.axi, ic.s[j])
                wiring.connect(m, core.noc_out, net.inject[k])
                wiring.connect(m, net.eject[k], core.noc_in)
                dones.append(core.done)
                faults.append(core.done & (core.error != ErrorCode.NONE))
                busy.append(core.busy)
        m.d.comb += [self.done.eq(Cat(*dones).all() | Cat(*faults).any()),
                     self.busy.eq(Cat(*busy).any())]
        return m


def _instance(module: str, iface) -> Instance:
    """An instance of Verilog module ``module`` (a component converted on its own) wired to
    ``iface`` (an interface with the component's signature), with the port names
    Amaranth gives them."""
    ports = {"i_clk": ClockSignal(), "i_rst": ResetSignal()}
    for path, member, value in iface.signature.flatten(iface):
        name = "__".join(str(p) for p in path)
        ports[("o_" if member.flow == Out else "i_") + name] = Value.cast(value)
    return Instance(module, **ports)


def array_verilog(config: CoreConfig, width: int, height: int, name: str = "snpu_array",
                  memory_ports: int | None = None, platform=None) -> str:
    """Verilog of a ``width x height`` array: the core's module (``<name>_core``) once,
    then the array module ``name`` instantiating it ``width * height`` times.  Much smaller
    (and quicker for Verilator) than elaborating every copy of the core.  ``platform``:
    what the core is elaborated for (:mod:`.target`; None: simulation)."""
    from amaranth.back import verilog

    core = verilog.convert(Core(config), name=f"{name}_core", platform=platform)
    top = verilog.convert(Array(config, width, height, core_module=f"{name}_core",
                                memory_ports=memory_ports), name=name)
    return core + "\n" + top
