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
from dataclasses import asdict, dataclass

import numpy as np

from snpu.errors import CompileError
from snpu.verif.image import MemoryImage

from snpu.verif import isa

from .ir import Graph


def _local_size(g: Graph, t: str, halo: dict) -> int:
    h, w, c = hwc(g.tensor(t).shape)
    ph, pw = halo.get(t, (0, 0))
    return (h + 2 * ph) * (-(-((w + 2 * pw) * c) // 8) * 8)


def _local_tensors(g: Graph, storage: list[str], halo: dict, parent: dict,
                   local_bytes: int) -> dict[str, int]:
    """Tensors that go to local memory, with their offsets (see :func:`allocate`)."""
    seg = {n: k for k, sg in enumerate(g.meta.get("subgraphs", [])) for n in sg["nodes"]}
    prod = g.producers()
    users: dict[str, list] = {}
    for n in g.nodes:
        for i in n.inputs:
            if i and not g.tensor(i).is_const:
                users.setdefault(view_source(g, i), []).append(n)
    concat_roots = {r for r in (p for p, _ in parent.values())}
    candidates = []
    for t in storage:
        p = prod.get(t)
        if (p is None or p.device != "core" or t in g.outputs or t in concat_roots
                or not users.get(t) or batch_size(g.tensor(t).shape) != 1):
            continue
        h, w, _ = hwc(g.tensor(t).shape)
        if (p.meta.get("split") or {}).get("kind") == "channels" and h * w > 1:
            continue  # channel slices of a map are not contiguous: shared memory
        us = users[t]
        if any(u.device != "core" or seg.get(u.name) != seg.get(p.name) for u in us):
            continue
        if any(u.op in ("Flatten", "Reshape") and u.outputs[0] in g.outputs for u in us):
            continue
        candidates.append(t)
    out, off = {}, FLAG_BYTES
    for t in candidates:  # program order: early layers (usually the largest maps) first
        size = _local_size(g, t, halo)
        if off + size <= local_bytes:
            out[t] = off
            off += -(-size // 64) * 64
    return out


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


def allocate(graph: Graph, image: MemoryImage, local_bytes: int = 0) -> Graph:
    """Give every activation tensor the core reads or writes a :class:`TensorLayout`
    (``graph.meta["layouts"]``) and a region in ``image`` (tensors only the host touches
    stay in host memory).

    ``local_bytes`` > 0 (a tiled array): a tensor produced and consumed only inside one core
    subgraph, that is no slice of a concatenation, lives in the cores' *local* memories
    instead, at the same address in every core (``isa.LOCAL_BASE + offset``; rows padded to
    8 bytes so that row blocks move by remote writes), in program order while they have
    room; ``graph.meta["local"]`` lists them.  Maps written by a channel-split layer stay
    in shared memory (a channel slice of a map is not contiguous).  The rest stays in shared external memory."""
    g = graph.copy()
    prod = g.producers()
    halo: dict[str, tuple[int, int]] = {}
    for n in g.nodes:
        if n.op == "Conv" and n.device == "core":
            pads = n.meta["geometry"][4]
            ph, pw = max(pads[0], pads[2]), max(pads[1], pads[3])
            src = n.inputs[0]
            h0, w0 = halo.get(src, (0, 0))
            halo[src] = (max(h0, ph), max(w0, pw))
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

    def root(t):
        off = 0
        while t in parent:
            t, o = parent[t]
            off += o
        return t, off

    # the halo of a concatenation covers every slice's needs
    for t, (ph, pw) in list(halo.items()):
        r, _ = root(t)
        h0, w0 = halo.get(r, (0, 0))
        halo[r] = (max(h0, ph), max(w0, pw))
    layouts: dict[str, TensorLayout] = {}
    # a tensor only host subgraphs touch stays in host memory: no layout
    on_core = {t for n in g.nodes if n.device == "core"
               for t in list(n.inputs) + list(n.outputs) if t and not g.tensor(t).is_const}
    storage = [t for t in list(g.inputs) + [o for n in g.nodes for o in n.outputs]
               if t in on_core and view_source(g, t) == t and t not in parent]
    local = _local_tensors(g, storage, halo, parent, local_bytes) if local_bytes else {}
    for t, off in local.items():
        h, w, c = hwc(g.tensor(t).shape)
        ph, pw = halo.get(t, (0, 0))
        row = -(-((w + 2 * pw) * c) // 8) * 8
        layouts[t] = TensorLayout(isa.LOCAL_BASE + off + ph * row + pw * c, h, w, c, c, row, ph, pw)
    g.meta["local"] = sorted(local)

    def holder(t):
        while True:
            t = view_source(g, t)
            if t not in parent:
                return t
            t = parent[t][0]

    #: every tensor -> the tensor whose storage holds it (through views and concatenations)
    g.meta["storage_root"] = {t: holder(t) for n in g.nodes
                              for t in list(n.inputs) + list(n.outputs) if t}
    for t in storage:
        if t in local:
            continue
        h, w, c = hwc(g.tensor(t).shape)
        n = batch_size(g.tensor(t).shape)
        ph, pw = halo.get(t, (0, 0))
        row = (w + 2 * pw) * c
        one = (h + 2 * ph) * row
        size = n * one
        kind = "input" if t in g.inputs else ("output" if t in g.outputs else "scratch")
        region = image.alloc(f"act:{t}", max(size, 1), kind, "int8", (size,), align=64)
        layouts[t] = TensorLayout(region.addr + ph * row + pw * c, h, w, c, c, row, ph, pw,
                                  n, one)
    for t in parent:
        r, off = root(t)
        h, w, c = hwc(g.tensor(t).shape)
        L = layouts[r]
        layouts[t] = TensorLayout(L.base + off, h, w, c, L.pixel, L.row, L.pad_h, L.pad_w,
                                  L.n, L.image)
    for t in [o for n in g.nodes for o in n.outputs]:
        if t in on_core and t not in layouts:
            layouts[t] = layouts[view_source(g, t)]
    g.meta["layouts"] = layouts
    return g
