"""Seeded random programs for the tiled array (:class:`~.mesh_program.MeshProgram`).

Every core holds a block of int8 data in external memory.  A *stage* on a core loads a
block into the accumulators, requantises it with random per-channel parameters (VX
compute), stores the result into its local memory, and ``send`` s it to other cores;
receivers ``recv`` the blocks, requantise them again with identity parameters and store
them to external memory.  The traffic patterns (:data:`PATTERNS`):

* ``neighbour`` - every core sends to the next core of its row (wrapping);
* ``ring`` - a pipeline through every core in snake order: each stage receives the
  previous stage's block, requantises it and passes it on; the last core stores it;
* ``all_to_all`` - every core sends its block to every other core;
* ``gather`` - every core sends to one core, which stores them all;
* ``hotspot`` - several rounds of every other core sending to one core, small packets.

Random: block sizes, packet sizes (``net.packet_log2``), tags (one per source or shared),
local-memory placement.  ``meta["expected"]`` maps each output region to what it must
hold, computed with :mod:`numpy` and :func:`~.numerics.requantize` alone (independent of
the golden model's scheduler and network).
"""

from __future__ import annotations

import numpy as np

from snpu.config import CoreConfig

from . import numerics
from .isa import LOCAL_BASE, NET_TAGS, Unit
from .mesh_program import Coord, MeshProgram
from .progen import sparse_int8

LD, VX, ST, NET = Unit.LD, Unit.VX, Unit.ST, Unit.NET
PATTERNS = ("neighbour", "ring", "all_to_all", "gather", "hotspot")
#: the unit each operation runs on
_UNIT = {"ld": LD, "req": VX, "st": ST, "send": NET, "recv": NET, "cfg_vx": VX, "cfg_net": NET}


def _round8(n: int) -> int:
    return -(-n // 8) * 8


class _Chain:
    """Emits one core's instructions in a total order: each instruction waits for the
    token of the previous one when it runs on another unit (so no two instructions of a
    core race, whatever the timing)."""

    def __init__(self, prog):
        self.p = prog
        self.items: list[tuple[str, dict]] = []

    def add(self, op: str, **args) -> None:
        self.items.append((op, args))

    def emit(self) -> None:
        units = [_unit(op, a) for op, a in self.items]
        for k, (op, args) in enumerate(self.items):
            wait = [units[k - 1]] if k and units[k - 1] != units[k] else []
            signal = [units[k + 1]] if k + 1 < len(units) and units[k + 1] != units[k] else []
            self.p.emit(op, wait=wait, signal=signal, **args)


def _unit(op: str, args: dict) -> Unit:
    if op == "cfg":
        return Unit[args["reg"].split(".")[0].upper()]
    return _UNIT[op]


class _Core:
    """One core's stages and the bookkeeping of its local memory and parameters."""

    def __init__(self, mp: MeshProgram, xy: Coord, block: tuple[int, int], rng,
                 packet_log2: int | None = None):
        self.mp, self.xy, self.rng = mp, xy, rng
        self.cfg = mp.config
        self.n_o, self.n_i = block
        self.P = self.cfg.lanes
        self.width = self.n_i * self.P               # channels
        self.n = self.n_o * self.width               # bytes of a block
        self.chain = _Chain(mp.core(xy))
        self.local_next = 8 * int(rng.integers(0, 8))
        ch = self.width
        self.compute = (rng.integers(-200, 200, ch), rng.integers(8000, 20000, ch),
                        rng.integers(13, 16, ch))
        self.identity = (np.zeros(ch, np.int64), np.full(ch, 1 << 14), np.full(ch, 14))
        prm = np.concatenate([numerics.pack_params(*self.compute),
                              numerics.pack_params(*self.identity)])
        addr = mp.core(xy).data(f"params_{xy[0]}_{xy[1]}", prm, "params")
        self.chain.add("ld", buf="param", ext=addr, dst=0, cols=prm.size)
        self.chain.add("cfg", reg="vx.src_stride", value=self.width)
        self.chain.add("cfg", reg="vx.dst_stride", value=self.width)
        if packet_log2 is None:
            packet_log2 = int(rng.integers(0, 6))
        self.chain.add("cfg", reg="net.packet_log2", value=packet_log2)

    def local(self, nbytes: int) -> int:
        a = self.local_next
        self.local_next = _round8(a + nbytes) + 8 * int(self.rng.integers(0, 4))
        if self.local_next > self.cfg.local_bytes:
            raise ValueError("meshgen: the blocks do not fit local memory")
        return a

    def requant(self, x: np.ndarray, params) -> np.ndarray:
        b, m, s = params
        v = x.reshape(self.n_o, self.width).astype(np.int64)
        return numerics.requantize(v, b, m, s).reshape(-1).astype(np.int8)

    def stage(self, ext: int | None, local: int | None, params: int) -> None:
        """Load a block (from external ``ext`` or local ``local``) and requantise it with
        parameter set ``params`` (0 compute, 1 identity) into the output cache (follow
        with :meth:`store`)."""
        src = ext if ext is not None else LOCAL_BASE + local
        self.chain.add("ld", buf="acc", ext=src, dst=0, cols=self.n)
        self.chain.add("req", dst=0, src=0, param=params * self.n_i, n_o=self.n_o, n_i=self.n_i)

    def store(self, ext: int | None = None, local: int | None = None) -> None:
        dst = ext if ext is not None else LOCAL_BASE + local
        self.chain.add("st", src=0, ext=dst, cols=self.n)


def mesh_program(rng, cfg: CoreConfig, mesh: Coord, pattern: str | None = None, *,
                 mem_bytes: int = 1 << 18) -> MeshProgram:
    """A random program of ``pattern`` (random if ``None``) on a ``mesh`` array."""
    pattern = pattern or str(rng.choice(PATTERNS))
    if pattern not in PATTERNS:
        raise ValueError(f"unknown pattern {pattern!r}; one of {PATTERNS}")
    mp = MeshProgram.new(cfg, mesh, mem_bytes)
    coords = mp.coords
    n_i = int(rng.integers(1, min(8, cfg.param_rows // 2) + 1))
    max_o = max(1, min(cfg.acc_words // (n_i * cfg.lanes), cfg.obuf_bytes // (n_i * cfg.lanes), 8))
    block = (int(rng.integers(1, max_o + 1)), n_i)
    small_packets = 0 if pattern == "hotspot" else None
    cores = {xy: _Core(mp, xy, block, rng, small_packets) for xy in coords}
    n = cores[coords[0]].n
    x = {xy: sparse_int8(rng, (n,), 0.9) for xy in coords}
    xa = {xy: mp.core(xy).data(f"x_{xy[0]}_{xy[1]}", x[xy]) for xy in coords}
    expected: dict[str, np.ndarray] = {}
    mp.meta = {"pattern": pattern, "block": block, "expected": expected, "x": x}

    if pattern == "ring":
        order = [(xx if y % 2 == 0 else mesh[0] - 1 - xx, y)
                 for y in range(mesh[1]) for xx in range(mesh[0])]
        tag = int(rng.integers(0, NET_TAGS))
        value = None
        for k, xy in enumerate(order):
            c = cores[xy]
            if k == 0:
                c.stage(xa[xy], None, 0)
                value = c.requant(x[xy], c.compute)
            else:
                landing = c.local(n)
                c.chain.add("recv", tag=tag, dst=landing, bytes=n)
                c.stage(None, landing, 0)
                value = c.requant(value, c.compute)
            if k + 1 < len(order):
                out = c.local(n)
                c.store(local=out)
                nxt = order[k + 1]
                # the receiver's landing place is chosen when it is its turn: pick it now
                landing_next = cores[nxt].local_next
                c.chain.add("send", x=nxt[0], y=nxt[1], src=out, dst=landing_next, bytes=n,
                            tag=tag)
            else:
                y = mp.core(xy).space("y_ring", (n,))
                c.store(ext=y)
                expected["y_ring"] = value
    else:
        if pattern == "neighbour":
            sends = {xy: [((xy[0] + 1) % mesh[0], xy[1])] for xy in coords}
        elif pattern == "all_to_all":  # (on a single core: to itself)
            sends = {xy: [d for d in coords if d != xy or len(coords) == 1] for xy in coords}
        else:  # gather, hotspot: everyone to one core
            sink = coords[int(rng.integers(0, len(coords)))]
            rounds = 1 if pattern == "gather" else int(rng.integers(2, 4))
            sends = {xy: [sink] * rounds for xy in coords
                     if xy != sink or pattern == "gather" or len(coords) == 1}
        # each receiver's arrivals (source, round, landing address, tag), landing next to
        # each other; one tag per arrival, or (at random, or when there are more arrivals
        # than tags) one shared tag and a single recv
        incoming: dict[Coord, list[tuple[Coord, int]]] = {xy: [] for xy in coords}
        for src in coords:
            for r, dst in enumerate(sends.get(src, [])):
                incoming[dst].append((src, r))
        arrivals: dict[Coord, list[tuple[Coord, int, int, int]]] = {}
        shared: dict[Coord, bool] = {}
        step = _round8(n)
        for dst, got in incoming.items():
            if not got:
                continue
            shared[dst] = bool(rng.integers(0, 2)) or len(got) > NET_TAGS
            area = cores[dst].local(step * len(got))
            arrivals[dst] = [(src, r, area + k * step, 3 if shared[dst] else k)
                             for k, (src, r) in enumerate(got)]
        for src in coords:
            c = cores[src]
            if src not in sends:
                continue
            c.stage(xa[src], None, 0)
            out = c.local(n)
            c.store(local=out)
            for r, dst in enumerate(sends[src]):
                landing, tag = next((a, t) for s, rr, a, t in arrivals[dst] if (s, rr) == (src, r))
                c.chain.add("send", x=dst[0], y=dst[1], src=out, dst=landing, bytes=n, tag=tag)
        for dst, got in arrivals.items():
            c = cores[dst]
            if shared[dst]:
                # one recv for everything (they land in distinct places)
                c.chain.add("recv", tag=3, dst=min(a for _, _, a, _ in got),
                            bytes=n * len(got))
            else:
                for _, _, a, tag in got:
                    c.chain.add("recv", tag=tag, dst=a, bytes=n)
            for src, r, a, _ in got:
                name = f"y_{dst[0]}_{dst[1]}_from_{src[0]}_{src[1]}_{r}"
                y = mp.core(dst).space(name, (n,))
                c.stage(None, a, 1)
                c.store(ext=y)
                expected[name] = cores[src].requant(x[src], cores[src].compute)
    for c in cores.values():
        c.chain.emit()
    return mp.finish()
