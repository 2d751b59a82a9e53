"""One MAC lane of the matrix unit: mapping unit + operation unit for its rows of an fc."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .compactor import Compactor
from .connection import ConnectionUnit
from .layouts import ADDR, chunk_layout, pairs_layout
from .mac import MacUnit
from .side_source import ROW_SHAPE, Fmt, SideSource
from .skid import SkidBuffer

#: Configuration of one fc instruction as a lane sees it (registers mx.* and the operands).
FC_CONFIG = data.StructLayout({
    "nfmt": Fmt,
    "npacked": 1,
    "wfmt": Fmt,
    "mixed_to_stride": 1,   # mx.mixed: take claim 10's path for direct x stride
    "n_in": 16,
    "nvec": 12,
    "rows": 12,             # rows of the whole instruction
    "results": 24,          # nvec * rows, the sums it produces (the MX unit's product)
    "nbuf": ADDR,
    "nidx": ADDR,
    "wbuf": ADDR,
    "widx": ADDR,
    "nstride": 16,
    "nidx_stride": 16,
})

RESULT = data.StructLayout({"sum": signed(32)})  #: the MacUnit's output

#: How an fc combines its two sides, decided once from its configuration (:func:`fc_modes`).
FC_MODES = data.StructLayout({
    "merge": 1,      # both sides as stride entries into the merge (claims 8 and 10)
    "n_packed": 1,   # neuron values stored packed (kept elements only)
    "w_packed": 1,   # weight values stored packed
})

#: Depth of a lane's queue of neuron-side chunks / entries: how far lanes sharing the neuron
#: source may drift apart (about 2 % lost against independent lanes at d_w = 0.1,
#: d_a = 0.5 on 16 lanes; 8 loses about 5 %).
NEURON_QUEUE_DEPTH = 16

def fc_modes(m: Module, cfg, start) -> Value:
    """The :data:`FC_MODES` of ``cfg``, registered when ``start`` is high."""
    modes = Signal(FC_MODES)
    n_stride, w_stride = cfg.nfmt == Fmt.STRIDE, cfg.wfmt == Fmt.STRIDE
    n_direct, w_direct = cfg.nfmt == Fmt.DIRECT, cfg.wfmt == Fmt.DIRECT
    with m.If(start):
        m.d.sync += [
            modes.merge.eq((n_stride & w_stride) |
                           (cfg.mixed_to_stride & ((n_stride & w_direct) | (w_stride & n_direct)))),
            modes.n_packed.eq(cfg.npacked & (cfg.nfmt != Fmt.DENSE)),
            modes.w_packed.eq(cfg.wfmt != Fmt.DENSE),
        ]
    return modes


class MatrixLane(wiring.Component):
    """Computes, for every input vector ``v`` and every row ``r`` of the fc with
    ``r % lanes == lane``, the sum of ``x[v, i] * w[r, i]`` over the pairs selected by the
    combined index (:mod:`snpu.verif.golden`'s fc, one lane's share).

    Pipeline: the neuron side's index arrives from the matrix unit's shared source
    (``n_items``: vector ``v``'s index once per row of this lane) and the
    lane's own :class:`SideSource` walks its weight rows -> :class:`ConnectionUnit` (AND or
    stride merge) -> :class:`Compactor` (one pair per cycle) -> operand fetch from the lane's
    neuron-buffer copy and weight bank (addresses, the memories' words registered, the bytes
    selected and registered: three cycles) -> :class:`MacUnit`.  Rows of one lane follow each
    other without bubbles on the AND path.

    The weight side converts nothing: a stride weight index goes only into the merge (claims
    8 and 10) as its raw entries, a dense or direct one only into the AND.  The conversions
    of claims 9 and 10 happen once, on the shared neuron side (stride neurons expanded for
    the AND, direct neurons turned into entries for the merge), or for weights at compile
    time: the compiler stores them in the format their path takes.  The MX unit faults an
    fc asking otherwise (``FORMAT``).

    Throughput one pair per cycle; a row costs ``sum over its chunks of max(1, pairs)``
    cycles on the AND path.  Results leave in order (vector-major, then row), about 9
    cycles after the row's last chunk is read.

    Parameters
    ----------
    lane, lanes:
        This lane's number and the number of lanes ``P``.

    Members
    -------
    start : In(1)
        Begin an instruction; ``cfg`` must stay stable until its results have left (the
        matrix unit's ``busy`` counts them).
    error : Out(1)
        The weight index is malformed (sticky until the next ``start``).
    modes : In(FC_MODES)
        The instruction's modes, valid from the cycle after ``start``.
    shape : In(ROW_SHAPE)
        The row's shape (:data:`~.side_source.ROW_SHAPE`), from the neuron source: it
        starts in the cycle this lane's weight source does, with the same ``n``.
    n_items : In(stream)
        The neuron side's index, chunks (AND path) or stride entries (``modes.merge``)
        packed into the chunk layout (:func:`~.layouts.entry_in_chunk`).
    results : Out(stream)
        One int32 sum per (vector, row) of this lane.
    paired : Out(1)
        A pair enters the multiplier this cycle (the matrix unit counts them for all lanes).
    widx_*, nbuf_*, wbuf_* :
        Synchronous read ports of the lane's three 64-bit memories.
    """

    def __init__(self, lane: int, lanes: int):
        if not 0 <= lane < lanes:
            raise ValueError(f"lane {lane} is not in 0..{lanes - 1}")
        self._lane, self._lanes = lane, lanes
        # (the row's shape -- its chunk count and last chunk's mask -- comes from the
        # neuron source: the same n, started in the same cycle)
        self._wsrc = SideSource(convert=False, shared_shape=True)
        # (no queue on the weight side: the source's chunks leave its FIFO's output
        # register, its entries a skid buffer; the entries carry their values' addresses,
        # so the merge keeps no rank for them, and the merge checks their positions, which
        # the source does not)
        self._conn = ConnectionUnit(NEURON_QUEUE_DEPTH, weight_depth=0, weights_addressed=True,
                                    weights_checked=True)
        self._compactor = Compactor(1)
        self._mac = MacUnit(1)
        # Skid buffers cut the backward ready chain of the lane's pipeline (their readies are
        # registers); flip-flops, not LUT RAM queues (a 4-deep queue of LUT RAM costs six LUT
        # sites per four bits of width)
        self._pair_queue = SkidBuffer(pairs_layout(1))
        self._result_queue = SkidBuffer(RESULT)
        ports = {}
        for mem in ("widx", "nbuf", "wbuf"):
            ports[f"{mem}_addr"] = Out(ADDR - 3)
            ports[f"{mem}_en"] = Out(1)
            ports[f"{mem}_data"] = In(64)
        super().__init__({
            "start": In(1),
            "error": Out(1),
            "cfg": In(FC_CONFIG),
            "modes": In(FC_MODES),
            "n_items": In(stream.Signature(chunk_layout())),
            "shape": In(ROW_SHAPE),
            "results": Out(stream.Signature(RESULT)),
            "paired": Out(1),
            **ports,
        })

    def elaborate(self, platform):
        m = Module()
        P, g = self._lanes, self._lane
        m.submodules.wsrc = wsrc = self._wsrc
        m.submodules.conn = conn = self._conn
        m.submodules.compactor = comp = self._compactor
        m.submodules.mac = mac = self._mac
        c = self.cfg

        # rows of this lane (a function of cfg only): rows // P, one more for the lanes
        # below rows % P.  (Written so that everything but the last multiplexer is the
        # same in every lane -- the quotient, the remainder, the quotient plus one -- and
        # yosys keeps one copy for all: a lane's own (rows - g + P - 1) // P cost it 13
        # carry cells.)
        my_rows = Signal(12)
        q, r = c.rows // P, c.rows % P
        m.d.comb += my_rows.eq(Mux(r > g, q + 1, q))
        start_d = Signal()  # the sources start one cycle late, on registered row counts
        rows_reg = Signal(12)
        m.d.sync += start_d.eq(self.start)
        with m.If(self.start):
            m.d.sync += rows_reg.eq(my_rows)
        merge, n_packed, w_packed = self.modes.merge, self.modes.n_packed, self.modes.w_packed
        m.d.comb += [
            wsrc.start.eq(start_d), wsrc.fmt.eq(c.wfmt), wsrc.packed.eq(w_packed),
            wsrc.to_entries.eq(merge), wsrc.rows_follow.eq(1), wsrc.n.eq(c.n_in),
            wsrc.nvec.eq(c.nvec), wsrc.rows.eq(rows_reg), wsrc.idx_base.eq(c.widx),
            wsrc.val_base.eq(c.wbuf), wsrc.idx_vec_stride.eq(0), wsrc.val_vec_stride.eq(0),
            wsrc.shape.eq(self.shape),
            self.widx_addr.eq(wsrc.mem_addr), self.widx_en.eq(wsrc.mem_en),
            wsrc.mem_data.eq(self.widx_data),
        ]
        wiring.connect(m, wiring.flipped(self.n_items), conn.n_items)
        wiring.connect(m, wsrc.chunks, conn.w_chunks)
        wiring.connect(m, wsrc.entries, conn.w_entries)
        m.d.comb += [conn.merge.eq(merge), conn.n_packed.eq(n_packed), conn.w_packed.eq(w_packed),
                     comp.n_packed.eq(n_packed), comp.w_packed.eq(w_packed)]
        wiring.connect(m, conn.o, comp.i)
        m.submodules.pair_queue = pq = self._pair_queue
        wiring.connect(m, comp.o, pq.i)

        # Operand fetch: addresses this cycle, bytes from the memories the next.
        s1_valid, s1_pair, s1_last = Signal(), Signal(), Signal()
        s1_noff, s1_woff = Signal(3), Signal(3)
        s2_valid, s2_pair, s2_last = Signal(), Signal(), Signal()
        s2_noff, s2_woff = Signal(3), Signal(3)
        # (no reset: the valid flags say what they hold; a register without a reset can
        # be the block RAM's own output register, verif/tb/bram_outreg.py)
        s2_nword, s2_wword = Signal(64, reset_less=True), Signal(64, reset_less=True)
        s3_valid, s3_pair, s3_last = Signal(), Signal(), Signal()
        s3_n, s3_w = Signal(8, reset_less=True), Signal(8, reset_less=True)
        advance = Signal()
        m.d.comb += [advance.eq(~s3_valid | mac.i.ready), pq.o.ready.eq(advance)]
        pr = pq.o.payload
        m.d.comb += [
            self.nbuf_addr.eq(pr.n_addr[0][3:]), self.wbuf_addr.eq(pr.w_addr[0][3:]),
            self.nbuf_en.eq(advance), self.wbuf_en.eq(advance),
        ]
        with m.If(advance):
            m.d.sync += [s1_valid.eq(pq.o.valid), s1_pair.eq(pr.valid[0]), s1_last.eq(pr.last),
                         s1_noff.eq(pr.n_addr[0][:3]), s1_woff.eq(pr.w_addr[0][:3])]
        # The memory words into registers as they are (a block RAM's clock-to-output is
        # most of a cycle: its output feeds no logic), then the bytes selected out of them,
        # registered before the multiplier.
        with m.If(advance):
            m.d.sync += [s2_valid.eq(s1_valid), s2_pair.eq(s1_pair), s2_last.eq(s1_last),
                         s2_noff.eq(s1_noff), s2_woff.eq(s1_woff),
                         s2_nword.eq(self.nbuf_data), s2_wword.eq(self.wbuf_data)]
            m.d.sync += [s3_valid.eq(s2_valid), s3_pair.eq(s2_pair), s3_last.eq(s2_last),
                         s3_n.eq(s2_nword.word_select(s2_noff, 8)),
                         s3_w.eq(s2_wword.word_select(s2_woff, 8))]
        m.d.comb += [
            mac.i.valid.eq(s3_valid),
            mac.i.payload.n[0].eq(s3_n),
            mac.i.payload.w[0].eq(s3_w),
            mac.i.payload.valid.eq(s3_pair),
            mac.i.payload.last.eq(s3_last),
        ]
        m.submodules.result_queue = rq = self._result_queue
        wiring.connect(m, mac.o, rq.i)
        wiring.connect(m, rq.o, wiring.flipped(self.results))

        # The weight index's one fault: a stride position beyond n, which the merge finds
        # (sticky until the next start; the source, which converts nothing and leaves the
        # positions to the merge, finds none).
        beyond = Signal()
        m.d.comb += conn.n.eq(c.n_in)
        with m.If(self.start):
            m.d.sync += beyond.eq(0)
        with m.Elif(conn.w_beyond):
            m.d.sync += beyond.eq(1)
        # Bookkeeping: the pair pulse (the matrix unit counts them for all lanes, and the
        # results the lanes still owe).
        m.d.comb += [self.paired.eq(mac.i.valid & mac.i.ready & s3_pair),
                     self.error.eq(beyond)]
        return m
