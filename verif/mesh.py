"""The golden model of a tiled array: one golden core per tile, the mesh network between
their NET units, and the shared external memory.

Every core runs its own ROM (:class:`~.core_model.Scheduler`); a ``send`` puts packets on the
network model, which delivers them to the destination core's local memory and arrival
counter; a ``recv`` waits for its bytes.  Time advances to the next event of any core or
packet, so the cores run concurrently and their estimated cycles include the network.

Network timing (:class:`Network`): packets follow dimension-order (XY) routes; a packet of
``f`` flits holds each link it crosses for ``f`` cycles (wormhole: the head moves on
:data:`~.timing.HOP_CYCLES` after entering a router, :data:`~.timing.INJECT_CYCLES` more in
the source router, the tail follows), so packets that
share a link queue behind each other (contention).  Its last flit lands ``f - 1`` cycles
after its head reaches the destination.

Checks: a cross-core deadlock (no core can move and no packet is on its way, but some core
has not halted) names every blocked core with its ROM word and what it waits for; a packet
landing in a region that one of the destination's running instructions is using is a race.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from snpu.config import CoreConfig, memory_port
from snpu.config import memory_ports as memory_ports_of
from snpu.errors import ExecutionError

from . import act_compress, isa, timing
from .core_model import Machine, Packet, Scheduler, Stats, decode_rom

Coord = tuple[int, int]
#: link directions out of a router
EAST, WEST, NORTH, SOUTH = "E", "W", "N", "S"
#: a router's local port (to its core), counted like a link in the statistics
LOCAL = "L"


def xy_route(src: Coord, dst: Coord) -> list[tuple[Coord, str]]:
    """The links a packet crosses: (router, direction) pairs, x first, then y."""
    (x, y), (tx, ty) = src, dst
    hops = []
    while x != tx:
        step = 1 if tx > x else -1
        hops.append(((x, y), EAST if step > 0 else WEST))
        x += step
    while y != ty:
        step = 1 if ty > y else -1
        hops.append(((x, y), NORTH if step > 0 else SOUTH))
        y += step
    return hops


@dataclass
class Network:
    """Packets in flight, their arrival times, and per-link statistics."""

    link_free: dict = field(default_factory=dict)     #: (router, direction) -> free at
    link_flits: dict = field(default_factory=dict)    #: (router, direction) -> flits carried
    in_flight: list = field(default_factory=list)     #: heap of (arrival, seq, packet)
    seq: int = 0
    packets: int = 0
    flits: int = 0
    hop_flits: int = 0                                #: flits x links crossed

    def inject(self, p: Packet) -> None:
        t = p.time + timing.INJECT_CYCLES
        f = p.flits
        for link in xy_route(p.src, p.dst):
            start = max(t, self.link_free.get(link, 0))
            self.link_free[link] = start + f
            self.link_flits[link] = self.link_flits.get(link, 0) + f
            t = start + timing.HOP_CYCLES
            self.hop_flits += f
        eject = (p.dst, LOCAL)  # out of the destination router's local port
        self.link_flits[eject] = self.link_flits.get(eject, 0) + f
        arrival = t + timing.HOP_CYCLES + f - 1  # through the destination router, then the tail
        self.packets += 1
        self.flits += f
        heapq.heappush(self.in_flight, (arrival, self.seq, p))
        self.seq += 1

    def next_arrival(self) -> int | None:
        return self.in_flight[0][0] if self.in_flight else None

    def arrivals(self, t: int) -> list[Packet]:
        out = []
        while self.in_flight and self.in_flight[0][0] <= t:
            out.append(heapq.heappop(self.in_flight)[2])
        return out

    def stats(self) -> dict:
        return {"packets": self.packets, "flits": self.flits, "hop_flits": self.hop_flits,
                "busiest_link_flits": max((n for (_, d), n in self.link_flits.items()
                                           if d != LOCAL), default=0),
                "link_flits": {f"{x},{y}{d}": n for ((x, y), d), n in sorted(self.link_flits.items())}}


@dataclass
class CoreResult:
    machine: Machine
    stats: Stats
    trace: list


@dataclass
class MeshResult:
    ext: np.ndarray                 #: shared external memory after the run
    cores: dict[Coord, CoreResult]
    cycles: int                     #: until the last core halted
    network: dict
    #: beats (read, write) each external-memory port carried (local memory not included)
    port_beats: list[tuple[int, int]] = field(default_factory=list)

    def local(self, xy: Coord) -> np.ndarray:
        return self.cores[xy].machine.local


def run_mesh(roms: Mapping[Coord, Sequence[int]], ext: np.ndarray,
             config: CoreConfig | None = None, *, mesh: Coord = (1, 1),
             protect: Sequence[tuple[int, int]] = (), check_races: bool = True,
             trace: bool = False, max_instructions: int | None = None,
             progress: Callable[[int], None] | None = None,
             bus_error: tuple[int, int] | None = None,
             far: timing.FarMemory | None = None,
             local: Mapping[Coord, np.ndarray] | None = None,
             memory_ports: int | None = None) -> MeshResult:
    """Run one ROM per core of a ``mesh = (width, height)`` array (cores without a ROM stay
    idle) against the shared external memory ``ext`` (copied), reached through
    ``memory_ports`` ports (default one per column: :func:`snpu.config.memory_ports`), each
    a :class:`~.timing.SharedBus` of its own shared by its columns' cores.  ``local`` gives cores'
    initial local memories; ``far``: the slower range of external memory (timing).  Errors are :class:`~snpu.errors.ExecutionError` naming the
    core."""
    config = config or CoreConfig()
    w, h = mesh
    shared = np.array(ext, dtype=np.uint8, copy=True)
    cores: dict[Coord, Scheduler] = {}
    ports = memory_ports_of(mesh, memory_ports)
    buses = [timing.SharedBus() for _ in range(ports)]  # the external-memory ports
    for xy, words in roms.items():
        if not (0 <= xy[0] < w and 0 <= xy[1] < h):
            raise ExecutionError(f"core {xy} is outside the {w} x {h} mesh")
        bus = buses[memory_port(xy[0], w, ports)]
        m = Machine(config, shared, protect, bus_error, coords=xy, mesh=mesh, bus=bus, far=far)
        if local is not None and xy in local:
            m.local[:] = local[xy]
        cores[xy] = Scheduler(decode_rom(words), m, check_races, trace, progress,
                              max_instructions)
    net = Network()
    t = 0
    while True:
        for xy, s in cores.items():
            try:
                s.advance(t)
            except ExecutionError as e:
                raise _on(xy, e, len(cores)) from None
            for p in s.m.outbox:
                if p.dst not in cores:
                    raise ExecutionError(f"core {p.src} sends to core {p.dst}, which runs no "
                                         "program")
                net.inject(p)
            s.m.outbox.clear()
        landed = net.arrivals(t)
        for p in landed:
            _land(cores[p.dst], p)
        if landed:
            continue  # a recv may start now
        if all(s.halted for s in cores.values()):
            break
        events = [e for e in (s.next_event() for s in cores.values()) if e is not None]
        nxt = net.next_arrival()
        if nxt is not None:
            events.append(nxt)
        if not events:
            blocked = "; ".join(f"core {xy}: {s.blocked_report()}" for xy, s in cores.items()
                                if not s.halted)
            raise ExecutionError(f"deadlock at cycle {t}: {blocked}")
        t = min(events)
    for s in cores.values():
        s.finish()
    return MeshResult(shared, {xy: CoreResult(s.m, s.m.stats, s.trace) for xy, s in cores.items()},
                      max((s.time for s in cores.values()), default=0), net.stats(),
                      [(b.read_beats, b.write_beats) for b in buses])


def _on(xy: Coord, e: ExecutionError, n: int) -> ExecutionError:
    """The error, naming the core (attribute ``core``, and in the message when there are
    several)."""
    if n > 1:
        err = ExecutionError(f"core {xy}: {e}", fault=e.fault)
        err.address = e.address
        e = err
    e.core = xy
    return e


def _land(s: Scheduler, p: Packet) -> None:
    """Packet ``p`` lands in core ``s``'s local memory and counts on its tag."""
    m = s.m
    lo, hi = p.addr, p.addr + p.data.size
    if s.hz is not None:
        for u, (addr, ins) in s.running.items():
            if ins.op in ("ld", "ldc", "st", "stc", "send", "recv") and \
                    _touches_local(m, ins, lo, hi):
                raise ExecutionError(f"core {m.coords}: a packet from core {p.src} lands in "
                                     f"local memory [{lo}, {hi}) while ROM word {addr} "
                                     f"({ins}) on {u.name} uses it: no recv orders them")
    m.local[lo:hi] = p.data
    m.arrived[p.tag] += p.data.size
    m.stats.net_bytes_received += p.data.size


def _touches_local(m: Machine, ins, lo: int, hi: int) -> bool:
    """Whether a running instruction's local-memory footprint overlaps [lo, hi)."""
    from .isa import LOCAL_BASE

    if ins.op == "send":
        return ins.src < hi and lo < ins.src + ins.args["bytes"]
    if ins.op == "recv":
        return False  # the recv of this very data
    if ins.op in ("ldc", "stc"):  # the stream's length depends on the data: its bound
        a = ins.ext - LOCAL_BASE
        return a < hi and lo < a + act_compress.stream_bound(ins.rows, ins.cols)
    r = m.regs
    if ins.op == "ld":
        s3, s1 = isa.ld_strides(isa.BUFFER_NAMES[ins.buf], ins.rows, ins.cols, r.__getitem__)[:2]
    else:
        s3, s1 = r["st.ext_stride3"], r["st.ext_stride"]
    a = Machine._grid(ins.ext, ins.n3, ins.rows, ins.cols, s3, s1) - LOCAL_BASE
    a = a[(a >= 0) & (a < m.local.size)]
    return bool(a.size) and bool(((a >= lo) & (a < hi)).any())
