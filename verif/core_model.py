"""The golden model of one snpu core: architectural state, instruction semantics and
the in-order scheduler (the public entry points are in :mod:`.golden`).

:class:`Machine` holds a core's state (buffers, registers, local memory, the view of
external memory) and executes one instruction at a time; :class:`Scheduler` dispatches
instructions in order into per-unit queues and starts them when their dependency tokens
(and, for ``recv``, the packets) are there, as in the hardware, each taking the cycles
:mod:`.timing` estimates.  :mod:`.mesh` drives one scheduler per core of an array.
"""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from snpu.config import CoreConfig
from snpu.errors import ExecutionError, IllegalInstruction, IndexFormatError, SnpuError

from . import index as ix
from . import act_compress, isa, layout, numerics, timing
from .hazards import Access, HazardChecker
from .sequencer import Sequencer, half_sizes
from .isa import IMPLEMENTED_UNITS, Instr, Unit


@dataclass
class Stats:
    """What one run did.  ``cycles`` and ``busy`` are estimates; the counts are exact and
    match the RTL's performance counters."""

    cycles: int = 0
    busy: dict[str, int] = field(default_factory=lambda: {u.name: 0 for u in IMPLEMENTED_UNITS})
    instructions: dict[str, int] = field(default_factory=lambda: {u.name: 0 for u in IMPLEMENTED_UNITS})
    mac_pairs: int = 0  #: neuron/weight pairs multiplied
    dense_pairs: int = 0  #: pairs a dense core would have multiplied
    dma_read_bytes: int = 0
    dma_write_bytes: int = 0
    icache_hits: int = 0
    icache_misses: int = 0
    icache_prefetches: int = 0
    fetch_bytes: int = 0  #: instruction bytes read from external memory (line fills)
    net_bytes_sent: int = 0
    net_bytes_received: int = 0

    @property
    def pairs_skipped(self) -> int:
        return self.dense_pairs - self.mac_pairs

    def to_dict(self) -> dict:
        return {"cycles": self.cycles, "busy": dict(self.busy),
                "instructions": dict(self.instructions), "mac_pairs": self.mac_pairs,
                "dense_pairs": self.dense_pairs, "pairs_skipped": self.pairs_skipped,
                "dma_read_bytes": self.dma_read_bytes, "dma_write_bytes": self.dma_write_bytes,
                "icache_hits": self.icache_hits, "icache_misses": self.icache_misses,
                "icache_prefetches": self.icache_prefetches, "fetch_bytes": self.fetch_bytes,
                "net_bytes_sent": self.net_bytes_sent,
                "net_bytes_received": self.net_bytes_received}


@dataclass
class Packet:
    """A packet of a ``send``: ``data`` for ``dst``'s local memory at ``addr``, counted on
    its arrival counter ``tag``; its head leaves the sender at ``time``."""

    src: tuple[int, int]
    dst: tuple[int, int]
    addr: int
    tag: int
    data: np.ndarray
    time: int

    @property
    def flits(self) -> int:
        return 1 + -(-self.data.size // 8)


@dataclass
class _Exec:
    cycles: int
    accesses: list[Access]


class Machine:
    """Architectural state of one core and the functional semantics of each instruction.

    Parameters
    ----------
    config:
        The core parameters (buffer sizes, lanes, chunk width).
    ext:
        External memory, modified in place by stores.
    protect:
        ``(lo, hi)`` byte ranges of external memory that stores must not write (the ROM).
    bus_error:
        ``(lo, hi)``: external addresses whose 8-byte bus words answer SLVERR (fault
        injection): an ``ld`` reading such a word faults with ``LOAD_BUS``, an ``st`` writing
        one with ``STORE_BUS``.
    coords, mesh:
        This core's (x, y) and the mesh's (width, height): where a ``send`` may go.
    far:
        The far range of external memory (:class:`~.timing.FarMemory`): loads and stores
        there take longer.  Timing only.

    Memories
    --------
    ``ld`` / ``st`` addresses in ``[LOCAL_BASE, LOCAL_BASE + local_bytes)`` reach the core's
    local memory (:attr:`local`), the others the shared external memory; an address in the
    local window past ``local_bytes`` answers a bus error (``LOAD_BUS`` / ``STORE_BUS``).
    A ``send`` puts packets in :attr:`outbox` (the mesh model delivers them); arriving bytes
    add to :attr:`arrived` (one counter per tag), which ``recv`` takes from.

    Faults
    ------
    Every :class:`ExecutionError` carries ``fault``: the error code the core reports for it,
    or ``None`` for a program error the hardware does not detect.  An instruction with no
    work (a zero extent) does nothing and never faults; otherwise misalignment (``ALIGN``)
    is checked before ranges (``RANGE``), and for ``ld`` / ``st`` rows are checked in order
    (the first bad row decides), as the units do.
    """

    def __init__(self, config: CoreConfig, ext: np.ndarray,
                 protect: Sequence[tuple[int, int]] = (),
                 bus_error: tuple[int, int] | None = None,
                 coords: tuple[int, int] = (0, 0), mesh: tuple[int, int] = (1, 1),
                 bus: timing.SharedBus | None = None, far: timing.FarMemory | None = None):
        c = self.config = config
        #: the slower far range of external memory (timing only)
        self.far = far
        self.ext = ext
        self.protect = list(protect)
        self.bus_error = bus_error
        self.coords, self.mesh = coords, mesh
        #: the external-memory port (shared by the cores of an array): DMA timing waits for it
        self.bus = bus or timing.SharedBus()
        #: called with the cycles another core's transfer took from the running DMA's share
        #: of the port (set by the scheduler for the instruction it starts)
        self.on_bus_delay = None
        self.local = np.zeros(c.local_bytes, np.uint8)
        self.arrived = [0] * isa.NET_TAGS
        self.outbox: list[Packet] = []
        self.now = 0  #: the time the instruction being executed starts (set by the scheduler)
        self.pc = 0  #: its ROM word (set by the scheduler)
        self.nbuf = np.zeros(c.nbuf_bytes, np.uint8)
        self.nidx = np.zeros(c.nidx_bytes, np.uint8)
        self.wbuf = np.zeros((c.lanes, c.wbuf_bytes), np.uint8)
        self.widx = np.zeros((c.lanes, c.widx_bytes), np.uint8)
        self.acc = np.zeros(c.acc_elems, np.int32)
        self.obuf = np.zeros(c.obuf_bytes, np.uint8)
        self.param = np.zeros(c.param_bytes, np.uint8)
        self.regs = {r.name: r.reset for r in isa.REGISTERS}
        self.stats = Stats()
        self._weight_epoch = 0
        self._tile_cache: dict[tuple, layout.DecodedTile] = {}
        self._handlers: dict[str, Callable[[Instr], _Exec]] = {
            "cfg": self._cfg, "ld": self._ld, "fc": self._fc, "vred": self._vred,
            "vew": self._vew, "vewp": self._vewp, "req": self._req, "st": self._st, "send": self._send,
            "ldc": self._ldc, "stc": self._stc,
            "recv": self._recv,
        }

    # ------------------------------------------------------------------------------------
    def execute(self, instr: Instr) -> _Exec:
        operands = isa.register_operands(instr)
        if not operands:
            return self._handlers[instr.op](instr)
        # register operands: the instruction reads them in place of the registers, which
        # keep their values (isa: Register operands)
        kept = self.regs
        self.regs = {**kept, **operands}
        try:
            return self._handlers[instr.op](instr)
        finally:
            self.regs = kept

    def buffer(self, name: str, lane: int = 0) -> np.ndarray:
        return {"nbuf": self.nbuf, "nidx": self.nidx, "acc": self.acc, "obuf": self.obuf,
                "param": self.param, "wbuf": self.wbuf[lane], "widx": self.widx[lane]}[name]

    # ------------------------------------------------------------------------------------
    def _cfg(self, i: Instr) -> _Exec:
        self.regs[isa.REGISTER_BY_NUMBER[i.reg].name] = i.value
        if i.two:
            self.regs[isa.REGISTER_BY_NUMBER[i.reg2].name] = i.value2
        if i.three:
            self.regs[isa.REGISTER_BY_NUMBER[i.reg3].name] = i.value3
        return _Exec(timing.CFG_CYCLES, [])

    @staticmethod
    def _grid(base: int, n3: int, rows: int, cols: int, s3: int, s: int) -> np.ndarray:
        p = np.arange(n3, dtype=np.int64)[:, None, None] * s3
        r = np.arange(rows, dtype=np.int64)[None, :, None] * s
        c = np.arange(cols, dtype=np.int64)[None, None, :]
        return (base + p + r + c).reshape(-1)

    @staticmethod
    def _check_range(addrs: np.ndarray, size: int, what: str, fault: str | None) -> None:
        if addrs.size and (addrs.min() < 0 or addrs.max() >= size):
            raise ExecutionError(f"{what} [{int(addrs.min())}, {int(addrs.max()) + 1}) lies "
                                 f"outside 0..{size}", fault=fault)

    @staticmethod
    def _check_unique(addrs: np.ndarray, what: str) -> None:
        if addrs.size > 1 and np.unique(addrs).size != addrs.size:
            raise ExecutionError(f"{what}: rows overlap (an address would be written twice)")

    def _check_bus(self, addrs: np.ndarray, op: str, fault: str) -> None:
        """Fault injection: a bus word of ``addrs`` inside :attr:`bus_error`."""
        if self.bus_error is None or not addrs.size:
            return
        lo, hi = self.bus_error
        words = np.unique(addrs // 8)
        bad = (words * 8 < hi) & (words * 8 + 8 > lo)
        if bad.any():
            raise ExecutionError(f"{op}: the bus answered an error for the word at "
                                 f"0x{int(words[bad][0]) * 8:x}", fault=fault)

    @staticmethod
    def _first_bad_row(starts: np.ndarray, cols: int, limit: int, align: int = 1,
                       lane_ok: np.ndarray | bool = True) -> str | None:
        """The units check rows in order: RANGE (a row past ``limit``, or a bad lane) before
        ALIGN (a row start or length not a multiple of ``align``) within a row."""
        rng = (starts + cols > limit) | (starts < 0) | ~np.asarray(lane_ok, bool)
        ali = ((starts | cols) & (align - 1)) != 0
        bad = np.flatnonzero(rng | ali)
        if bad.size == 0:
            return None
        return "RANGE" if rng[bad[0]] else "ALIGN"

    @staticmethod
    def _span(buf: str, addrs: np.ndarray, write: bool, scale: int = 1) -> Access:
        if addrs.size == 0:
            return Access(buf, 0, 0, write)
        return Access(buf, int(addrs.min()) * scale, (int(addrs.max()) + 1) * scale, write)

    def _ld(self, i: Instr) -> _Exec:
        c, r = self.config, self.regs
        buf = isa.BUFFER_NAMES[i.buf]
        if i.n3 * i.rows * i.cols == 0:
            return _Exec(timing.ld_cycles(np.zeros(0, np.int64), 0, c.axi_bytes), [])
        target_size = {"nbuf": c.nbuf_bytes, "nidx": c.nidx_bytes, "wbuf": c.wbuf_bytes,
                       "widx": c.widx_bytes, "acc": c.acc_elems, "param": c.param_bytes}[buf]
        banked = buf in ("wbuf", "widx")
        # wbuf / widx: plane p goes to lane ``lane + p``; other buffers have only lane 0
        lanes = i.lane + np.repeat(np.arange(i.n3), i.rows) if banked else np.full(i.n3 * i.rows, i.lane)
        lane_ok = lanes < c.lanes if banked else lanes == 0
        group = 1 << r["ld.group_log2"] if buf == "nbuf" and r["ld.nidx_mode"] else 1
        e3, e1, d3, d1 = isa.ld_strides(buf, i.rows, i.cols, r.__getitem__)
        starts = self._grid(i.dst, i.n3, i.rows, 1, d3, d1)
        fault = self._first_bad_row(starts, i.cols, target_size, group, lane_ok)
        if fault == "RANGE":
            if not lane_ok.all():
                raise ExecutionError(f"ld: lane {int(lanes[~lane_ok][0])} is not a lane of "
                                     f"buf={buf} (core has {c.lanes} lanes; other buffers take "
                                     "lane 0)", fault=fault)
            self._check_range(starts[:, None] + np.arange(i.cols), target_size,
                              f"ld: destination {buf}", fault)
        if fault == "ALIGN":
            raise ExecutionError(f"ld: group pruning with groups of {group} needs every row "
                                 f"to start and end on a group boundary (dst={i.dst}, "
                                 f"cols={i.cols}, strides {d1}/{d3})", fault=fault)
        src = self._grid(i.ext, i.n3, i.rows, i.cols, e3, e1)
        dst = self._grid(i.dst, i.n3, i.rows, i.cols, d3, d1)
        data, accesses = self._mem_read(src, "ld", "LOAD_BUS")
        if banked:
            per_plane = i.rows * i.cols
            for p in range(i.n3):
                lane, sl = i.lane + p, slice(p * per_plane, (p + 1) * per_plane)
                self._check_unique(dst[sl], f"ld: destination {buf} of lane {lane}")
                self.buffer(buf, lane)[dst[sl]] = data[sl]
                accesses.append(self._span(f"{buf}{lane}", dst[sl], True))
            self._weight_epoch += 1
        else:
            self._check_unique(dst, f"ld: destination {buf}")
            target = self.buffer(buf)
            target[dst] = data.view(np.int8).astype(np.int32) if buf == "acc" else data
            accesses.append(self._span(buf, dst, True))
        if buf == "nbuf" and r["ld.nidx_mode"]:
            self._threshold(i, dst, data)
            accesses.append(Access("nidx", int(dst.min()) // 8 if dst.size else 0,
                                   int(dst.max()) // 8 + 1 if dst.size else 0, True))
        self.stats.dma_read_bytes += int(src.size)
        beat = timing.ld_word_cycles(c, buf, bool(src[0] >= isa.LOCAL_BASE))
        cycles = timing.ld_cycles(src[::i.cols], i.cols, c.axi_bytes, beat)
        if self.far is not None:
            cycles += self.far.extra(src[::i.cols], i.cols, c.axi_bytes, write=False)
        return _Exec(cycles + self._bus_wait(src, i.cols, beat, False, cycles), accesses)

    def _threshold(self, i: Instr, dst: np.ndarray, data: np.ndarray) -> None:
        """The sparse processing unit: write nidx bits for bytes loaded into nbuf."""
        r = self.regs
        g = r["ld.group_log2"]
        size = 1 << g
        # _ld checked that rows start and end on group boundaries: groups are aligned blocks
        bits = ix.sparse_unit_mask(data.view(np.int8).reshape(-1, size), r["ld.thresh"],
                                   (size, r["ld.group_t3"], r["ld.group_t4"]) if g else None)
        self._write_nidx_bits(dst, bits.reshape(-1))

    def _write_nidx_bits(self, dst: np.ndarray, bits: np.ndarray) -> None:
        """nidx bit ``a`` <- ``bits`` for every nbuf byte address ``a`` in ``dst``."""
        byte, bit = dst >> 3, (dst & 7).astype(np.uint8)
        one = np.left_shift(np.uint8(1), bit)
        np.bitwise_and.at(self.nidx, byte, ~one)
        np.bitwise_or.at(self.nidx, byte[bits], one[bits])

    def _stream_rows(self, i: Instr, operand: str, stride: str, size: int,
                     what: str) -> np.ndarray:
        """The on-chip row starts of an ``ldc`` / ``stc`` (``operand``: its on-chip operand,
        ``stride``: the register between rows), after the units' checks: the operand,
        ``ext`` and the stride 8-aligned (``ALIGN``), every row inside ``size`` (``RANGE``)."""
        step = self.regs[stride] if i.rows > 1 else 0
        base = i.args[operand]
        if (base | i.ext | step) % 8:
            raise ExecutionError(f"{i.op}: {operand}={base}, ext=0x{i.ext:x} and {stride}={step} "
                                 "must be multiples of 8 (the stream moves whole words)",
                                 fault="ALIGN")
        starts = base + np.arange(i.rows, dtype=np.int64) * step
        if self._first_bad_row(starts, i.cols, size):
            self._check_range(starts[:, None] + np.arange(i.cols), size, f"{i.op}: {what}",
                              "RANGE")
        return starts

    def _ldc(self, i: Instr) -> _Exec:
        c = self.config
        buf = "nbuf" if i.buf == isa.BUFFERS["nbuf"] else "acc"
        if i.rows * i.cols == 0:
            return _Exec(timing.ldc_cycles(np.zeros((0, 0), np.int64), 1), [])
        size = c.nbuf_bytes if buf == "nbuf" else c.acc_elems
        starts = self._stream_rows(i, "dst", "ld.dst_stride", size, f"destination {buf}")
        head, _ = self._mem_read(i.ext + np.arange(act_compress.HEADER), "ldc", "LOAD_BUS")
        body = int(head.view("<u8")[0])
        if body % 8 or body > act_compress.stream_bound(i.rows, i.cols) - act_compress.HEADER:
            raise ExecutionError(f"ldc: the stream header at 0x{i.ext:x} gives {body} bytes: "
                                 f"not a multiple of 8 or more than {i.rows} rows of "
                                 f"{i.cols} values can take", fault="INDEX")
        length = act_compress.HEADER + body
        data, accesses = self._mem_read(i.ext + np.arange(length, dtype=np.int64), "ldc",
                                        "LOAD_BUS")
        try:
            rows, _ = act_compress.decode_stream(data.tobytes(), i.rows, i.cols)
        except IndexFormatError as e:
            raise ExecutionError(f"ldc at 0x{i.ext:x}: {e}", fault="INDEX") from None
        dst = (starts[:, None] + np.arange(i.cols)).reshape(-1)
        self._check_unique(dst, f"ldc: destination {buf}")
        values = rows.reshape(-1)
        if buf == "acc":
            self.acc[dst] = values.astype(np.int32)
        else:
            self.nbuf[dst] = values.view(np.uint8)
            self._write_nidx_bits(dst, values != 0)
            accesses.append(Access("nidx", int(dst.min()) // 8, int(dst.max()) // 8 + 1, True))
        accesses.append(self._span(buf, dst, True))
        self.stats.dma_read_bytes += length
        # (acc: the sub-writes of the bus-wide word an 8-byte dense word lands in)
        beat = max(1, c.axi_bytes // c.lanes) if buf == "acc" else 1
        nonzero = act_compress.chunk_nonzeros(rows)
        cycles = timing.ldc_cycles(nonzero, i.cols, beat)
        if self.far is not None:  # the header, then the bytes it counts
            cycles += self.far.extra(np.array([i.ext]), act_compress.HEADER, c.axi_bytes,
                                     write=False)
            cycles += self.far.extra(np.array([i.ext + act_compress.HEADER]), body,
                                     c.axi_bytes, write=False) if body else 0
        # the stream's words go to the expander 8 bytes per cycle: a wider beat holds the
        # port that many cycles
        return _Exec(cycles + self._bus_wait(np.array([i.ext]), length, c.axi_bytes // 8,
                                             False, cycles), accesses)

    def _stc(self, i: Instr) -> _Exec:
        c = self.config
        if i.rows * i.cols == 0:
            return _Exec(timing.stc_cycles(np.zeros((0, 0), np.int64), 1), [])
        starts = self._stream_rows(i, "src", "st.src_stride", c.obuf_bytes, "source obuf")
        src = (starts[:, None] + np.arange(i.cols)).reshape(-1)
        rows = self.obuf[src].view(np.int8).reshape(i.rows, i.cols)
        stream = np.frombuffer(act_compress.encode_stream(rows), np.uint8)
        dst = i.ext + np.arange(stream.size, dtype=np.int64)
        accesses = self._mem_write(dst, stream, "stc", "STORE_BUS")
        self.stats.dma_write_bytes += int(stream.size)
        cycles = timing.stc_cycles(act_compress.chunk_nonzeros(rows), i.cols)
        # (ST writes 8-byte beats on any bus: timing.ST_BEAT_BYTES)
        if self.far is not None:
            cycles += self.far.extra(np.array([i.ext]), stream.size, timing.ST_BEAT_BYTES,
                                     write=True)
        return _Exec(cycles + self._bus_wait(np.array([i.ext]), stream.size, 1, True, cycles),
                     [self._span("obuf", src, False), *accesses])

    # ------------------------------------------------------------------------------------
    def _neurons(self, i: Instr, v: int, fmt: str, packed: bool) -> tuple[np.ndarray, np.ndarray, int]:
        """Vector ``v`` of an fc: (values int8 [n_in] zeroed outside the index, mask,
        index entries read) and records its footprint."""
        r, n = self.regs, i.n_in
        nb = i.nbuf + v * r["mx.nstride"]
        ni = i.nidx + v * r["mx.nidx_stride"]
        entries = 0
        if fmt == "dense":
            mask = np.ones(n, bool)
        elif fmt == "direct":  # _fc checked the alignment
            mask = ix.decode_direct(self.nidx, n, ni)
            self._nidx_span.append((ni, ni + -(-n // 8)))
        else:
            strides, used = ix.decode_stride(self.nidx, ni)
            mask = ix.stride_to_direct(strides, n)
            entries = used - 2
            self._nidx_span.append((ni, ni + used))
        if packed and fmt != "dense":
            k = int(mask.sum())
            if nb + k > self.nbuf.size:
                raise ExecutionError(f"fc: packed neurons of vector {v} [{nb}, {nb + k}) run past nbuf")
            vals = np.zeros(n, np.int8)
            vals[mask] = self.nbuf[nb:nb + k].view(np.int8)
            self._nbuf_span.append((nb, nb + k))
        else:  # _fc checked the range
            vals = self.nbuf[nb:nb + n].view(np.int8) * mask
            self._nbuf_span.append((nb, nb + n))
        return vals.astype(np.int8), mask, entries

    def _weights(self, i: Instr, fmt: str) -> layout.DecodedTile:
        key = (self._weight_epoch, i.wbuf, i.widx, i.n_in, i.rows, fmt)
        tile = self._tile_cache.get(key)
        if tile is None:
            try:
                tile = layout.decode_weight_tile(self.wbuf, self.widx, i.wbuf, i.widx, i.n_in,
                                                 i.rows, fmt, self.config.chunk_bits)
            except IndexError as e:
                raise ExecutionError(f"fc: {e}") from None
            if len(self._tile_cache) > 8:
                self._tile_cache.clear()
            self._tile_cache[key] = tile
        return tile

    def _fc(self, i: Instr) -> _Exec:
        c, r = self.config, self.regs
        P, B = c.lanes, c.chunk_bits
        nfmt, wfmt = ix.FORMATS[r["mx.nfmt"]], ix.FORMATS[r["mx.wfmt"]]  # cfg checked the values
        nvec, astride = r["mx.nvec"], r["mx.acc_stride"]
        if nvec == 0 or i.rows == 0:
            return _Exec(timing.FC_PIPELINE, [])
        merge = (nfmt == "stride" and wfmt == "stride") or (
            r["mx.mixed"] and {nfmt, wfmt} == {"direct", "stride"})
        # the MX unit's checks, in its order: formats, alignment, then ranges
        # the lanes convert no weight index: stride weights go only into the merge, and the
        # merge takes only stride weights (the compiler stores weights in their path's format)
        if wfmt == "stride" and not merge:
            raise ExecutionError(
                f"fc: stride weights with {nfmt} neurons and mx.mixed={r['mx.mixed']}: the lanes "
                "take a stride weight index only into the stride merge (direct neurons need "
                "mx.mixed=1, claim 10; dense neurons cannot merge); store the weights direct "
                "(the compiler expands stride indices at compile time, claim 9)", fault="FORMAT")
        if merge and wfmt != "stride":
            raise ExecutionError(
                f"fc: the merge (mx.mixed=1 with {nfmt} neurons) needs stride weights, not "
                f"{wfmt}: the lanes do not convert a weight index (the neuron side converts "
                "for claims 9 and 10); store the weights stride", fault="FORMAT")
        if i.acc % P or (nvec > 1 and astride % P):
            raise ExecutionError(f"fc: acc={i.acc} and mx.acc_stride={astride} must be multiples "
                                 f"of lanes={P}", fault="ALIGN")
        nidx_step = r["mx.nidx_stride"] if nvec > 1 else 0
        if nfmt == "direct" and (i.nidx | nidx_step) % 8:
            raise ExecutionError(f"fc: the direct neuron index (nidx={i.nidx}, mx.nidx_stride="
                                 f"{nidx_step}) is not 8-byte aligned (lanes read 64-bit chunks)",
                                 fault="ALIGN")
        if wfmt == "direct" and i.widx % 8:
            raise ExecutionError(f"fc: widx={i.widx} must be 8-byte aligned for direct weight "
                                 "indices (lanes read them in 64-bit chunks)", fault="ALIGN")
        last = i.acc + (nvec - 1) * astride + i.rows
        if last > c.acc_elems:
            raise ExecutionError(f"fc: outputs reach acc element {last} > {c.acc_elems}",
                                 fault="RANGE")
        packed = bool(r["mx.npacked"]) and nfmt != "dense"
        last_in = i.nbuf + (nvec - 1) * r["mx.nstride"] + i.n_in
        if not packed and last_in > c.nbuf_bytes:
            raise ExecutionError(f"fc: input vectors reach nbuf byte {last_in} > {c.nbuf_bytes}",
                                 fault="RANGE")
        self._nbuf_span, self._nidx_span = [], []
        try:
            tile = self._weights(i, wfmt)
            neurons = [self._neurons(i, v, nfmt, bool(r["mx.npacked"])) for v in range(nvec)]
        except IndexFormatError as e:
            raise ExecutionError(f"fc: {e}", fault=e.fault) from None
        x = np.stack([n[0] for n in neurons]).astype(np.float64)
        nmask = np.stack([n[1] for n in neurons])
        # Exact: |sum| <= n_in * 128 * 128 < 2**53.
        dots = (x @ tile.values.astype(np.float64).T).astype(np.int64)
        out = i.acc + np.arange(nvec)[:, None] * astride + np.arange(i.rows)[None, :]
        old = self.acc[out].astype(np.int64) if i.accumulate else 0
        self.acc[out] = numerics.wrap32(old + dots)
        # Counters and the cost model.
        nm, wm = nmask.astype(np.float64), tile.mask.astype(np.float64)
        pairs = (nm @ wm.T).astype(np.int64)
        self.stats.mac_pairs += int(pairs.sum())
        self.stats.dense_pairs += nvec * i.rows * i.n_in
        if merge:
            n_entries = np.array([n[2] if nfmt == "stride" else int(n[1].sum()) for n in neurons])
            w_entries = tile.mask.sum(axis=1)  # escapes are rare; counted as elements
            row_cycles = timing.fc_row_cycles_merge(pairs, n_entries, w_entries)
        else:
            chunk_pairs = np.zeros((nvec, i.rows, -(-i.n_in // B)), np.int64)
            for k, lo in enumerate(range(0, i.n_in, B)):
                chunk_pairs[:, :, k] = (nm[:, lo:lo + B] @ wm[:, lo:lo + B].T).astype(np.int64)
            if nfmt == "stride":  # expanded (claim 9; stride weights take the merge)
                row_cycles = timing.fc_row_cycles_expand(
                    timing.fc_scan_cycles(chunk_pairs), chunk_pairs.shape[-1],
                    np.array([n[2] for n in neurons]), P)
            else:
                row_cycles = timing.fc_row_cycles_bitmap(chunk_pairs)
        cycles = int(timing.fc_lane_cycles(row_cycles, P).max()) + timing.FC_PIPELINE
        acc_span = Access("acc", int(out.min()), int(out.max()) + 1, True)
        accesses = [acc_span]
        if i.accumulate:
            accesses.append(Access("acc", acc_span.lo, acc_span.hi, False))
        for lo, hi in self._nbuf_span:
            accesses.append(Access("nbuf", lo, hi, False))
        for lo, hi in self._nidx_span:
            accesses.append(Access("nidx", lo, hi, False))
        for lane in range(P):
            accesses.append(Access(f"wbuf{lane}", i.wbuf, i.wbuf + tile.wbuf_end[lane], False))
            accesses.append(Access(f"widx{lane}", i.widx, i.widx + tile.widx_end[lane], False))
        return _Exec(cycles, accesses)

    # ------------------------------------------------------------------------------------
    def _words(self, what: str, base: int, n_o: int, n_i: int, so: int,
               k1: int = 1, k2: int = 1, s1: int = 0, s2: int = 0, size: int | None = None) -> np.ndarray:
        """Word base addresses [n_o, n_i, k1*k2] of a VX operand (elements; alignment is
        checked first by :meth:`_vx_align`)."""
        P = self.config.lanes
        a = (base + np.arange(n_o, dtype=np.int64)[:, None, None] * so
             + np.arange(n_i, dtype=np.int64)[None, :, None] * P
             + (np.arange(k1, dtype=np.int64)[:, None] * s1
                + np.arange(k2, dtype=np.int64)[None, :] * s2).reshape(1, 1, -1))
        size = self.acc.size if size is None else size
        if a.size and (a.min() < 0 or a.max() + P > size):
            raise ExecutionError(f"{what}: words [{int(a.min())}, {int(a.max()) + P}) lie "
                                 f"outside 0..{size}", fault="RANGE")
        return a

    def _vx_align(self, op: str, **values: int) -> None:
        """Every operand address and stride an operation uses is a multiple of lanes."""
        P = self.config.lanes
        for name, val in values.items():
            if val % P:
                raise ExecutionError(f"{op}: {name}={val} is not a multiple of lanes={P}",
                                     fault="ALIGN")

    def _gather(self, words: np.ndarray) -> np.ndarray:
        P = self.config.lanes
        return self.acc[words[..., None] + np.arange(P)].astype(np.int64)

    @staticmethod
    def _check_in_place(op: str, dst: np.ndarray, *srcs: np.ndarray) -> None:
        """Pipelined VX reads iteration t+1 before writing iteration t: a word written at
        iteration t must not be read by a later iteration."""
        wr = dst.reshape(-1)
        it = np.arange(wr.size)
        for s in srcs:
            s = s.reshape(wr.size, -1)
            rd_words = s.reshape(-1)
            rd_iter = np.repeat(it, s.shape[1])
            common = np.intersect1d(wr, rd_words)
            if common.size == 0:
                continue
            last_read = np.full(common.size, -1)
            sel = np.isin(rd_words, common)
            np.maximum.at(last_read, np.searchsorted(common, rd_words[sel]), rd_iter[sel])
            write_iter = np.zeros(common.size, np.int64)
            selw = np.isin(wr, common)
            write_iter[np.searchsorted(common, wr[selw])] = it[selw]
            bad = last_read > write_iter
            if bad.any():
                w = int(common[bad][0])
                raise ExecutionError(f"{op}: acc word {w} is written at iteration "
                                     f"{int(write_iter[bad][0])} and read again later "
                                     f"(iteration {int(last_read[bad][0])}); results would "
                                     "depend on the pipeline")

    def _acc_access(self, words: np.ndarray, write: bool) -> Access:
        P = self.config.lanes
        if words.size == 0:
            return Access("acc", 0, 0, write)
        return Access("acc", int(words.min()), int(words.max()) + P, write)

    def _vred(self, i: Instr) -> _Exec:
        r = self.regs
        if i.n_o * i.n_i * i.k1 * i.k2 == 0:
            return _Exec(timing.VX_EMPTY, [])
        self._vx_align("vred", src=i.src, dst=i.dst, src_stride=r["vx.src_stride"],
                       dst_stride=r["vx.dst_stride"], k1_stride=r["vx.k1_stride"],
                       k2_stride=r["vx.k2_stride"])
        src = self._words("vred src", i.src, i.n_o, i.n_i, r["vx.src_stride"], i.k1, i.k2,
                          r["vx.k1_stride"], r["vx.k2_stride"])
        dst = self._words("vred dst", i.dst, i.n_o, i.n_i, r["vx.dst_stride"])[..., 0]
        self._check_in_place("vred", dst, src)
        vals = self._gather(src)  # [n_o, n_i, k, P]
        res = vals.max(axis=2) if i.mode == isa.REDUCE_OPS["max"] else vals.sum(axis=2)
        self.acc[dst[..., None] + np.arange(self.config.lanes)] = numerics.wrap32(res)
        return _Exec(timing.vx_cycles(i.n_o * i.n_i, i.k1 * i.k2,
                                      slices=self.config.vx_slices),
                     [self._acc_access(src, False), self._acc_access(dst, True)])

    def _vew(self, i: Instr) -> _Exec:
        return self._scaled_add("vew", i, lambda: (i.ma, i.mb))

    def _vewp(self, i: Instr) -> _Exec:
        c = self.config
        row = i.param * c.param_row_bytes
        end = row + numerics.EW_MULTIPLIER_BYTES

        def multipliers() -> tuple[int, int]:
            if i.param >= c.param_rows:
                raise ExecutionError(f"vewp: parameter row {i.param} exceeds {c.param_rows}",
                                     fault="RANGE")
            return numerics.unpack_ew_multipliers(self.param[row:end])

        ex = self._scaled_add("vewp", i, multipliers)
        if ex.accesses:
            ex.accesses.append(Access("param", row, end, False))
        return ex

    def _scaled_add(self, op: str, i: Instr, multipliers) -> _Exec:
        """``vew`` / ``vewp``: ``multipliers()`` gives (ma, mb) once the operands are
        checked."""
        r = self.regs
        if i.n_o * i.n_i == 0:
            return _Exec(timing.VX_EMPTY, [])
        self._vx_align(op, a=i.a, b=i.b, dst=i.dst, src_stride=r["vx.src_stride"],
                       b_stride=r["vx.b_stride"], dst_stride=r["vx.dst_stride"])
        a = self._words(f"{op} a", i.a, i.n_o, i.n_i, r["vx.src_stride"])
        b = self._words(f"{op} b", i.b, i.n_o, i.n_i, r["vx.b_stride"])
        dst = self._words(f"{op} dst", i.dst, i.n_o, i.n_i, r["vx.dst_stride"])
        self._check_in_place(op, dst, a, b)
        ma, mb = multipliers()
        res = numerics.wrap32(self._gather(a) * ma + self._gather(b) * mb)
        if i.relu:
            res = np.maximum(res, 0)
        self.acc[dst[..., 0, None] + np.arange(self.config.lanes)] = res[..., 0, :]
        return _Exec(timing.vx_cycles(i.n_o * i.n_i, timing.VEW_READS,
                                      slices=self.config.vx_slices),
                     [self._acc_access(a, False), self._acc_access(b, False),
                      self._acc_access(dst, True)])

    def _req(self, i: Instr) -> _Exec:
        c, r = self.config, self.regs
        P = c.lanes
        if i.n_o * i.n_i == 0:
            return _Exec(timing.VX_EMPTY, [])
        self._vx_align("req", src=i.src, dst=i.dst, src_stride=r["vx.src_stride"],
                       dst_stride=r["vx.dst_stride"])
        src = self._words("req src", i.src, i.n_o, i.n_i, r["vx.src_stride"])[..., 0]
        dst = self._words("req dst", i.dst, i.n_o, i.n_i, r["vx.dst_stride"], size=c.obuf_bytes)[..., 0]
        if i.param + i.n_i > c.param_rows:
            raise ExecutionError(f"req: parameter rows [{i.param}, {i.param + i.n_i}) exceed "
                                 f"{c.param_rows}", fault="RANGE")
        prm = self.param[i.param * c.param_row_bytes:(i.param + i.n_i) * c.param_row_bytes]
        bias, mult, shift = (p.reshape(i.n_i, P) for p in numerics.unpack_params(prm))
        if (shift > numerics.SHIFT_MAX).any():
            raise ExecutionError(f"req: a parameter shift exceeds {numerics.SHIFT_MAX}")
        acc = self._gather(src)  # [n_o, n_i, P]
        y = numerics.requantize(acc, bias[None], mult[None], shift[None], bool(i.relu))
        self.obuf[dst[..., None] + np.arange(P)] = y.view(np.uint8)
        acc_access = self._acc_access(src, False)
        obuf_access = Access("obuf", int(dst.min()), int(dst.max()) + P, True) if dst.size else \
            Access("obuf", 0, 0, True)
        param_access = Access("param", i.param * c.param_row_bytes,
                              (i.param + i.n_i) * c.param_row_bytes, False)
        return _Exec(timing.vx_cycles(i.n_o * i.n_i, 1, timing.REQ_PIPELINE,
                                      slices=c.vx_slices),
                     [acc_access, obuf_access, param_access])

    # ------------------------------------------------------------------------------------
    def _st(self, i: Instr) -> _Exec:
        c, r = self.config, self.regs
        if i.n3 * i.rows * i.cols == 0:
            return _Exec(timing.st_cycles(np.zeros(0, np.int64), 0, c.axi_bytes), [])
        starts = self._grid(i.src, i.n3, i.rows, 1, r["st.src_stride3"], r["st.src_stride"])
        if self._first_bad_row(starts, i.cols, c.obuf_bytes):
            self._check_range(starts[:, None] + np.arange(i.cols), c.obuf_bytes,
                              "st: source obuf", "RANGE")
        src = self._grid(i.src, i.n3, i.rows, i.cols, r["st.src_stride3"], r["st.src_stride"])
        dst = self._grid(i.ext, i.n3, i.rows, i.cols, r["st.ext_stride3"], r["st.ext_stride"])
        self._check_unique(dst, "st: external destination")
        accesses = self._mem_write(dst, self.obuf[src], "st", "STORE_BUS")
        self.stats.dma_write_bytes += int(dst.size)
        cycles = timing.st_cycles(dst[::i.cols], i.cols, timing.ST_BEAT_BYTES)
        if self.far is not None:
            cycles += self.far.extra(dst[::i.cols], i.cols, timing.ST_BEAT_BYTES, write=True)
        return _Exec(cycles + self._bus_wait(dst, i.cols, 1, True, cycles),
                     [self._span("obuf", src, False), *accesses])

    def _bus_wait(self, addrs: np.ndarray, cols: int, beat_cycles: int, write: bool,
                  cycles: int) -> int:
        """Cycles a DMA of rows of ``cols`` bytes at ``addrs`` taking ``cycles`` on its
        own waits for the shared external-memory port (0 for local memory): its external
        bursts (:func:`~.timing.bus_cycles`) take the port from its first beat on, shared
        with other cores' transfers (:class:`~.timing.SharedBus`), which may also make the
        running DMA end later (:meth:`Scheduler._delay`)."""
        starts = addrs[::cols]
        starts = starts[starts < isa.LOCAL_BASE]
        if not starts.size:
            return 0
        # ST's bursts are narrow (8-byte beats) on any bus
        width = timing.ST_BEAT_BYTES if write else self.config.axi_bytes
        beats = timing.bus_cycles(starts, cols, width, beat_cycles)
        if self.far is not None:  # the port is held while the far memory answers
            beats += self.far.extra(starts, cols, width, write)
        want = self.now + timing.DMA_LATENCY
        start = (self.bus.write if write else self.bus.read)(
            want, beats, self.coords, self.on_bus_delay, cycles - timing.DMA_LATENCY)
        return start - want

    # ------------------------------------------------------------------------------------
    def _split(self, addrs: np.ndarray, op: str, fault: str) -> tuple[np.ndarray, np.ndarray]:
        """Local-memory mask and local offsets of a DMA's addresses (bus error past the
        local memory's end, like the core's address decoder)."""
        local = addrs >= isa.LOCAL_BASE
        off = addrs[local] - isa.LOCAL_BASE
        if off.size and off.max() >= self.local.size:
            raise ExecutionError(f"{op}: local memory bytes [{int(off.min())}, {int(off.max()) + 1})"
                                 f" reach past its {self.local.size} bytes", fault=fault)
        return local, off

    def _mem_read(self, addrs: np.ndarray, op: str, fault: str) -> tuple[np.ndarray, list[Access]]:
        local, off = self._split(addrs, op, fault)
        ext = addrs[~local]
        self._check_range(ext, self.ext.size, f"{op}: external source", None)
        self._check_bus(ext, op, fault)
        data = np.empty(addrs.size, np.uint8)
        data[local], data[~local] = self.local[off], self.ext[ext]
        return data, [a for a in (self._span("ext", ext, False), self._span("local", off, False))
                      if a.hi > a.lo]

    def _mem_write(self, addrs: np.ndarray, data: np.ndarray, op: str, fault: str) -> list[Access]:
        local, off = self._split(addrs, op, fault)
        ext = addrs[~local]
        self._check_range(ext, self.ext.size, f"{op}: external destination", None)
        self._check_bus(ext, op, fault)
        for lo, hi in self.protect:
            if ext.size and ((ext >= lo) & (ext < hi)).any():
                raise ExecutionError(f"{op}: would overwrite the program at [0x{lo:x}, 0x{hi:x})")
        self.local[off], self.ext[ext] = data[local], data[~local]
        return [a for a in (self._span("ext", ext, True), self._span("local", off, True))
                if a.hi > a.lo]

    # ------------------------------------------------------------------------------------
    def _net_range(self, op: str, name: str, lo: int, n: int) -> None:
        if lo + n > self.local.size:
            raise ExecutionError(f"{op}: {name} [{lo}, {lo + n}) reaches past local memory "
                                 f"({self.local.size} bytes)", fault="RANGE")

    def _send(self, i: Instr) -> _Exec:
        n = i.args["bytes"]
        if n == 0:
            return _Exec(timing.NET_SEND_OVERHEAD, [])
        if (i.src | i.dst) % 8:
            raise ExecutionError(f"send: src={i.src} and dst={i.dst} must be 8-aligned",
                                 fault="ALIGN")
        w, h = self.mesh
        if not (i.x < w and i.y < h):
            raise ExecutionError(f"send: core ({i.x}, {i.y}) is outside the {w} x {h} mesh",
                                 fault="RANGE")
        self._net_range("send", "src", i.src, n)
        self._net_range("send", "dst", i.dst, n)
        size = 8 << self.regs["net.packet_log2"]
        cycles = 0  # when the next head enters the router, after the send started
        for off in range(0, n, size):
            k = min(size, n - off)
            self.outbox.append(Packet(self.coords, (i.x, i.y), i.dst + off, i.tag,
                                      self.local[i.src + off:i.src + off + k].copy(),
                                      self.now + cycles))
            cycles += 1 + -(-k // 8) + timing.NET_PACKET_GAP
        self.stats.net_bytes_sent += n
        return _Exec(timing.NET_SEND_OVERHEAD + cycles, [Access("local", i.src, i.src + n, False)])

    def _recv(self, i: Instr) -> _Exec:
        n = i.args["bytes"]
        if n == 0:
            return _Exec(1, [])
        self._net_range("recv", "region", i.dst, n)
        self.arrived[i.tag] -= n  # the scheduler starts a recv once the bytes are there
        return _Exec(timing.RECV_CYCLES, [Access("local", i.dst, i.dst + n, True)])


def decode_rom(words: Sequence[int]) -> list:
    """Every word decoded, or the :class:`IllegalInstruction` it raises (faults when
    dispatched)."""
    prog = []
    for a, w in enumerate(words):
        try:
            prog.append(isa.decode(w, address=a))
        except IllegalInstruction as e:
            prog.append(e)
    return prog


class Scheduler:
    """In-order dispatch into per-unit queues, dependency tokens, and the NET unit's
    arrival counters, for one core, in steps: :meth:`advance` does everything that can
    happen at time ``t``; :meth:`next_event` says when something can happen next (``None``:
    blocked until a packet arrives, or halted).  :func:`run` drives one core, the mesh
    model (:mod:`.mesh`) drives several."""

    def __init__(self, prog: list, machine: Machine, check_races: bool = True,
                 trace: bool = False, progress: Callable[[int], None] | None = None,
                 max_instructions: int | None = None):
        self.prog, self.m = prog, machine
        self.progress = progress
        self.cfg = machine.config
        self.max_instructions = max_instructions
        self.queues = {u: deque() for u in IMPLEMENTED_UNITS}
        self.tokens = {(a, b): 0 for a in IMPLEMENTED_UNITS for b in IMPLEMENTED_UNITS if a != b}
        self.in_flight: list[tuple[int, tuple[Unit, Unit]]] = []  # (visible at, channel)
        self.busy_until = {u: None for u in IMPLEMENTED_UNITS}  # end time of running instr
        self.running: dict[Unit, tuple[int, Instr]] = {}
        self.pending_signals: dict[Unit, tuple[int, Instr]] = {}  # finished, waiting to push
        self.hz = HazardChecker() if check_races else None
        self.trace: list | None = [] if trace else None
        #: per unit: what the machine calls when another core's transfer delays its DMA
        self.bus_delay = {u: functools.partial(self._delay, u) for u in IMPLEMENTED_UNITS}
        self.seq = Sequencer(prog, self.cfg.icache_lines, half_sizes(self.cfg))
        if self.seq.cache is not None:
            self.seq.cache.bus = machine.bus  # fills and loads share the port
            self.seq.cache.owner = machine.coords
        self.next_dispatch = 0
        self.dispatched = 0
        self.halted = False
        self.time = 0

    def _error(self, msg: str, addr: int, fault: str | None = None) -> ExecutionError:
        return ExecutionError(msg, address=addr, text=str(self.prog[addr]), fault=fault)

    def _held(self, a: Unit, b: Unit) -> int:
        """Tokens in channel a -> b, seen or still on their way."""
        return self.tokens[(a, b)] + sum(1 for _, ch in self.in_flight if ch == (a, b))

    def _can_start(self, u: Unit, ins: Instr) -> bool:
        if not all(self.tokens[(w, u)] > 0 for w in ins.wait):
            return False
        if ins.op != "recv":
            return True
        n = ins.args["bytes"]
        # a recv whose region is past local memory faults at once instead of waiting
        return self.m.arrived[ins.tag] >= n or ins.dst + n > self.m.local.size

    def advance(self, t: int) -> None:
        """Everything that can happen at time ``t``."""
        m, cfg, seq = self.m, self.cfg, self.seq
        if self.halted:
            return  # its time stays the cycle it halted in
        self.time = t
        progress = True
        while progress and not self.halted:
            progress = False
            # Tokens given TOKEN_CYCLES ago are seen by their receivers now.
            if self.in_flight and self.in_flight[0][0] <= t:
                for _, ch in [x for x in self.in_flight if x[0] <= t]:
                    self.tokens[ch] += 1
                self.in_flight = [x for x in self.in_flight if x[0] > t]
                progress = True
            # Finish running instructions whose time is up; push their tokens.
            for u in IMPLEMENTED_UNITS:
                if u in self.running and self.busy_until[u] <= t:
                    self.pending_signals[u] = self.running.pop(u)
                    progress = True
                if u in self.pending_signals:
                    addr, ins = self.pending_signals[u]
                    if all(self._held(u, s) < cfg.token_depth for s in ins.signal):
                        for s in ins.signal:
                            self.in_flight.append((t + timing.TOKEN_CYCLES, (u, s)))
                        if self.hz:
                            self.hz.finish(u, sorted(ins.signal))
                        del self.pending_signals[u]
                        progress = True
            # Start queued instructions whose tokens (and, for recv, bytes) are there.
            for u in IMPLEMENTED_UNITS:
                if u in self.running or u in self.pending_signals or not self.queues[u]:
                    continue
                addr, ins = self.queues[u][0]
                if not self._can_start(u, ins):
                    continue
                self.queues[u].popleft()
                for w in ins.wait:
                    self.tokens[(w, u)] -= 1
                hz_seq = self.hz.start(u, sorted(ins.wait)) if self.hz else 0
                m.now, m.pc = t, addr
                m.on_bus_delay = self.bus_delay[u]
                try:
                    ex = m.execute(ins)
                except ExecutionError as e:
                    if e.address is None:
                        raise self._error(str(e), addr, e.fault) from None
                    raise
                except SnpuError as e:
                    raise self._error(str(e), addr) from None
                if self.hz:
                    self.hz.access(u, hz_seq, ex.accesses, addr, str(ins))
                m.stats.busy[u.name] += ex.cycles
                m.stats.instructions[u.name] += 1
                self.running[u] = (addr, ins)
                self.busy_until[u] = t + ex.cycles
                if self.trace is not None:
                    self.trace.append((addr, u.name, t, t + ex.cycles))
                progress = True
            # Dispatch the next word (the sequencer fetches it through the cache).
            if self.next_dispatch <= t:
                pc, ins, ready = seq.current(t)
                if ready > t:
                    self.next_dispatch = ready
                    continue
                unit = ins.unit
                if ins.op == "loop":
                    go = True
                elif unit is None:  # sync / halt: wait for everything to drain
                    go = self._idle()
                    if go and self.hz:
                        self.hz.barrier()
                    if go and ins.op == "halt":
                        self.halted = True
                        break
                else:
                    go = len(self.queues[unit]) < cfg.queue_depth
                    if go:
                        self.queues[unit].append((pc, ins))
                        self.dispatched += 1
                        if self.progress is not None and self.dispatched % 256 == 0:
                            self.progress(self.dispatched)
                        if self.max_instructions is not None and \
                                self.dispatched > self.max_instructions:
                            raise self._error(f"more than {self.max_instructions} instructions", pc)
                if go:
                    seq.advance()
                    self.next_dispatch = t + timing.DISPATCH_CYCLES + (
                        timing.LOOP_WORD_CYCLES if ins.op == "loop" else 0)
                    progress = True

    def _delay(self, u: Unit, d: int) -> None:
        """Unit ``u``'s running DMA ends ``d`` cycles later: another core's transfer shared
        the external-memory port with it (:class:`~.timing.SharedBus`)."""
        if u in self.running:
            self.busy_until[u] += d
            self.m.stats.busy[u.name] += d
            if self.trace is not None:
                for k in range(len(self.trace) - 1, -1, -1):
                    if self.trace[k][1] == u.name:
                        a, name, t0, t1 = self.trace[k]
                        self.trace[k] = (a, name, t0, t1 + d)
                        break

    def next_event(self) -> int | None:
        """When this core can next make progress on its own (``None``: halted, or blocked
        until a packet arrives)."""
        if self.halted:
            return None
        events = [e for u, e in self.busy_until.items() if u in self.running]
        events += [e for e, _ in self.in_flight]
        if self.next_dispatch > self.time:
            events.append(self.next_dispatch)
        future = [e for e in events if e > self.time]
        return min(future) if future else None

    def finish(self) -> None:
        """Record the statistics of a halted run."""
        st, c = self.m.stats, self.seq.cache.stats
        st.cycles = self.time
        st.icache_hits, st.icache_misses = c.hits, c.misses
        st.icache_prefetches, st.fetch_bytes = c.prefetches, c.fill_bytes

    def _idle(self) -> bool:
        return not self.running and not self.pending_signals and not any(self.queues.values())

    def blocked_report(self) -> str:
        """What every unit of this core waits for (a deadlock report)."""
        parts = []
        for u in IMPLEMENTED_UNITS:
            if u in self.pending_signals:
                addr, ins = self.pending_signals[u]
                full = [s.name for s in ins.signal if self._held(u, s) >= self.cfg.token_depth]
                parts.append(f"{u.name} cannot signal {','.join(full)} (channel full) after ROM "
                             f"word {addr} ({ins.op});")
            elif self.queues[u]:
                addr, ins = self.queues[u][0]
                missing = [w.name for w in ins.wait if self.tokens[(w, u)] == 0]
                if missing:
                    parts.append(f"{u.name} waits for a token from {','.join(missing)} at ROM "
                                 f"word {addr} ({ins.op});")
                elif ins.op == "recv":
                    parts.append(f"NET waits at ROM word {addr} (recv tag {ins.tag}): "
                                 f"{self.m.arrived[ins.tag]} of {ins.args['bytes']} bytes "
                                 "arrived, and no packet is on its way;")
        pc = self.seq.pc
        if pc < len(self.prog):
            ins = self.prog[pc]
            if not isinstance(ins, IllegalInstruction):
                if ins.unit is None:
                    parts.append(f"dispatcher waits for the units to drain at ROM word {pc} "
                                 f"({ins.op})")
                else:
                    parts.append(f"dispatcher blocked at ROM word {pc} ({ins.op}): "
                                 f"{ins.unit.name} queue full ({self.cfg.queue_depth})")
        return " ".join(parts)
