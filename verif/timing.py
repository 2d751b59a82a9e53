"""Cycle estimates per instruction: the cost model of the golden model and the compiler.

These are estimates from the hardware parameters, not a cycle-exact model of the RTL (seed
002 allows either "measured by running" or "estimated from the hardware parameters").  The
constants are calibrated against RTL runs (``bench/core_perf.py`` reports both side by
side).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# The DMA and VX constants below were fitted to back-to-back single-instruction programs on
# the RTL (bench/schedule.py's ``calibration`` section measures them again and reports the
# model's error per instruction kind and per layer kind).

#: cycles from issuing an AXI burst to its first beat, including address generation
DMA_LATENCY = 12
#: ld / ldc: the cycles a word spends in the LD unit's two skid buffers (the bus's beats
#: registered, then the realigned or expanded words) before it is written, and the arm
#: cycle after start (the operands latched, then the checks and first row worked out) with
#: the realigner's pre-stage
LD_WRITE_LATENCY = 4
#: ld: the cycle after the arm cycle in which the first row's checks go into a register
#: before its read is requested (an ldc requests its header first and checks its rows
#: while it waits)
LD_FIRST_CHECK = 1
#: the longest AXI burst (beats); a row is split into bursts of at most this many beats
MAX_BURST = 16
#: cycles the shared memory port spends per burst besides its beats (the interconnect's
#: arbitration between the cores' requests)
BUS_BURST_OVERHEAD = 1
#: ld: cycles per burst besides its beats (the burst request)
LD_BURST_OVERHEAD = 1
#: ld: the fewest cycles a row takes (one-beat rows wait for the read requests in flight)
LD_ROW_MIN = 2.0
#: ld into acc: the fewest cycles a row takes (one-beat rows, each word 8 / lanes sub-writes;
#: measured on the RTL: 2.16 per row for 16 and 64 rows of 8 bytes on the 4-lane core)
LD_ACC_ROW_MIN = 2.16
#: ld / ldc into acc: cycles from the last word's arrival to the end of its sub-writes
#: (measured on the RTL, aligned or not)
ACC_WRITE_TAIL = 2
#: st / stc: bytes per write beat on any bus (a bus wider than 64 bits takes them as narrow
#: beats on the byte lanes of their address)
ST_BEAT_BYTES = 8
#: st: cycles from issue to its first write beat (the arm cycle after start, the first
#: row's check, the row generator's registers, the output cache's word registered before
#: the beat queue, the AW / W skid buffers)
ST_LATENCY = 14
#: st: cycles per burst besides its beats (the address and the write response)
ST_BURST_OVERHEAD = 3
#: cycles a lane spends per row besides its chunks (rows follow each other without bubbles
#: on the AND path; measured on the RTL, bench/datapath.py)
FC_ROW_OVERHEAD = 0
#: a (vector, row) on the bitmap path takes at least this many cycles: a row of one or two
#: chunks with a pair or none (an identity matrix, a weight row pruned to one value) cannot
#: go faster through the fetch / combine / compact pipeline (measured on the RTL: 3.2
#: cycles per (vector, row) for 1-2 chunk rows of at most one pair, 4-lane core)
FC_ROW_MIN = 3.2
#: expanding a stride index into bitmap chunks (claim 9): a converted (vector, row) takes
#: one cycle more than on the AND path, and at least this many (the converter's start-up
#: at every row is hidden behind the previous row only when that row is long)
FC_EXPAND_ROW_MIN = 9
#: stride entries the MX unit's stride-to-direct converter takes per cycle (claim 9)
STRIDE_WINDOW = 4
#: cycles from a converted row's start to its first chunk at the lanes, beyond the
#: converter's entries / STRIDE_WINDOW (count read, the converter's stages, its output skid,
#: the broadcast)
FC_EXPAND_LATENCY = 7
#: cycles the first replayed row of a vector pays for the hand-over from the converter to
#: the replay (the converter's last chunk leaves, the words engine's pipeline fills; mostly
#: hidden behind the lanes' queues)
FC_REPLAY_SWITCH = 3
# (FC_EXPAND_ROW_MIN, FC_EXPAND_LATENCY and FC_REPLAY_SWITCH fitted to 66 random
# stride-neuron fcs on the 4-lane MatrixUnit: every case of 150 cycles or more within
# 7.1 % of the RTL, the mean error 5.4 %, the worst +-29 % on fcs of under 100 cycles whose
# rows hold almost no pairs)

#: chunks of a stride neuron row that the MX unit's neuron side keeps (a block RAM): a
#: vector's first row is converted to chunks (claim 9), its other rows replay them at one
#: chunk per cycle; a longer row (more than 64 * this many positions) is converted again
#: for every row
STRIDE_REPLAY_CHUNKS = 512
#: pipeline fill/drain of the MX unit per instruction (measured: 23 cycles from start to the
#: last sum beyond the lane's work; the lanes start a cycle after the instruction; one more
#: since the connection unit registers its joined chunks, one since the MX unit checks the
#: operands it latched at start the cycle after, one since the lanes register the buffers'
#: words before selecting their operand bytes, one since its range comparisons wait a
#: cycle for the product of a taken fc's nvec operand; one less since the connection
#: unit's output is a skid buffer instead of a queue; two less since a lane's pair and
#: result queues are skid buffers)
FC_PIPELINE = 25
#: pipeline fill/drain of the VX unit per vred / vew (address generator, read request
#: registered, read, read data registered, ALU (three stages), write back)
VX_PIPELINE = 11
#: cycles of a VX instruction with nothing to do (no iteration: no word reaches the ALU)
VX_EMPTY = 10
#: pipeline fill/drain of the VX unit per req (the requantisers take 5 cycles)
REQ_PIPELINE = 13
#: cycles a vew reads per output word (a, then b)
VEW_READS = 2
#: cycles of a cfg instruction
CFG_CYCLES = 3
#: cycles to dispatch one instruction once its word is in the instruction cache: the
#: dispatcher registers the next word's address as it dispatches the current one, the
#: cache reads it the cycle after (a jump back to a loop body's start, or a loop's entry or
#: the word after a zero-trip body, costs no more than the next word)
DISPATCH_CYCLES = 2
#: cycles of a send besides one per flit (reading the first word of local memory, the last
#: flits draining into the router; measured on the RTL, bench/noc.py)
NET_SEND_OVERHEAD = 4
#: cycles between the packets of one send (the next head waits for the reads in flight)
NET_PACKET_GAP = 2
#: cycles of a recv whose bytes are there
RECV_CYCLES = 3
#: cycles from an instruction's end on one unit to a dependency token it gives being seen
#: by the unit that waits for it (front end done -> token channel -> other front end)
TOKEN_CYCLES = 2
#: cycles a head flit spends in each router (input stage, output stage: it is granted its
#: output as it arrives, its route computed a router ahead)
HOP_CYCLES = 2
#: cycles more in the source router: its local port's routing stage
INJECT_CYCLES = 1
#: cycles a ``loop`` word takes beyond :data:`DISPATCH_CYCLES` (the dispatcher registers
#: its body's end and entry, then its legality, before it is consumed)
LOOP_WORD_CYCLES = 2
#: cycles from an instruction-cache lookup that needs a line to the line's first beat: the
#: fill is queued the cycle after the lookup (from registers), then requested as a DMA burst
FETCH_LATENCY = DMA_LATENCY + 1
#: beats of one line fill (64 bytes over the 8-byte bus)
LINE_FILL_BEATS = 8
#: cycles from a line's last beat to its words being readable (the last word is
#: registered, predecoded into registers, then written)
FILL_WRITE_CYCLES = 3


def _rows(row_starts: np.ndarray, cols: int, axi_bytes: int):
    """Per DMA row of ``cols`` bytes at ``row_starts``: its offset in a bus word, the bus
    beats it touches, its bursts, and the words it fills at its destination."""
    off = row_starts % axi_bytes
    beats = (off + cols + axi_bytes - 1) // axi_bytes
    return off, beats, -(-beats // MAX_BURST), -(-cols // axi_bytes)


def ld_cycles(row_starts: np.ndarray, cols: int, axi_bytes: int, beat_cycles: int = 1) -> int:
    """Cycles of an ``ld`` whose rows of ``cols`` bytes start at external addresses
    ``row_starts``: per row, the beats it touches on the bus and one more cycle per burst,
    or the words it writes at ``beat_cycles`` each (acc: ``8 / lanes``) and one more cycle
    when it starts unaligned, whichever is longer, at least :data:`LD_ROW_MIN`
    (:data:`LD_ACC_ROW_MIN` into acc).  Into acc (``beat_cycles > 1``) an unaligned row's
    extra cycle hides behind the next row's sub-writes (the words wait in the LD unit's
    skid buffer), and the last word's sub-writes end :data:`ACC_WRITE_TAIL` cycles after
    its arrival."""
    if row_starts.size == 0 or cols == 0:
        return 1
    off, beats, bursts, words = _rows(row_starts, cols, axi_bytes)
    per_row = np.maximum(beats + LD_BURST_OVERHEAD * bursts,
                         words * beat_cycles + (off > 0) * (beat_cycles == 1))
    into_acc = beat_cycles > 1
    row_min = LD_ACC_ROW_MIN if into_acc else LD_ROW_MIN
    return (DMA_LATENCY + LD_WRITE_LATENCY + LD_FIRST_CHECK + ACC_WRITE_TAIL * into_acc
            + int(round(float(np.maximum(per_row, row_min).sum()))))


def ld_word_cycles(config, buf: str, local: bool) -> int:
    """Cycles the LD unit spends per bus-wide word it writes into ``buf``: the
    accumulators take ``lanes`` int8 -> int32 elements per cycle, the parameter memory
    ``lanes`` channel records of 8 bytes (one per bank), local memory (64 bits wide) gives
    8 bytes per cycle; the other buffers take a word per cycle."""
    words = config.axi_bytes // 8
    if buf == "acc":
        cycles = max(1, config.axi_bytes // config.lanes)
    elif buf == "param":
        cycles = max(1, words // config.lanes)
    else:
        cycles = 1
    return max(cycles, words) if local else cycles


def bus_cycles(row_starts: np.ndarray, cols: int, axi_bytes: int, beat_cycles: int = 1) -> int:
    """Cycles the shared memory port is held by rows of ``cols`` bytes at external addresses
    ``row_starts``: every beat and :data:`BUS_BURST_OVERHEAD` per burst (the interconnect's
    arbitration), or the destination's pace (``beat_cycles`` per word it writes, as in
    :func:`ld_cycles`) when that is slower."""
    off, beats, bursts, words = _rows(row_starts, cols, axi_bytes)
    held = np.maximum(words * beat_cycles + (off > 0), beats + BUS_BURST_OVERHEAD * bursts)
    return int(round(float(held.sum())))


@dataclass(frozen=True)
class FarMemory:
    """The far memory: external addresses in ``[lo, hi)`` (the memory image's ``far``
    regions, where the compiler's memory plan swaps activations out to).  It is slower than
    the rest of external memory: each read burst waits ``latency`` cycles before its first
    beat (bursts are served one after the other), and every beat, read or written, takes
    ``beat_cycles`` cycles (a bus of ``axi_bytes / beat_cycles`` bytes per cycle).  The
    testbench's AXI RAM models the same (:class:`~snpu.verif.tb.axi_ram.AxiRam`)."""

    lo: int = 0
    hi: int = 0
    latency: int = 40
    beat_cycles: int = 2

    @classmethod
    def of_image(cls, image, **params) -> "FarMemory | None":
        """The far range of a :class:`~snpu.verif.image.MemoryImage` (its ``far`` regions),
        or ``None`` if it has none."""
        far = [r for r in image.regions.values() if r.kind == "far" and r.size]
        if not far:
            return None
        return cls(min(r.addr for r in far), max(r.end for r in far), **params)

    def extra(self, row_starts: np.ndarray, cols: int, axi_bytes: int, write: bool) -> int:
        """Cycles a DMA of rows of ``cols`` bytes at ``row_starts`` takes beyond the same
        DMA in near memory (rows are wholly in one memory: the compiler places tensors in
        one or the other)."""
        far = (row_starts >= self.lo) & (row_starts < self.hi)
        if not far.any():
            return 0
        _, beats, bursts, _ = _rows(row_starts[far], cols, axi_bytes)
        extra = beats * (self.beat_cycles - 1) + (0 if write else bursts * self.latency)
        return int(extra.sum())

    def to_dict(self) -> dict:
        return {"lo": self.lo, "hi": self.hi, "latency": self.latency,
                "beat_cycles": self.beat_cycles}


def st_cycles(row_starts: np.ndarray, cols: int, axi_bytes: int) -> int:
    """Cycles of an ``st`` whose rows of ``cols`` bytes go to external addresses
    ``row_starts``."""
    if row_starts.size == 0 or cols == 0:
        return 1
    _, beats, bursts, _ = _rows(row_starts, cols, axi_bytes)
    per_row = beats + ST_BURST_OVERHEAD * bursts
    return ST_LATENCY + int(round(float(per_row.sum())))


#: cycles from an ``ldc``'s header word arriving to its body's first word (the header is
#: checked, then the body requested), measured on the RTL (bench: the stc / ldc deltas of
#: ``tests/rtl/test_core.py``'s compress programs)
LDC_HEADER_CYCLES = 10
#: cycles an ``stc`` spends beyond its rows' chunks and its bursts: start, the compressor's
#: stages, the stream's end seen, the header queued and its burst answered, the output skid
#: buffers (fitted with the model of :func:`stc_cycles` to 13 shapes on the RTL, every one
#: within 4 %)
STC_OVERHEAD = 29


def _chunk_words(cols: int, chunks: int) -> np.ndarray:
    """Dense 8-byte words of each of a row's ``chunks`` chunks of 64 values."""
    width = np.minimum(64, cols - 64 * np.arange(chunks))
    return -(-width // 8)


def ldc_cycles(nonzero: np.ndarray, cols: int, beat_cycles: int = 1) -> int:
    """Cycles of an ``ldc`` of rows of ``cols`` values whose chunks hold ``nonzero[r, k]``
    non-zero values: the stream's header is read first (one memory round trip), then the
    bytes it counts in bursts; the expander takes a chunk's mask word in one cycle and writes
    one dense word per cycle after it (``beat_cycles`` each into acc: the words wait in the
    LD unit's skid buffer meanwhile, so the mask word's cycle hides behind them), so it
    waits for the bus only for the bursts' overhead; into acc the last word's sub-writes end
    :data:`ACC_WRITE_TAIL` cycles after it."""
    if nonzero.size == 0:
        return 1
    words = _chunk_words(cols, nonzero.shape[1])
    expand = int(np.maximum(1 + words, words * beat_cycles).sum()) * nonzero.shape[0]
    stream = int((1 + -(-nonzero // 8)).sum())
    bus = stream + LD_BURST_OVERHEAD * -(-stream // MAX_BURST)
    return (DMA_LATENCY + LD_WRITE_LATENCY + LDC_HEADER_CYCLES
            + ACC_WRITE_TAIL * (beat_cycles > 1)
            + max(expand, bus))


def stc_cycles(nonzero: np.ndarray, cols: int) -> int:
    """Cycles of an ``stc`` of rows of ``cols`` values whose chunks hold ``nonzero[r, k]``
    non-zero values.  The ST unit reads one output-cache word per cycle and the compressor
    sends one stream word per cycle, so a chunk takes the longer of its dense words and its
    compressed ones (the mask and the value words) and its compressed words are queued as it
    ends.  A burst of :data:`MAX_BURST` queued words goes as soon as they are there and the
    previous burst is done (its beats and :data:`ST_BURST_OVERHEAD`); the last, shorter one
    once the stream has ended; then the header word (in :data:`STC_OVERHEAD`)."""
    if nonzero.size == 0:
        return 1
    value_words = -(-nonzero // 8).ravel()
    dense = np.tile(_chunk_words(cols, nonzero.shape[1]), nonzero.shape[0])
    ready = np.cumsum(np.maximum(dense, 1 + value_words))   # a chunk's words queued
    queued = np.cumsum(1 + value_words)                     # stream words by then
    out = int(queued[-1])
    free = 0                                                # the writer's next free cycle
    full = (out - 1) // MAX_BURST                           # bursts before the last
    for b in range(full):
        chunk = int(np.searchsorted(queued, MAX_BURST * (b + 1)))
        free = max(free, int(ready[chunk])) + MAX_BURST + ST_BURST_OVERHEAD
    return STC_OVERHEAD + max(free, int(ready[-1])) + out - MAX_BURST * full


def fc_lane_cycles(row_cycles: np.ndarray, lanes: int) -> np.ndarray:
    """Sum per-(vector, row) cycles into per-lane cycles (row r runs on lane r % lanes)."""
    nvec, rows = row_cycles.shape
    pad = (-rows) % lanes
    rc = np.pad(row_cycles, ((0, 0), (0, pad)))
    return rc.reshape(nvec, -1, lanes).sum(axis=(0, 1))


def fc_scan_cycles(chunk_pairs: np.ndarray) -> np.ndarray:
    """Cycles per (vector, row) a lane spends on its chunks: one cycle per pair, at least one
    per chunk.  ``chunk_pairs[v, r, c]`` is the pairs in chunk ``c``."""
    return np.maximum(chunk_pairs, 1).sum(axis=-1) + FC_ROW_OVERHEAD


def fc_row_cycles_bitmap(chunk_pairs: np.ndarray) -> np.ndarray:
    """Cycles per (vector, row) when a lane scans chunks (:func:`fc_scan_cycles`), at least
    :data:`FC_ROW_MIN` per row (a stride index expanded first: :func:`fc_row_cycles_expand`)."""
    return np.maximum(fc_scan_cycles(chunk_pairs), FC_ROW_MIN)


def fc_row_cycles_expand(scan: np.ndarray, chunks: int, entries: np.ndarray,
                         lanes: int) -> np.ndarray:
    """Cycles per (vector, row) when the neuron side's stride index is expanded into chunks
    (claim 9).  ``scan[v, r]`` is what the row's chunks cost a lane on the AND path (one
    cycle per pair, at least one per chunk); ``chunks`` the chunks of a row; ``entries[v]``
    the stride entries of vector ``v``'s index (escapes included).

    A vector's first round of ``lanes`` rows waits for the converter, which takes
    :data:`STRIDE_WINDOW` entries per cycle (:data:`FC_EXPAND_LATENCY` from a row's start to
    its first chunk); its other rows replay the converted chunks at the AND path's pace
    (the first of them pays :data:`FC_REPLAY_SWITCH` for the hand-over) when the row holds
    at most :data:`STRIDE_REPLAY_CHUNKS` chunks, else every round is converted again."""
    scan = np.asarray(scan, np.float64)
    convert = np.maximum(np.maximum(scan + 1, FC_EXPAND_ROW_MIN),
                         np.asarray(entries, np.float64)[:, None] / STRIDE_WINDOW +
                         FC_EXPAND_LATENCY)
    if chunks > STRIDE_REPLAY_CHUNKS:
        return convert
    out = np.maximum(scan, FC_ROW_MIN)
    out[:, :lanes] = convert[:, :lanes]
    out[:, lanes:2 * lanes] += FC_REPLAY_SWITCH
    return out


def fc_row_cycles_merge(pairs: np.ndarray, n_entries: np.ndarray, w_entries: np.ndarray) -> np.ndarray:
    """Cycles per (vector, row) of the stride-merge path: one entry of each list per cycle,
    both advance on a pair, plus the terminators."""
    merge = n_entries[:, None] + w_entries[None, :] - pairs + 1
    return np.maximum(merge, 1) + FC_ROW_OVERHEAD


def fc_row_cycles_estimate(n_in: int, w_kept: float, n_density: float, chunk_bits: int,
                           merge: bool, expand: bool = True) -> float | np.ndarray:
    """Expected cycles of one (vector, row) of an fc from densities alone (the compiler's
    choice between the two mixed-format paths): ``w_kept`` weights kept in the row, a
    fraction ``n_density`` of the neurons kept, independently.  The bitmap path scans
    ``ceil(n_in / chunk_bits)`` chunks at max(pairs, 1) cycles each (pairs per chunk taken
    as Poisson), at least :data:`FC_EXPAND_ROW_MIN` when a stride index is expanded
    (``expand``); the merge path walks both lists (:func:`fc_row_cycles_merge`).  An array
    of ``w_kept`` gives an array, one estimate per row."""
    pairs = np.asarray(w_kept, np.float64) * n_density
    if merge:
        cycles = n_in * n_density + np.asarray(w_kept) - pairs + 1 + FC_ROW_OVERHEAD
    else:
        chunks = -(-n_in // chunk_bits)
        lam = pairs / chunks if chunks else np.zeros_like(pairs)
        cycles = chunks * (lam + np.exp(-lam)) + FC_ROW_OVERHEAD
        cycles = np.maximum(cycles + 1, FC_EXPAND_ROW_MIN) if expand else cycles
    return float(cycles) if np.ndim(cycles) == 0 else cycles


def vx_cycles(iterations: int, reads_per_iteration: int, pipeline: int = VX_PIPELINE,
              slices: int = 1) -> int:
    """A VX instruction reads one accumulator word per cycle, every word once per slice of
    the VX unit's width (``CoreConfig.vx_slices``); a VX unit narrower than the words
    selects the slice in a pipeline stage of its own (a cycle more)."""
    return pipeline + (slices > 1) + iterations * max(1, reads_per_iteration) * slices


@dataclass
class _Transfer:
    """A transfer holding a :class:`SharedBus` channel."""

    end: int          #: when its span ends (its beats spread over it)
    owner: object     #: the core it is for
    on_delay: object  #: called with the cycles another core's transfer delays it (or None)
    rate: float       #: beats per cycle it asks of the port
    beats_end: int    #: when its beats would end back to back (its core's next one starts)


@dataclass
class SharedBus:
    """The external-memory port's read and write data channels, one beat per cycle each,
    shared by every requester of every core of an array (instruction-cache fills and LD
    reads; ST writes).

    A core's own requests are served one after the other: its first beat goes when its
    earlier transfers' beats are done.  Transfers of *different* cores interleave burst by
    burst (the interconnect grants the cores' bursts round robin), so each shares the port
    with the others still holding it.  A transfer spreads its beats over its ``span`` (a
    requester slower than the port leaves it idle between bursts); while two overlap, what
    they ask of the port beyond one beat per cycle delays both: a transfer of ``b`` beats
    arriving at full rate while another core's has ``r`` beats to go at full rate waits
    ``min(r, b)`` cycles and delays that one by as much (``on_delay`` tells its owner).
    With one core this is first come, first served, as the RTL's single master sees it."""

    read_free: int = 0
    write_free: int = 0
    read_beats: int = 0    #: beats read so far (a port's traffic)
    write_beats: int = 0
    #: per channel, the transfers that may still hold it
    _held: dict = field(default_factory=lambda: {"read": [], "write": []}, repr=False)

    def read(self, t: int, beats: int, owner=None, on_delay=None, span: int = 0) -> int:
        """Reserve ``beats`` read beats wanted from time ``t`` for core ``owner``, spread
        over ``span`` cycles (at least ``beats``: a requester slower than the port leaves
        it idle between its bursts); returns when they start."""
        self.read_beats += beats
        start = self._reserve("read", t, beats, owner, on_delay, span)
        self.read_free = max([self.read_free] + [x.beats_end for x in self._held["read"]])
        return start

    def write(self, t: int, beats: int, owner=None, on_delay=None, span: int = 0) -> int:
        self.write_beats += beats
        start = self._reserve("write", t, beats, owner, on_delay, span)
        self.write_free = max([self.write_free] + [x.beats_end for x in self._held["write"]])
        return start

    def _reserve(self, channel: str, t: int, beats: int, owner, on_delay,
                 span: int) -> int:
        held = self._held[channel] = [x for x in self._held[channel] if x.end > t]
        # after the owner's own transfers' beats (first come, first served)
        start = max([t] + [x.beats_end for x in held if x.owner == owner])
        span = max(span, beats, 1)
        rate = beats / span
        share = 0
        for x in held:
            if x.owner != owner and x.end > start:
                # while both run, the port gives each its bursts in turn: what the two ask
                # of it beyond one beat per cycle delays both
                d = int(round(max(0.0, x.rate + rate - 1.0) * min(x.end - start, span)))
                if d:
                    x.end += d
                    x.beats_end += d
                    share = max(share, d)
                    if x.on_delay is not None:
                        x.on_delay(d)
        held.append(_Transfer(start + share + span, owner, on_delay, rate,
                              start + share + beats))
        return start + share
