"""Activation layouts in external memory, and the allocation pass.

Every activation tensor ``[1, C, H, W]`` lives channels-last (HWC) as int8:

``addr(y, x, c) = base + y * row + x * pixel + c``

(a batch of ``N`` images: ``N`` such layouts ``image`` bytes apart), with a zero *halo* of ``pad_h`` rows and ``pad_w`` pixels around it when a convolution
reads it with padding (so im2col loads need no edge cases), a ``pixel`` stride larger than
``C`` when the tensor is a channel slice of a concatenation (producers write straight into
the concatenated buffer: concatenation costs nothing), and 2-D tensors ``[1, F]`` as
``H = W = 1, C = F``.  Flatten / Reshape views have no storage: their consumers read the
viewed tensor.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field

import numpy as np

from snpu.errors import CompileError
from snpu.verif.image import MemoryImage

from snpu.verif import isa

from .ir import Graph
from .windows import SHARED_OUTPUT_SPLITS, windows


def _local_tensors(g: Graph, st: "Storage", local_bytes: int) -> tuple[dict[str, int], int]:
    """Tensors that go to local memory, with their offsets (see :func:`allocate`), and the
    bytes of local memory they use at most (flags included)."""
    seg = {n: k for k, sg in enumerate(g.meta.get("subgraphs", [])) for n in sg["nodes"]}
    prod = g.producers()
    users: dict[str, list] = {}
    for n in g.nodes:
        for i in n.inputs:
            if i and not g.tensor(i).is_const:
                users.setdefault(view_source(g, i), []).append(n)
    order = {n.name: k for k, n in enumerate(g.nodes)}
    writers: dict[str, list] = {}  # root -> the core layers writing it (slices, in place)
    readers: dict[str, list] = {}  # root -> the layers reading it (or a slice or view of it)
    for n in g.nodes:
        if n.device == "core" and n.op not in ("Concat", "Flatten", "Reshape"):
            writers.setdefault(st.root.get(n.outputs[0]), []).append(n)
        for i in n.inputs:
            if i and not g.tensor(i).is_const:
                readers.setdefault(st.root.get(i, i), []).append(n)
    candidates = []
    for t in st.roots:
        p = prod.get(t)
        if p is None or p.device != "core" or t in g.outputs or not users.get(t):
            continue
        if batch_size(g.tensor(t).shape) != 1 and not _one_image_per_core(writers.get(t, [])):
            continue
        h, w, _ = hwc(g.tensor(t).shape)
        ws = writers.get(t, [])
        if any((x.meta.get("split") or {}).get("kind") in SHARED_OUTPUT_SPLITS
               and (h * w > 1 or t in st.halo) for x in ws):
            continue  # channel slices of a map are not contiguous: shared memory
        if p.op == "Concat" and not _concat_local(ws, readers.get(t, []), order):
            continue
        # every reader and writer (a concatenation's slices too) in the producer's core
        # subgraph: local memories do not outlive an array segment
        us = users[t] + readers.get(t, []) + ws
        if any(u.device != "core" or seg.get(u.name) != seg.get(p.name) for u in us):
            continue
        if any(u.op in ("Flatten", "Reshape") and u.outputs[0] in g.outputs for u in us):
            continue
        candidates.append(t)
    # each core keeps the rows its parts touch; every core's copy starts at the same offset
    win = windows(g, st.root, st.halo, set(candidates))
    live: dict[str, list[int]] = {}
    for k, n in enumerate(g.nodes):
        for t in [*n.inputs, *n.outputs]:
            r = st.root.get(t) if t else None
            if r in win:
                span = live.setdefault(r, [k, k])
                span[1] = k
    placed: list[tuple[int, int, int, int]] = []  # (offset, bytes, first node, last node)
    out = {}
    for t in candidates:  # program order: early layers (usually the largest maps) first
        if not win[t]:
            continue
        row = _local_row(g, t, st.halo)
        size = -(-max(b - a for a, b in win[t].values()) * row // 64) * 64
        first, last = live[t]
        off = FLAG_BYTES
        for o, n, f, l in sorted(x for x in placed if not (x[3] < first or last < x[2])):
            if off + size <= o:
                break
            off = max(off, o + n)
        if off + size <= local_bytes:
            out[t] = off
            placed.append((off, size, first, last))
    return out, max([FLAG_BYTES] + [o + n for o, n, _, _ in placed])


def _one_image_per_core(writers: list) -> bool:
    """Is every part of these layers one image's (a batch smaller than the array, each image
    on its own cores)?  Each core then keeps a window of its image only, and the local
    layout is one image's."""
    parts = [p for w in writers for p in w.meta.get("parts") or ()]
    return bool(parts) and all(p.image is not None for p in parts)


def _concat_local(writers: list, readers: list, order: dict[str, int]) -> bool:
    """Can a concatenation live in local memory?  Its slices' producers must split alike
    (each core makes the same rows of every slice, and sends whole rows once the last slice
    is made: :class:`.passes.codegen_mesh.TransferPlan`), and nothing may read it, or a
    slice of it, before its last slice is made."""
    if not writers:
        return False
    parts = [tuple(w.meta.get("parts") or ()) for w in writers]
    if any(p != parts[0] or not p for p in parts) or parts[0][0].kind not in ("rows", "whole"):
        return False
    last = max(order[w.name] for w in writers)
    return all(order[r.name] > last for r in readers)


def _local_row(g: Graph, t: str, halo: dict) -> int:
    """Bytes of one row of ``t`` in local memory: halo pixels included, padded to 8 bytes
    (row blocks move by remote writes, which start 8-aligned)."""
    _, w, c = hwc(g.tensor(t).shape)
    pw = halo.get(t, (0, 0))[1]
    return -(-((w + 2 * pw) * c) // 8) * 8


@dataclass
class TensorLayout:
    base: int
    h: int
    w: int
    c: int
    pixel: int
    row: int
    pad_h: int = 0
    pad_w: int = 0
    #: batch: ``n`` images of the same layout, ``image`` bytes apart (each with its halo)
    n: int = 1
    image: int = 0

    def at(self, b: int) -> "TensorLayout":
        """Image ``b`` of a batch, as a layout of one image."""
        if not 0 <= b < self.n:
            raise IndexError(f"image {b} of a batch of {self.n}")
        return TensorLayout(self.base + b * self.image, self.h, self.w, self.c, self.pixel,
                            self.row, self.pad_h, self.pad_w)

    def padded(self) -> "TensorLayout":
        """The layout with its halo as part of the map (no halo left)."""
        return dataclasses.replace(self, base=self.base - self.pad_h * self.row
                                   - self.pad_w * self.pixel, h=self.h + 2 * self.pad_h,
                                   w=self.w + 2 * self.pad_w, pad_h=0, pad_w=0)

    def addr(self, y: int, x: int, ch: int = 0) -> int:
        return self.base + y * self.row + x * self.pixel + ch

    def addresses(self) -> np.ndarray:
        """Byte addresses of every element, [N, H, W, C]."""
        return (self.base + np.arange(self.n)[:, None, None, None] * self.image
                + np.arange(self.h)[None, :, None, None] * self.row
                + np.arange(self.w)[None, None, :, None] * self.pixel
                + np.arange(self.c)[None, None, None, :])

    @property
    def dense(self) -> bool:
        return self.pixel == self.c and self.row == self.w * self.c and not self.pad_h and not self.pad_w

    def to_dict(self) -> dict:
        return asdict(self)


def channel_view(L: TensorLayout, lo: int, hi: int) -> TensorLayout:
    """Channels [lo, hi) of ``L`` as a layout of their own (same pixels and rows)."""
    return dataclasses.replace(L, base=L.base + lo, c=hi - lo)


def batch_size(shape) -> int:
    """N of an [N, C, H, W] or [N, F] tensor (other ranks are one flat image)."""
    return int(shape[0]) if len(shape) in (2, 4) else 1


def hwc(shape) -> tuple[int, int, int]:
    """(H, W, C) of a tensor's layout; other ranks (host-only tensors) are stored flat."""
    if len(shape) == 4:
        return shape[2], shape[3], shape[1]
    if len(shape) == 2:
        return 1, 1, shape[1]
    return 1, 1, int(np.prod(shape))


def view_source(g: Graph, name: str) -> str:
    """Follow core Flatten / Reshape views back to the tensor that has storage."""
    prod = g.producers()
    while True:
        p = prod.get(name)
        if p is None or p.op not in ("Flatten", "Reshape") or p.device != "core":
            return name
        name = p.inputs[0]


#: bytes at the start of every local memory kept for the array's synchronisation flags
#: (8 bytes per source core: :mod:`.passes.codegen_mesh`)
FLAG_BYTES = 8 * 16


@dataclass
class Storage:
    """Where every activation the core touches is stored, before addresses are given:
    ``roots``: the tensors that own storage, in program order (views and slices of a
    concatenation own none); ``halo[t]``: (rows, pixels) of zeros around ``t``;
    ``parent[t]``: (concatenation output, channel offset) of a slice; ``root[t]``: the
    tensor whose storage holds ``t`` (through views and concatenations)."""

    roots: list[str]
    halo: dict[str, tuple[int, int]]
    parent: dict[str, tuple[str, int]]
    root: dict[str, str]

    def geometry(self, g: Graph, t: str) -> tuple[int, int]:
        """(bytes of one image with its halo, images) of root ``t`` in external memory."""
        h, w, c = hwc(g.tensor(t).shape)
        ph, pw = self.halo.get(t, (0, 0))
        return (h + 2 * ph) * (w + 2 * pw) * c, batch_size(g.tensor(t).shape)

    def size(self, g: Graph, t: str) -> int:
        one, n = self.geometry(g, t)
        return n * one


def storage(g: Graph) -> Storage:
    """The :class:`Storage` of graph ``g`` (core nodes assigned by the partition pass)."""
    halo: dict[str, tuple[int, int]] = {}
    for n in g.nodes:
        if n.op == "Conv" and n.device == "core":
            pads = n.meta["geometry"][4]
            ph, pw = max(pads[0], pads[2]), max(pads[1], pads[3])
            src = n.inputs[0]
            h0, w0 = halo.get(src, (0, 0))
            halo[src] = (max(h0, ph), max(w0, pw))
        elif n.op in ("MaxPool", "AveragePool") and n.device == "core":
            ph, pw = n.meta.get("q", {}).get("halo", (0, 0))  # quantize: ops.pool_halo
            if ph or pw:
                h0, w0 = halo.get(n.inputs[0], (0, 0))
                halo[n.inputs[0]] = (max(h0, ph), max(w0, pw))
    # concatenation: inputs are slices of the output
    parent: dict[str, tuple[str, int]] = {}
    for n in g.nodes:
        if n.op == "Concat" and n.device == "core":
            off = 0
            for i in n.inputs:
                if i in parent:
                    raise CompileError(f"{n.where()}: tensor {i!r} is an input of two "
                                       "concatenations; the core needs a copy there")
                if g.tensor(i).is_const:
                    raise CompileError(f"{n.where()}: input {i!r} is a constant")
                parent[i] = (n.outputs[0], off)
                off += g.tensor(i).shape[1]

    def top(t):
        while t in parent:
            t = parent[t][0]
        return t

    # the halo of a concatenation covers every slice's needs
    for t, (ph, pw) in list(halo.items()):
        r = top(t)
        h0, w0 = halo.get(r, (0, 0))
        halo[r] = (max(h0, ph), max(w0, pw))
    # a tensor only host subgraphs touch stays in host memory: no storage here
    on_core = {t for n in g.nodes if n.device == "core"
               for t in list(n.inputs) + list(n.outputs) if t and not g.tensor(t).is_const}
    # element-wise outputs written over an input that dies there (the memory plan)
    inplace = dict(g.meta.get("inplace") or {})
    roots = [t for t in list(g.inputs) + [o for n in g.nodes for o in n.outputs]
             if t in on_core and view_source(g, t) == t and t not in parent and t not in inplace]

    def holder(t):
        while True:
            t = view_source(g, t)
            if t in parent:
                t = parent[t][0]
            elif t in inplace:
                t = inplace[t]
            else:
                return t

    for u in inplace:  # the shared storage's halo covers both tensors' readers
        r = holder(u)
        (h0, w0), (h1, w1) = halo.get(r, (0, 0)), halo.get(u, (0, 0))
        if (h1, w1) != (0, 0):
            halo[r] = (max(h0, h1), max(w0, w1))

    root = {t: holder(t) for n in g.nodes for t in list(n.inputs) + list(n.outputs) if t}
    return Storage(roots, halo, parent, root)


@dataclass
class Arena:
    """A memory plan's placement (:mod:`.passes.memory_budget`): ``offsets[t]``: root ``t``'s
    byte offset in the fast-memory arena (one region, tensors whose lifetimes do not overlap
    share bytes); ``far``: roots that live in far memory; ``size``: the arena's bytes;
    ``far_bytes``: the far bytes of roots stored compressed (their bound, which depends on
    how the kernels cut them; the rest take their dense size); ``local``: the arena is the
    core's local memory (from ``isa.LOCAL_BASE``) instead of a region of external memory."""

    offsets: dict[str, int]
    far: list[str]
    size: int
    far_bytes: dict[str, int] = field(default_factory=dict)
    local: bool = False

    def base(self, image: MemoryImage) -> int:
        """The arena's first address (after :func:`allocate` placed it in ``image``)."""
        return isa.LOCAL_BASE if self.local else image.regions["act:arena"].addr


def allocate(graph: Graph, image: MemoryImage, local_bytes: int = 0,
             arena: Arena | None = None) -> Graph:
    """Give every activation tensor the core reads or writes a :class:`TensorLayout`
    (``graph.meta["layouts"]``) and a region in ``image`` (tensors only the host touches
    stay in host memory).

    Without ``arena`` every tensor has a region of its own.  With one (a memory plan), the
    roots in ``arena.offsets`` (the graph's inputs and outputs among them) share one region
    ``act:arena`` at those offsets, and the roots in ``arena.far`` share the far-memory
    region ``act:far`` (region kind ``far``: slower, :class:`~snpu.verif.timing.FarMemory`).

    ``local_bytes`` > 0 (a tiled array): a tensor produced and consumed only inside one
    core subgraph lives in the cores' *local* memories instead (rows padded to 8 bytes so
    that row blocks move by remote writes).  Each core keeps its window of it (the rows its
    parts touch, :func:`.windows.windows`) from the same offset
    (``isa.LOCAL_BASE + offset``; the layout here is a window starting at the first halo
    row, :class:`.passes.codegen_mesh.LocalCopies` moves it per core).  Offsets are first
    fit over the tensors' lifetimes, in program order, while local memory has room;
    ``graph.meta["local"]`` lists the tensors, ``graph.meta["local_offsets"]`` their
    offsets.  Maps written by a channel-split layer stay in shared memory (a channel slice
    of a map is not contiguous), and so do concatenations whose slices split differently
    or are read before the last one is made.  The rest stays in shared external memory."""
    g = graph.copy()
    st = storage(g)
    halo, parent = st.halo, st.parent
    layouts: dict[str, TensorLayout] = {}
    local, peak = _local_tensors(g, st, local_bytes) if local_bytes else ({}, 0)
    for t, off in local.items():
        h, w, c = hwc(g.tensor(t).shape)
        ph, pw = halo.get(t, (0, 0))
        row = _local_row(g, t, halo)
        layouts[t] = TensorLayout(isa.LOCAL_BASE + off + ph * row + pw * c, h, w, c, c, row, ph, pw)
    g.meta["local"] = sorted(local)
    g.meta["local_offsets"] = dict(local)
    g.meta["local_peak_bytes"] = peak
    #: every tensor -> the tensor whose storage holds it (through views and concatenations)
    g.meta["storage_root"] = st.root
    base: dict[str, int] = {}
    if arena is not None:
        if arena.offsets and arena.local:
            base.update({t: isa.LOCAL_BASE + off for t, off in arena.offsets.items()})
        elif arena.offsets:
            region = image.alloc("act:arena", max(arena.size, 1), "scratch", "int8",
                                 (max(arena.size, 1),), align=64)
            base.update({t: region.addr + off for t, off in arena.offsets.items()})
        if arena.far:
            far = {}
            end = 0
            for t in arena.far:
                far[t] = end
                end += -(-arena.far_bytes.get(t, st.size(g, t)) // 64) * 64
            region = image.alloc("act:far", max(end, 1), "far", "int8", (max(end, 1),), align=4096)
            base.update({t: region.addr + off for t, off in far.items()})
    for t in st.roots:
        if t in local:
            continue
        h, w, c = hwc(g.tensor(t).shape)
        one, n = st.geometry(g, t)
        ph, pw = halo.get(t, (0, 0))
        row = (w + 2 * pw) * c
        if t in base:
            addr = base[t]
        else:
            kind = "input" if t in g.inputs else ("output" if t in g.outputs else "scratch")
            addr = image.alloc(f"act:{t}", max(n * one, 1), kind, "int8", (n * one,),
                               align=64).addr
        layouts[t] = TensorLayout(addr + ph * row + pw * c, h, w, c, c, row, ph, pw, n, one)
    for t in parent:
        r = st.root[t]
        off = 0
        u = t
        while u in parent:
            u, o = parent[u]
            off += o
        h, w, c = hwc(g.tensor(t).shape)
        L = layouts[r]
        layouts[t] = TensorLayout(L.base + off, h, w, c, L.pixel, L.row, L.pad_h, L.pad_w,
                                  L.n, L.image)
    on_core = set(st.root)
    for t in [o for n in g.nodes for o in n.outputs]:
        if t in on_core and t not in layouts and st.root.get(t, t) in layouts:
            src = view_source(g, t)
            # a view, or an output written in place over its input's storage
            layouts[t] = layouts[src] if src in layouts else layouts[st.root[t]]
    g.meta["layouts"] = layouts
    return g
