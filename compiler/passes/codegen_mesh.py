"""Pass: code generation for a tiled array (``--mesh WxH``).

Every core subgraph becomes one ROM per core of the mesh.  Each core runs, in the graph's
order, its part of every layer (:mod:`.parallelize`) with the single-core kernels, and the
data its parts need from other cores moves over the network:

* **Local tensors** (``graph.meta["local"]``: each core keeps its window of rows,
  :class:`LocalCopies`).  After computing its part, a core ``send`` s the bytes another
  core's parts will read (a row block, clipped to the rows the consumer's kernels and
  halos need, or a channel block) straight into that core's copy; the consumer ``recv`` s
  them before its first kernel that reads them.  Activations never leave the array.
  Local bytes are reused once a tensor is dead: a remote write over a dead tensor's bytes
  waits for the receiver's *credit* (a flag sent after its last read of them), and a
  core zeroes the halo of its window of a tensor whose bytes held another tensor before.
* **Shared tensors** (external memory: concatenations, tensors the host or a later segment
  reads, tensors local memory has no room for).  The producer's stores go to shared memory;
  then it sends an 8-byte *flag* (to the consumer's flag slot for this producer, at local
  offset ``8 * source``); the consumer's ``recv`` of the flag orders its loads after the
  producer's stores.

Synchronisation: the arrival counter of a transfer is the *source core's index* (row-major,
so a mesh has at most ``NET_TAGS`` = 16 cores), and packets between one pair of cores arrive
in order (XY routing), so a ``recv`` of ``n`` bytes on tag ``a`` is satisfied by exactly the
next ``n`` bytes core ``a`` sent: a core receives the transfers of each source in the order
they were sent (receiving earlier ones first when a later one is needed first).  Every core
emits its work in one global (topological) order and every ``recv`` follows its ``send`` in
that order (a credit's send is emitted where its sender is in that order), so the array
cannot deadlock; the
emitter's tokens order the NET unit against the core's own loads and stores (footprints in
one address space).  The golden model checks both.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from snpu.config import CoreConfig
from snpu.errors import CompileError
from snpu.verif import isa
from snpu.verif.image import MemoryImage
from snpu.verif.program import Program
from snpu.verif.sequencer import dispatch_count, half_sizes
from snpu.verif.token_flow import deadlock

from .. import kernels
from ..emit import Kernels
from ..ir import Graph
from ..memory import FLAG_BYTES, TensorLayout
from .codegen import deadlock_error, emit_layer
from ..windows import windows
from .parallelize import VIEW_OPS, Part, input_rows
from .pair_cfg import pair_cfg
from .reroll import reroll

Coord = tuple[int, int]
#: the largest remote write of one ``send`` (the ``bytes`` field is 16 bits; 8-aligned pieces)
MAX_SEND = 32768
FLAG = 8


@dataclass
class Transfer:
    """What one core sends another for one tensor: data runs (local tensors) or a flag
    covering ``ranges`` of shared memory."""

    tensor: str
    src: Coord
    dst: Coord
    runs: list[tuple[int, int]]               #: (address, bytes) of each send (local data)
    ranges: list[tuple[int, int]] = field(default_factory=list)  #: shared bytes a flag covers
    flag: bool = False


def codegen_mesh(graph: Graph, config: CoreConfig, image: MemoryImage, dense: bool = False,
                 loops: bool = True) -> Graph:
    g = graph.copy()
    w, h = g.meta["mesh"]["shape"]
    layouts: dict[str, TensorLayout] = g.meta["layouts"]
    local = set(g.meta["local"])
    nodes = {n.name: n for n in g.nodes}
    root = g.meta["storage_root"]
    coords = [(x, y) for y in range(h) for x in range(w)]
    copies = LocalCopies(g, layouts, local)
    pipeline = bool(g.meta["mesh"].get("pipeline"))
    segments, layer = [], 0
    for sg in g.meta["subgraphs"]:
        if sg["device"] == "host":
            segments.append({"kind": "host", "nodes": list(sg["nodes"])})
            continue
        k = len(segments)
        # the default mode's tokens; where a core's program would deadlock on its token
        # channels (codegen.py), the segment again with every token from the latest
        # instruction
        before = image.copy_image()
        for tokens in ("credits", "latest"):
            seg = _Segment(g, config, image, k, coords, w, layouts, copies, root,
                           set(sg["nodes"]), loops, credits=tokens == "credits")
            stats: dict[str, dict] = {}
            end = _emit_segment(seg, g, nodes, sg, layouts, k, layer, dense, pipeline, stats)
            done = {**seg.finish(sg["nodes"], stats, loops), "tokens": tokens}
            stuck = seg.deadlock()
            if stuck is None:
                break
            if tokens == "latest":
                raise deadlock_error(config, stuck)
            image.restore(before)
        layer = end
        segments.append({**done, "memory_ports": g.meta["mesh"].get("memory_ports", w)})
    g.meta["segments"] = segments
    return g


def _emit_segment(seg: _Segment, g: Graph, nodes: dict, sg: dict, layouts: dict, k: int,
                  layer: int, dense: bool, pipeline: bool, stats: dict) -> int:
    """Emit core subgraph ``sg`` (segment ``k``) into ``seg``, its first layer numbered
    ``layer``; returns the number after its last."""
    for n, parts, suffix in _rounds([nodes[name] for name in sg["nodes"]], g):
        for part in parts:
            name = f"{k}:{n.name}@{part.core[0]}_{part.core[1]}{suffix}"
            seg.prepare(n, part, layer, name, dense)
            if pipeline and part.image == 0:
                seg.keep_resident(n, part, layer, name, dense)
            seg.receive_inputs(n, part)
            ctx = kernels.LayerContext(seg.em[part.core], layer, name,
                                       dense, n.meta.get("neurons"), shared=seg.shared)
            ctx.resident = seg.resident[part.core]
            if part.kind == "batch":  # whole layer, image by image
                for b in range(part.lo, part.hi):
                    st = emit_layer(ctx, g, n, layouts, image=b)
            else:
                st = emit_layer(ctx, g, n, seg.layouts[part.core], part, image=part.image or 0)
            stats.setdefault(n.name, {**st, "split": n.meta["split"],
                                      "parts": [p.to_dict() for p in n.meta["parts"]]})
            seg.send_output(n, part)
        layer += 1
    return layer


def _rounds(nodes: list, g: Graph):
    """(node, parts, name suffix) in emission order: each layer once with all its parts;
    in throughput mode (``--split pipeline``) image by image, every layer of image ``b``
    (its part narrowed to that image) before any of image ``b + 1``, so that each stage's
    core runs image ``b + 1`` while the next stage runs image ``b``."""
    work = [n for n in nodes if n.op not in VIEW_OPS]
    pipeline = g.meta["mesh"].get("pipeline")
    if not pipeline:
        return [(n, n.meta["parts"], "") for n in work]
    return [(n, [dataclasses.replace(p, image=b) for p in n.meta["parts"]], f"#{b}")
            for b in range(pipeline["images"]) for n in work]


class TransferPlan:
    """Which bytes each part of a core subgraph's layers sends to other cores' parts
    (placement-independent: cores are whatever the parts say)."""

    def __init__(self, g: Graph, names: set[str], layouts: dict, local: set, root: dict):
        self.g, self.layouts, self.local, self.root = g, layouts, local, root
        self.writers: dict[str, list] = {}  # storage root -> nodes of the subgraph writing it
        self.readers: dict[str, list] = {}  # storage root -> (node, input index) reading it
        #: concatenations: in local memory, whole rows move once their last slice is made
        self.concats = {root[n.outputs[0]] for n in g.nodes if n.op == "Concat"}
        self._comade: dict[str, set[int]] = {}
        for n in g.nodes:
            if n.device != "core" or n.name not in names or n.op in VIEW_OPS:
                continue
            self.writers.setdefault(root[n.outputs[0]], []).append(n)
            for idx, i in enumerate(n.inputs):
                if i and not g.tensor(i).is_const:
                    self.readers.setdefault(root[i], []).append((n, idx))

    def sends(self, n, part: Part) -> list[Transfer]:
        """After ``part`` of ``n``: what other cores' parts will read of it, per core."""
        r = self.root[n.outputs[0]]
        L = self.layouts[r]
        Y = self.layouts[n.outputs[0]]
        if part.kind == "batch":
            return self._batch_sends(r, L, part)
        if part.image is not None and L.n > 1:  # one image of a batch in shared memory
            L, Y = L.at(part.image), Y.at(part.image)
        if r in self.local and r in self.concats and n is not self.writers[r][-1]:
            return []  # the last slice's producer sends the whole rows
        need: dict[Coord, tuple[int, int]] = {}
        for c, idx in self.readers.get(r, []):
            for cp in c.meta["parts"]:
                if cp.core == part.core or (cp.image is not None and cp.image != part.image):
                    continue  # (throughput mode: the parts are every image's, in turn)
                lo, hi = input_rows(self.g, c, cp, idx) if cp.kind == "rows" else (0, L.h)
                old = need.get(cp.core)
                need[cp.core] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))
        made_lo, made_hi = (part.lo, part.hi) if part.kind == "rows" else (0, L.h)
        made = part.pixels(L.w) if part.kind == "rows" else (0, L.h * L.w)
        out = []
        for dst, (lo, hi) in sorted(need.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            ra, rb = max(lo, made_lo), min(hi, made_hi)
            if ra >= rb:
                continue
            row0 = L.base - L.pad_w * L.pixel  # first byte of row 0, horizontal halo included
            if r in self.local:
                if part.kind == "channels":
                    spans = [(Y.base + part.lo, part.hi - part.lo)]
                else:
                    spans = self._pixel_spans(r, L, max(made[0], lo * L.w), min(made[1], hi * L.w))
                runs = [(a, min(MAX_SEND, start + size - a))
                        for start, size in spans for a in range(start, start + size, MAX_SEND)]
                out.append(Transfer(r, part.core, dst, runs))
            else:
                out.append(Transfer(r, part.core, dst, [], [(row0 + ra * L.row, row0 + rb * L.row)],
                                    flag=True))
        return out


    def _pixel_spans(self, r: str, L: TensorLayout, p0: int, p1: int) -> list[tuple[int, int]]:
        """(first byte, bytes) of pixels [p0, p1) (raster order) of local tensor ``r``: a
        row made whole by one part moves with its halo pixels, a row shared by two parts
        (:attr:`comade`) moves its own pixels only (every core that keeps it zeroes its
        halo pixels itself: :class:`LocalCopies`)."""
        out: list[tuple[int, int]] = []
        shared = self.comade(r)
        for y in range(p0 // L.w, -(-p1 // L.w)):
            a, b = max(p0, y * L.w) - y * L.w, min(p1, (y + 1) * L.w) - y * L.w
            if (a, b) == (0, L.w) and y not in shared:
                start, size = L.base - L.pad_w * L.pixel + y * L.row, L.row
            else:
                start, size = L.addr(y, a), (b - a) * L.pixel
                if start % 8:
                    raise CompileError(f"internal: pixels of {r!r} start at 0x{start:x}, not "
                                       "8-aligned (a remote write's start must be)")
            if out and out[-1][0] + out[-1][1] == start:
                out[-1] = (out[-1][0], out[-1][1] + size)
            else:
                out.append((start, size))
        return out

    def comade(self, r: str) -> set[int]:
        """The rows of storage root ``r`` that two parts make between them (blocks of pixels
        that start or end mid-row), found once per root."""
        if r not in self._comade:
            self._comade[r] = comade_rows(self.writers.get(r, ()), self.layouts[r].w)
        return self._comade[r]

    def _batch_sends(self, r: str, L: TensorLayout, part: Part) -> list[Transfer]:
        """A batch part's images other cores read (only when their blocks differ): a flag
        covering those images in shared memory."""
        need: dict[Coord, tuple[int, int]] = {}
        for c, idx in self.readers.get(r, []):
            for cp in c.meta["parts"]:
                if cp.core == part.core:
                    continue
                lo, hi = (cp.lo, cp.hi) if cp.kind == "batch" else (0, L.n)
                lo, hi = max(lo, part.lo), min(hi, part.hi)
                if lo < hi:
                    old = need.get(cp.core)
                    need[cp.core] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))
        first = L.base - L.pad_h * L.row - L.pad_w * L.pixel  # image 0's first byte, halo included
        return [Transfer(r, part.core, dst, [], [(first + a * L.image, first + b * L.image)], flag=True)
                for dst, (a, b) in sorted(need.items(), key=lambda kv: (kv[0][1], kv[0][0]))]


def comade_rows(writers, width: int) -> set[int]:
    """The rows of a map ``width`` pixels wide that the parts of ``writers`` (nodes) share:
    the first and last rows of blocks of pixels that start or end mid-row."""
    out = set()
    for n in writers:
        for p in n.meta.get("parts", ()):
            if p.kind == "rows" and p.cols is not None:
                if p.cols[0] > 0:
                    out.add(p.lo)
                if p.cols[1] < width:
                    out.add(p.hi - 1)
    return out


class LocalCopies:
    """Where each core keeps its copy of every local tensor: only its *window*, the rows its
    parts write or read (:func:`..windows.windows`), from the tensor's local-memory
    offset on (the same in every core; :func:`..memory.allocate` sizes it for the largest
    window).  A core addresses its copy with the tensor's layout moved by
    :meth:`shift`, so kernels and transfers use row numbers of the whole tensor."""

    def __init__(self, g: Graph, layouts: dict[str, TensorLayout], local: set[str]):
        self.root, self.layouts = g.meta["storage_root"], layouts
        halo = {r: (layouts[r].pad_h, layouts[r].pad_w) for r in local}
        self.win = windows(g, self.root, halo, set(local))
        #: rows each core's parts write, per local tensor (their halo pixels are its to
        #: zero), and the rows two parts share in its window (no one sends their halo pixels)
        self.own: dict[str, dict[Coord, list[tuple[int, int]]]] = {r: {} for r in local}
        writers: dict[str, list] = {}
        for n in g.nodes:
            r = self.root.get(n.outputs[0]) if n.outputs else None
            if r in self.own and "parts" in n.meta and n.op not in VIEW_OPS:
                writers.setdefault(r, []).append(n)
                for p in n.meta["parts"]:
                    rows = (p.lo, p.hi) if p.kind == "rows" else (0, layouts[r].h)
                    self.own[r].setdefault(p.core, []).append(rows)
        for r, ws in writers.items():
            for y in comade_rows(ws, layouts[r].w):
                for xy, (a, b) in self.win.get(r, {}).items():
                    if a <= y < b:
                        self.own[r].setdefault(xy, []).append((y, y + 1))
        self._layouts_of: dict[Coord, dict[str, TensorLayout]] = {}
        self.regions: dict[Coord, list[tuple[int, int, str]]] = {}
        for r, cores in self.win.items():
            for xy in cores:
                self.regions.setdefault(xy, []).append((*self.region(r, xy), r))

    def shift(self, r: str, xy: Coord) -> int:
        """Bytes to add to an address of local tensor ``r`` on core ``xy``."""
        w = self.win.get(r, {}).get(xy)
        L = self.layouts.get(r)
        return 0 if w is None else -(w[0] + L.pad_h) * L.row

    def region(self, r: str, xy: Coord) -> tuple[int, int]:
        """The bytes [lo, hi) core ``xy``'s copy of ``r`` occupies."""
        a, b = self.win[r][xy]
        L = self.layouts[r]
        lo = L.base - L.pad_w * L.pixel - L.pad_h * L.row
        return lo, lo + (b - a) * L.row

    def layouts_of(self, xy: Coord) -> dict[str, TensorLayout]:
        """Every tensor's layout as core ``xy`` addresses it (made once per core)."""
        if xy not in self._layouts_of:
            out = dict(self.layouts)
            for t, L in self.layouts.items():
                s = self.shift(self.root.get(t, t), xy)
                if s:
                    out[t] = dataclasses.replace(L, base=L.base + s)
            self._layouts_of[xy] = out
        return self._layouts_of[xy]

    def overlapping(self, xy: Coord, lo: int, hi: int, other_than: str) -> list[str]:
        """Local tensors other than ``other_than`` whose copies on ``xy`` overlap [lo, hi)."""
        return [r for a, b, r in self.regions.get(xy, ()) if r != other_than and a < hi and lo < b]


class _Segment:
    """One core subgraph's programs (one per core) and the transfers between them."""

    def __init__(self, g, config, image, k, coords, width, layouts, copies: LocalCopies, root,
                 names, loops: bool, credits: bool = True):
        self.g, self.k, self.coords, self.width = g, k, coords, width
        self.copies = copies
        self.plan = TransferPlan(g, names, layouts, set(copies.win), root)
        self.layouts = {xy: copies.layouts_of(xy) for xy in coords}
        self.root = root
        #: local tensors each core has touched, in emission order; (sender, receiver, tensor)
        #: pairs whose credit was sent (the receiver's copy of tensor is dead: reuse is safe)
        self.touched: dict[Coord, set[str]] = {xy: set() for xy in coords}
        self.credited: set[tuple[Coord, Coord, str]] = set()
        self.progs = {xy: Program(config, image=image, rom_name=f"rom:{k}:{xy[0]}_{xy[1]}")
                      for xy in coords}
        self.em = {xy: Kernels(p, net=True, loops=loops, credits=credits)
                   for xy, p in self.progs.items()}
        self.shared: dict = {}
        self.config = config
        #: throughput mode: per core, the read-only data it keeps in local memory (content
        #: key -> local address), and the first free byte of its local memory
        self.resident: dict[Coord, dict] = {xy: {} for xy in coords}
        first_free = -(-max(g.meta.get("local_peak_bytes", 0), FLAG_BYTES) // 64) * 64
        self.local_free = {xy: first_free for xy in coords}
        self.resident_bytes = 0
        self.queues: dict[tuple[Coord, Coord], deque[Transfer]] = {}
        self.sent: dict[tuple[str, Coord, Coord], Transfer] = {}
        self.noc = {"data_bytes": 0, "flags": 0, "hop_bytes": 0, "sends": 0}

    def tag(self, xy: Coord) -> int:
        return xy[0] + xy[1] * self.width

    # -------------------------------------------------------------------------------------
    def prepare(self, n, part: Part, layer: int, name: str, dense: bool) -> None:
        """Before ``part`` of ``n``: a local tensor it is the first on its core to touch gets
        the zero halo of that core's window when its bytes held another tensor before (every
        array segment starts with its local memories zeroed, as the golden model and the
        testbench run it)."""
        xy, c = part.core, self.copies
        for t in [*n.inputs, n.outputs[0]]:
            r = self.root.get(t) if t else None
            if r not in c.win or xy not in c.win[r] or r in self.touched[xy]:
                continue
            self.touched[xy].add(r)
            L = self.layouts[xy][r]
            if (L.pad_h or L.pad_w) and any(o in self.touched[xy]
                                             for o in c.overlapping(xy, *c.region(r, xy), r)):
                ctx = kernels.LayerContext(self.em[xy], layer, f"{name}:halo:{r}", dense)
                kernels.zero_halo(ctx, L, c.win[r][xy], c.own[r].get(xy, []))

    def keep_resident(self, n, part: Part, layer: int, name: str, dense: bool) -> None:
        """Throughput mode (a pipeline stage runs every image of a stream): before a layer's
        first image, copy its weights, indices and parameter rows from shared memory into
        the core's local memory while there is room, so that every image loads them from
        there and not through the shared memory port.  The layer is emitted once into a
        scratch program to learn what it reads; each blob then goes through the
        accumulators into local memory (:func:`.kernels.copy`)."""
        xy = part.core
        scratch = Program(self.config, image=MemoryImage(1 << 16, growable=True))
        dry = kernels.LayerContext(Kernels(scratch, net=True, loops=False), layer, name, dense,
                                   n.meta.get("neurons"))
        blobs, place = [], dry.data

        def record(tag, array, kind="weights", align=8):
            blobs.append((tag, np.ascontiguousarray(array), kind, align))
            return place(tag, array, kind, align)

        dry.data = record
        emit_layer(dry, self.g, n, self.layouts[xy], part, image=0)
        ctx = kernels.LayerContext(self.em[xy], layer, f"{name}:resident", dense,
                                   shared=self.shared)
        keep = self.resident[xy]
        for j, (tag, a, kind, align) in enumerate(blobs):
            key = kernels.data_key(a, kind, align)
            if key in keep:
                continue
            size = -(-max(a.nbytes, 1) // 8) * 8
            at = -(-self.local_free[xy] // max(8, align)) * max(8, align)
            if at + size > self.config.local_bytes:
                continue
            src = ctx.data(f"{j}:{tag}", a, kind, align)
            pitch = next(c for c in (64, 32, 16, 8) if size % c == 0)
            X = TensorLayout(src, 1, size // pitch, pitch, pitch, size)
            kernels.copy(ctx, X, dataclasses.replace(X, base=isa.LOCAL_BASE + at))
            keep[key] = isa.LOCAL_BASE + at
            self.local_free[xy] = at + size
            self.resident_bytes += size

    def send_output(self, n, part: Part) -> None:
        """After ``part`` of ``n``: send what other cores' parts will read of it."""
        for tr in self.plan.sends(n, part):
            self._send(tr)

    def _send(self, tr: Transfer) -> None:
        em, slot = self.em[tr.src], isa.LOCAL_BASE + 8 * self.tag(tr.src)
        hops = abs(tr.src[0] - tr.dst[0]) + abs(tr.src[1] - tr.dst[1])
        if tr.flag:
            em.send(*tr.dst, slot, slot, FLAG, self.tag(tr.src), after=tuple(tr.ranges))
            self.noc["flags"] += 1
            self.noc["sends"] += 1
        if tr.runs:
            shift = self.copies.shift(tr.tensor, tr.dst)
            lo = tr.runs[0][0] + shift
            hi = tr.runs[-1][0] + tr.runs[-1][1] + shift
            for old in self.copies.overlapping(tr.dst, lo, hi, tr.tensor):
                if old in self.touched[tr.dst] and (tr.src, tr.dst, old) not in self.credited:
                    self._credit(tr.dst, tr.src, old)
        for addr, size in tr.runs:
            em.send(*tr.dst, addr + self.copies.shift(tr.tensor, tr.src),
                    addr + self.copies.shift(tr.tensor, tr.dst), size, self.tag(tr.src))
            self.noc["data_bytes"] += size
            self.noc["hop_bytes"] += size * hops
            self.noc["sends"] += 1
        self.queues.setdefault((tr.src, tr.dst), deque()).append(tr)
        self.sent[(tr.tensor, tr.src, tr.dst)] = tr

    def _credit(self, owner: Coord, writer: Coord, old: str) -> None:
        """``owner`` tells ``writer`` (a flag, sent once ``owner``'s copy of the dead tensor
        ``old`` has been read for the last time) that it may write over those bytes; the
        writer waits for it before its remote write."""
        slot = isa.LOCAL_BASE + 8 * self.tag(owner)
        self.em[owner].send(*writer, slot, slot, FLAG, self.tag(owner),
                            freed=(self.copies.region(old, owner),))
        self.noc["flags"] += 1
        self.noc["sends"] += 1
        self.noc["credits"] = self.noc.get("credits", 0) + 1
        tr = Transfer(f"credit:{old}", owner, writer, [], flag=True)
        self.queues.setdefault((owner, writer), deque()).append(tr)
        self.credited.add((writer, owner, old))
        self._receive(tr)

    def receive_inputs(self, n, part: Part) -> None:
        """Before ``part`` of ``n``: receive every transfer of its inputs from other cores."""
        for i in n.inputs:
            if not i or self.g.tensor(i).is_const:
                continue
            r = self.root[i]
            for p in self.plan.writers.get(r, []):
                for pp in p.meta["parts"]:
                    tr = self.sent.get((r, pp.core, part.core))
                    if tr is not None:
                        self._receive(tr)

    def _receive(self, tr: Transfer) -> None:
        q = self.queues.get((tr.src, tr.dst))
        if not q or tr not in q:
            return  # received already
        em, tag = self.em[tr.dst], self.tag(tr.src)
        while True:
            t = q.popleft()
            if t.flag:
                slot = isa.LOCAL_BASE + 8 * tag
                em.recv(tag, slot, FLAG, covers=tuple(t.ranges))
            for addr, size in t.runs:
                em.recv(tag, addr + self.copies.shift(t.tensor, t.dst), size)
            if t is tr:
                return

    # -------------------------------------------------------------------------------------
    def deadlock(self) -> str | None:
        """Where a core's finished program would stop on its own token channels (each
        ``recv`` taken as satisfied: the order of sends and receives keeps the array
        itself from deadlocking, module docstring), or ``None``."""
        for xy, p in self.progs.items():
            stuck = deadlock(p.instrs, p.config.token_depth, p.config.queue_depth)
            if stuck is not None:
                return f"core {xy[0]},{xy[1]}: {stuck}"
        return None

    def finish(self, names: list[str], stats: dict, loops: bool) -> dict:
        left = [(a, b, len(q)) for (a, b), q in self.queues.items() if q]
        if left:
            raise CompileError(f"internal: transfers never received: {left}")
        roms, counts, dispatched, nops = {}, {}, 0, 0
        for xy, p in self.progs.items():
            self.em[xy].halt()
            p.instrs = pair_cfg(p.instrs)
            dispatched += dispatch_count(p.instrs)
            nops += self.em[xy].nops
            if loops:
                p.instrs = reroll(p.instrs, halves=half_sizes(p.config))
            p.place_rom()
            roms[f"{xy[0]}_{xy[1]}"] = p.rom_name
            counts[f"{xy[0]}_{xy[1]}"] = len(p.instrs)
        return {"kind": "core", "mesh": [self.width, len(self.coords) // self.width],
                "roms": roms, "nodes": list(names), "instructions": sum(counts.values()),
                "instructions_per_core": counts, "dispatched_instructions": dispatched,
                "token_nops": nops, "noc": dict(self.noc), "layers": stats,
                **({"resident_bytes": self.resident_bytes} if self.resident_bytes else {})}
