"""Matrix (MX) unit datapath: one neuron-side index source, P lanes with private neuron-buffer
copies and weight banks."""

from types import SimpleNamespace

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from snpu.config import CoreConfig
from snpu.verif import timing

from .bits import popcount
from .index_memory import IndexMemory
from .lane import FC_CONFIG, RESULT, MatrixLane, fc_modes
from .ports import wide_read_port, write_port_signature
from .row_broadcast import RowBroadcast
from .side_source import SideSource
from .target import NO_RW_CHECK


def buffer_write_ports(config: CoreConfig, flow) -> dict:
    """The MX unit's buffers' write ports (``flow`` ``In`` on the MX unit, ``Out`` on the
    LD unit that drives them): words of the AXI bus's width, byte enables (``nidx``: bit
    enables)."""
    W, B = config.axi_data_bits, config.axi_bytes
    return {"nbuf_w": flow(write_port_signature(config.nbuf_bytes // B, 8, W)),
            "nidx_w": flow(write_port_signature(config.nidx_bytes // B, 1, W)),
            "wbuf_w": flow(write_port_signature(config.wbuf_bytes // B, 8, W)),
            "widx_w": flow(write_port_signature(config.widx_bytes // B, 8, W))}


#: Stride entries the neuron side's stride-to-direct expander takes per cycle
#: (:data:`snpu.verif.timing.STRIDE_WINDOW`, which the cost model uses).  Only a vector's
#: first round of rows waits for it: the side source replays the converted chunks for the
#: other rounds at one per cycle.
STRIDE_WINDOW = timing.STRIDE_WINDOW


class MatrixUnit(wiring.Component):
    """The first and second input caches plus the MAC lanes of the MX unit.

    The neuron index buffer (``nidx``) has one copy, read by the unit's one neuron-side
    :class:`SideSource`: every lane combines the same input vector's index with its own
    weight rows, so the index is walked (and converted, claims 9 and 10) once and handed to
    the lanes by a :class:`RowBroadcast`.  The lanes' weight sources convert nothing: stride
    weights go raw into the merge, dense and direct ones into the AND.  Every lane owns a
    copy of the neuron buffer (``nbuf``, written through one broadcast write port: lanes
    fetch different neurons in the same cycle) and its own weight value bank (``wbuf``) and
    weight index bank (``widx``), written through a port with a lane select.  ``start`` runs
    one fc over all lanes; lane ``g`` emits the sums of rows ``r = g, g + P, ...`` on
    ``results[g]``.  Weights and neurons must not be written while an fc that reads them runs
    (the dependency tokens of the ISA guarantee it).  ``busy`` falls the cycle after the
    fc's last result is taken (one counter of the results owed, for all lanes, loaded from
    ``cfg.results``, which must be nvec x rows: the MX unit's product).  ``pairs``:
    the pairs the last fc multiplied, complete once its results have been taken.

    Memories are written a word of the AXI bus's width at a time (``axi_data_bits``: 64,
    128 or 256; the LD unit's words) and read 64 bits at a time through a synchronous read
    port each (:func:`wide_read_port`); ``nidx`` writes have bit enables (the sparse
    processing unit writes one bit per loaded byte; an :class:`IndexMemory` makes them
    read-modify-writes of a block RAM), the others byte enables.  A write is registered
    here, at the buffers, and lands the cycle after the LD unit presents it (the two units
    sit far apart on the die: the register halves the wire), an ``nidx`` write two
    cycles later; the LD unit's ``done`` pulses the cycle after its last write, and the token it
    leads to starts an fc two cycles later at the earliest, whose first index read comes
    two cycles after its start: every write has landed, with a cycle to spare.  Throughput: ``lanes`` pairs per cycle.

    Parameters
    ----------
    config:
        Core configuration (lanes and buffer sizes).
    """

    def __init__(self, config: CoreConfig):
        self._cfg = config
        P = config.lanes
        self._lanes = [MatrixLane(g, P) for g in range(P)]
        self._nsrc = SideSource(STRIDE_WINDOW)
        self._broadcast = RowBroadcast(P)
        W, B = config.axi_data_bits, config.axi_bytes
        self._nidx = IndexMemory(config.nidx_bytes // B, W)
        self._mems = {
            name: [Memory(shape=W, depth=size // B, init=[], attrs=NO_RW_CHECK) for _ in range(P)]
            for name, size in (("nbuf", config.nbuf_bytes), ("wbuf", config.wbuf_bytes),
                               ("widx", config.widx_bytes))
        }
        super().__init__({
            "start": In(1),
            "busy": Out(1),
            "error": Out(1),
            "cfg": In(FC_CONFIG),
            "results": Out(stream.Signature(RESULT)).array(P),
            "pairs": Out(32),
            **buffer_write_ports(config, In),
            "w_lane": In(range(P)),
        })

    @property
    def config(self) -> CoreConfig:
        return self._cfg

    def elaborate(self, platform):
        m = Module()
        P, c = self._cfg.lanes, self.cfg
        # ---- The neuron side, shared: ceil(rows / P) rounds of each vector's index.
        m.submodules.nsrc = nsrc = self._nsrc
        m.submodules.broadcast = bc = self._broadcast
        m.submodules.nidx = nidx = self._nidx
        modes = fc_modes(m, c, self.start)
        start_d = Signal()  # the source starts one cycle late, on registered counts
        rounds = Signal(12)
        m.d.sync += start_d.eq(self.start)
        with m.If(self.start):
            m.d.sync += rounds.eq((c.rows + P - 1) >> (P.bit_length() - 1))
        m.d.comb += [
            nsrc.start.eq(start_d), nsrc.fmt.eq(c.nfmt), nsrc.packed.eq(modes.n_packed),
            nsrc.to_entries.eq(modes.merge), nsrc.rows_follow.eq(0), nsrc.n.eq(c.n_in),
            nsrc.nvec.eq(c.nvec), nsrc.rows.eq(rounds), nsrc.idx_base.eq(c.nidx),
            nsrc.val_base.eq(c.nbuf), nsrc.idx_vec_stride.eq(c.nidx_stride),
            nsrc.val_vec_stride.eq(c.nstride),
            bc.start.eq(self.start), bc.rows.eq(c.rows), bc.merge.eq(modes.merge),
        ]
        # the LD unit's writes, registered at the buffers (class docstring)
        writes = {}
        fields = ("addr", "data", "en")
        for name in ("nbuf", "nidx", "wbuf", "widx"):
            port = getattr(self, f"{name}_w")
            writes[name] = held = SimpleNamespace(**{
                f: Signal.like(getattr(port, f), name=f"{name}_w_{f}") for f in fields})
            m.d.sync += [getattr(held, f).eq(getattr(port, f)) for f in fields]
        w_lane = Signal.like(self.w_lane)
        m.d.sync += w_lane.eq(self.w_lane)
        m.d.comb += [nidx.w.addr.eq(writes["nidx"].addr), nidx.w.data.eq(writes["nidx"].data),
                     nidx.w.en.eq(writes["nidx"].en),
                     nidx.r_addr.eq(nsrc.mem_addr), nidx.r_en.eq(nsrc.mem_en),
                     nsrc.mem_data.eq(nidx.r_data)]
        wiring.connect(m, nsrc.chunks, bc.i_chunks)
        wiring.connect(m, nsrc.entries, bc.i_entries)

        # ---- The lanes.
        busy, error, paired = [nsrc.busy], [nsrc.error], []
        for g, lane in enumerate(self._lanes):
            m.submodules[f"lane{g}"] = lane
            m.d.comb += [lane.start.eq(self.start), lane.cfg.eq(self.cfg), lane.modes.eq(modes),
                         lane.shape.eq(nsrc.shape)]
            wiring.connect(m, bc.items[g], lane.n_items)
            wiring.connect(m, lane.results, wiring.flipped(self.results[g]))
            for name, mems in self._mems.items():
                mem = mems[g]
                m.submodules[f"{name}{g}"] = mem
                wp = mem.write_port(granularity=8)
                port = writes[name]
                enable = port.en
                if name in ("wbuf", "widx"):
                    enable = Mux(w_lane == g, port.en, 0)
                m.d.comb += [wp.addr.eq(port.addr), wp.data.eq(port.data), wp.en.eq(enable)]
                wide_read_port(m, mem, getattr(lane, f"{name}_addr"),
                               getattr(lane, f"{name}_en"), getattr(lane, f"{name}_data"),
                               f"{name}{g}", platform=platform, write_ports=[wp])
            error.append(lane.error)
            paired.append(lane.paired)
        # The results still owed, one counter for all lanes (until 2026-12 every lane kept
        # its own, with its own nvec * rows multiplier): `cfg.results` (nvec * rows, the MX
        # unit's product) loaded the cycle after the source starts (the first result comes
        # many cycles later); the results taken each cycle are registered and counted off
        # the cycle after, and `owed` is compared with that count, so `busy` falls the
        # cycle after the last result is taken, with no adder before it.
        owed = Signal(24)
        any_expected, start_d2 = Signal(), Signal()
        m.d.sync += [any_expected.eq(c.results != 0), start_d2.eq(start_d)]
        taken_r = Signal(P)
        m.d.sync += taken_r.eq(Cat(*[r.valid & r.ready for r in self.results]))
        n_taken = popcount(m, taken_r, "taken_count")
        # (no result of an instruction is taken before its source starts, and the previous
        # one's were all taken before `busy` fell)
        with m.If(start_d2):
            m.d.sync += owed.eq(c.results)
        with m.Else():
            m.d.sync += owed.eq(owed - n_taken)
        results_owed = (owed[len(n_taken):] != 0) | (owed[:len(n_taken)] != n_taken)
        busy.append(results_owed | start_d | (start_d2 & any_expected))
        m.d.comb += [self.busy.eq(Cat(busy).any()), self.error.eq(Cat(error).any())]
        # The pairs counter, one for all lanes (until 2026-12 each lane counted its own in
        # 32 bits, added by a tree of 32-bit adders): the lanes' pulses into a register,
        # their count into another, added to the total.  The total counts a pair three
        # cycles after it enters a multiplier and is cleared three cycles after the start
        # (no pair of the previous instruction is left in the lanes then, none of this one
        # has reached it yet); the MX unit reads it with `done`, later than that (the last
        # pair's sum still has to leave the MAC and be written).
        paired_r = Signal(P)
        counted = Signal(range(P + 1))
        start_ddd = Signal()
        m.d.sync += [paired_r.eq(Cat(paired)), counted.eq(popcount(m, paired_r, "paired_count")),
                     start_ddd.eq(start_d2)]
        with m.If(start_ddd):
            m.d.sync += self.pairs.eq(0)
        with m.Else():
            m.d.sync += self.pairs.eq(self.pairs + counted)
        return m
