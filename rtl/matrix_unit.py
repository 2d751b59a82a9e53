"""Matrix (MX) unit datapath: P lanes with private neuron-buffer copies and weight banks."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from snpu.config import CoreConfig

from .lane import FC_CONFIG, RESULT, MatrixLane


def write_port_signature(depth: int, granularity: int) -> wiring.Signature:
    """A 64-bit write port: word address, data and one enable per ``granularity`` bits."""
    return wiring.Signature({
        "addr": Out(range(depth)),
        "data": Out(64),
        "en": Out(64 // granularity),
    })


class MatrixUnit(wiring.Component):
    """The first and second input caches plus the MAC lanes of the MX unit.

    Every lane owns a copy of the neuron buffer (``nbuf``) and of the neuron index buffer
    (``nidx``), written together through one broadcast write port each, and its own weight
    value bank (``wbuf``) and weight index bank (``widx``), written through a port with a lane
    select.  ``start`` runs one fc over all lanes; lane ``g`` emits the sums of rows
    ``r = g, g + P, ...`` on ``results[g]``.  Weights and neurons must not be written while
    an fc that reads them runs (the dependency tokens of the ISA guarantee it).

    Memories are 64 bits wide with a synchronous read port each; ``nidx`` writes have bit
    enables (the sparse processing unit writes one bit per loaded byte), the others byte
    enables.  Throughput: ``lanes`` pairs per cycle.

    Parameters
    ----------
    config:
        Core configuration (lanes and buffer sizes).
    """

    def __init__(self, config: CoreConfig):
        self._cfg = config
        P = config.lanes
        self._lanes = [MatrixLane(g, P) for g in range(P)]
        self._mems = {
            name: [Memory(shape=64, depth=size // 8, init=[]) for _ in range(P)]
            for name, size in (("nbuf", config.nbuf_bytes), ("nidx", config.nidx_bytes),
                               ("wbuf", config.wbuf_bytes), ("widx", config.widx_bytes))
        }
        super().__init__({
            "start": In(1),
            "busy": Out(1),
            "error": Out(1),
            "cfg": In(FC_CONFIG),
            "results": Out(stream.Signature(RESULT)).array(P),
            "pairs": Out(32),
            "nbuf_w": In(write_port_signature(config.nbuf_bytes // 8, 8)),
            "nidx_w": In(write_port_signature(config.nidx_bytes // 8, 1)),
            "wbuf_w": In(write_port_signature(config.wbuf_bytes // 8, 8)),
            "widx_w": In(write_port_signature(config.widx_bytes // 8, 8)),
            "w_lane": In(range(P)),
        })

    @property
    def config(self) -> CoreConfig:
        return self._cfg

    def elaborate(self, platform):
        m = Module()
        busy, error, pairs = [], [], []
        for g, lane in enumerate(self._lanes):
            m.submodules[f"lane{g}"] = lane
            m.d.comb += [lane.start.eq(self.start), lane.cfg.eq(self.cfg)]
            wiring.connect(m, lane.results, wiring.flipped(self.results[g]))
            for name, mems in self._mems.items():
                mem = mems[g]
                m.submodules[f"{name}{g}"] = mem
                gran = 1 if name == "nidx" else 8
                wp = mem.write_port(granularity=gran)
                rp = mem.read_port()
                port = getattr(self, f"{name}_w")
                enable = port.en
                if name in ("wbuf", "widx"):
                    enable = Mux(self.w_lane == g, port.en, 0)
                m.d.comb += [wp.addr.eq(port.addr), wp.data.eq(port.data), wp.en.eq(enable),
                             rp.addr.eq(getattr(lane, f"{name}_addr")),
                             rp.en.eq(getattr(lane, f"{name}_en")),
                             getattr(lane, f"{name}_data").eq(rp.data)]
            busy.append(lane.busy)
            error.append(lane.error)
            pairs.append(lane.pairs)
        m.d.comb += [self.busy.eq(Cat(busy).any()), self.error.eq(Cat(error).any())]
        # A tree of adders for the total pairs counter, registered (it is only a counter).
        total = pairs
        while len(total) > 1:
            total = [total[k] + total[k + 1] if k + 1 < len(total) else total[k]
                     for k in range(0, len(total), 2)]
        m.d.sync += self.pairs.eq(total[0])
        return m
