"""Which rows of a map each core of a tiled array touches.

:mod:`.passes.parallelize` gives every layer its parts (a block of output rows, of output
channels, ...); a part of a convolution or pooling reads its block's input rows plus the
window's halo.  :func:`input_rows` says which, and :func:`windows` gathers, per map kept
in local memory and per core, the rows that core's parts write or read: the only rows of
the map that core keeps (:func:`.memory.allocate`, :class:`.passes.codegen_mesh.LocalCopies`).
"""

from __future__ import annotations

from .ir import Graph, Node
from .ops import pool_geometry

Coord = tuple[int, int]
#: core nodes that only describe a layout (no kernel, no parts)
VIEW_OPS = ("Concat", "Flatten", "Reshape")
#: splits whose parts write channel slices of a map (not contiguous): such a map lives in
#: shared memory (:mod:`.memory`), and the cost model knows its readers load it from there
SHARED_OUTPUT_SPLITS = ("channels", "tiles")


def _rows(g: Graph, t: str) -> int:
    shape = g.tensor(t).shape
    return shape[2] if len(shape) == 4 else 1


def input_rows(g: Graph, n: Node, part: "Part", index: int = 0,
               halo: int = 0) -> tuple[int, int]:
    """The rows of input ``index`` that ``part`` of ``n`` reads, clipped to the tensor and
    the ``halo`` rows of zeros above and below it (a convolution reads those)."""
    if part.kind != "rows":
        rows = _rows(g, n.inputs[index])
        return -halo, rows + halo
    return rows_read(g, n, part.lo, part.hi, index, halo)


def rows_read(g: Graph, n: Node, lo: int, hi: int, index: int = 0,
              halo: int = 0) -> tuple[int, int]:
    """The rows of input ``index`` that output rows ``[lo, hi)`` of ``n`` read (a
    convolution's or pooling's window; an element-wise layer's same rows), clipped to the
    tensor and the ``halo`` rows of zeros above and below it."""
    shape = g.tensor(n.inputs[index]).shape
    rows = shape[2] if len(shape) == 4 else 1
    if n.op == "Conv":
        kh, _, sh, _, pads, *_ = n.meta["geometry"]
    elif n.op in ("MaxPool", "AveragePool"):
        kh, _, sh, _, pads, _, _ = pool_geometry(n, shape)
    else:
        return lo, hi
    a = lo * sh - pads[0]
    b = (hi - 1) * sh - pads[0] + kh
    return max(-halo, a), min(rows + halo, b)


def windows(g: Graph, root: dict[str, str], halo: dict[str, tuple[int, int]],
            roots: set[str]) -> dict[str, dict[Coord, tuple[int, int]]]:
    """For each storage root in ``roots`` (tensors in the cores' local memories): per core,
    the rows ``[a, b)`` of it that core's parts write or read, halo rows included (row
    ``-pad_h`` is the first row of zeros).  A core keeps only these rows of a local tensor
    (its *window*; :func:`.memory.allocate`); a part that is not a row block touches every
    row."""
    out: dict[str, dict[Coord, tuple[int, int]]] = {r: {} for r in roots}

    def touch(r: str, core: Coord, a: int, b: int) -> None:
        old = out[r].get(core)
        out[r][core] = (a, b) if old is None else (min(old[0], a), max(old[1], b))

    for n in g.nodes:
        if n.device != "core" or n.op in VIEW_OPS or "parts" not in n.meta:
            continue
        r = root.get(n.outputs[0])
        if r in out:
            ph = halo.get(r, (0, 0))[0]
            for p in n.meta["parts"]:
                a, b = (p.lo, p.hi) if p.kind == "rows" else (-ph, _rows(g, r) + ph)
                touch(r, p.core, a, b)
        for idx, t in enumerate(n.inputs):
            r = root.get(t) if t else None
            if r not in out:
                continue
            ph = halo.get(r, (0, 0))[0]
            for p in n.meta["parts"]:
                touch(r, p.core, *(input_rows(g, n, p, idx, ph) if p.kind == "rows"
                                   else (-ph, _rows(g, r) + ph)))
    return out
