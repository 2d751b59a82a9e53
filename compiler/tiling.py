"""Row tiles of a layer's weights: which output rows one load of the weight banks holds.

A tile's rows must fit half of every lane's weight and index banks: the kernels ping-pong
the halves, so tile ``k + 1`` loads into one half while tile ``k`` computes from the other.
Within that limit the tile size decides how well loads and compute overlap.  With ``L_k``
the cycles of step ``k``'s loads and ``C_k`` those of its ``fc``, the layer takes about::

    L_1 + sum_k max(L_{k+1}, C_k) + C_n

(a step is one tile and one input chunk).  The largest tile that fits is one step for a
sparse layer: load everything, then compute everything, nothing hidden.  Many small tiles
hide the smaller of load and compute behind the larger, but every step pays fixed cycles
(the fc pipeline, the load's latency, the tile's parameter load).

:func:`row_tiles` returns the largest tiles that fit (``pipeline=None``: what a
convolution wants, whose every tile re-reads the whole input) or the tiling whose
estimated time (:func:`pipelined_cycles`, the golden model's timing from
:mod:`snpu.verif.timing`) is the smallest.  Tiles are multiples of ``lanes`` rows and,
but for the last, all the same size, so the re-roller can still turn them into a loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from snpu.errors import CompileError
from snpu.verif import layout as lanes_layout
from snpu.verif import timing

#: a tiling within this fraction of the fastest one wins if it has fewer tiles (fewer
#: instructions and parameter loads for what the estimate cannot tell apart)
NEAR = 0.01
#: the most tiles :func:`row_tiles` considers for one layer
MOST_TILES = 128


def _r(x: int, m: int) -> int:
    return -(-x // m) * m


def row_bytes(w: np.ndarray, fmt: str, col_chunks: list[tuple[int, int]]) -> np.ndarray:
    """Bank bytes of every weight row: ``[chunk, 0 (values) / 1 (index), row]`` for the
    columns of each chunk in index format ``fmt`` (``verif/layout.py``'s encoding)."""
    rows = w.shape[0]
    out = np.zeros((len(col_chunks), 2, rows), np.int64)
    for j, (c0, c1) in enumerate(col_chunks):
        sub = w[:, c0:c1]
        n = c1 - c0
        if fmt == "dense":
            out[j, 0] = n
        elif fmt == "direct":
            out[j, 0], out[j, 1] = np.count_nonzero(sub, axis=1), -(-n // 64) * 8
        else:
            out[j, 0] = np.count_nonzero(sub, axis=1)
            out[j, 1] = [2 + len(lanes_layout.ix.stride_entries(
                lanes_layout.ix.direct_to_stride(sub[r] != 0))) for r in range(rows)]
    return out


class LaneBytes:
    """Each lane's bank bytes for any tile ``[r0, r1)`` with ``r0`` a multiple of the lanes
    (row ``r`` goes to lane ``r % lanes``), from per-lane prefix sums."""

    def __init__(self, per_row: np.ndarray, lanes: int):
        chunks, kinds, rows = per_row.shape
        groups = -(-rows // lanes)
        padded = np.zeros((chunks, kinds, groups * lanes), np.int64)
        padded[..., :rows] = per_row
        by_lane = padded.reshape(chunks, kinds, groups, lanes)
        self.prefix = np.concatenate([np.zeros((chunks, kinds, 1, lanes), np.int64),
                                      np.cumsum(by_lane, axis=2)], axis=2)
        self.lanes = lanes

    def bytes(self, r0: int, r1: int) -> np.ndarray:
        """``[chunk, kind, lane]`` bytes of rows ``[r0, r1)``."""
        P = self.lanes
        return self.prefix[:, :, -(-r1 // P)] - self.prefix[:, :, r0 // P]


def _greedy(banks: LaneBytes, rows: int, limits: tuple[int, int], cap: int, where: str,
            first: int | None = None) -> list[tuple[int, int]]:
    """Tiles of at most ``cap`` rows (the first one at most ``first``), each as large as
    fits (a multiple of the lanes)."""
    P = banks.lanes
    tiles, r0 = [], 0
    half = np.array(limits)[None, :, None]
    while r0 < rows:
        size = min(_r(rows - r0, P), cap if tiles or first is None else first)
        while size > P and (banks.bytes(r0, min(rows, r0 + size)) > half).any():
            size -= P
        if (banks.bytes(r0, min(rows, r0 + size)) > half).any():
            raise CompileError(f"{where}: {P} weight rows do not fit the weight banks; split "
                               "the input dimension further")
        tiles.append((r0, min(rows, r0 + size)))
        r0 += size
    return tiles


def fc_row_cycles(w: np.ndarray, fmt: str, col_chunks: list[tuple[int, int]], density: float,
                  chunk_bits: int, merge: bool = False) -> np.ndarray:
    """Expected fc cycles of every weight row for one input vector, ``[chunk, row]``: the
    kept weights of each chunk's columns (all of them in the dense format) at the input's
    ``density`` (:func:`timing.fc_row_cycles_estimate`; ``merge``: the stride-merge path)."""
    out = np.zeros((len(col_chunks), w.shape[0]))
    for j, (c0, c1) in enumerate(col_chunks):
        kept = np.full(w.shape[0], c1 - c0) if fmt == "dense" else \
            np.count_nonzero(w[:, c0:c1], axis=1)
        out[j] = timing.fc_row_cycles_estimate(c1 - c0, kept, density, chunk_bits, merge,
                                               expand=fmt == "stride")
    return out


@dataclass
class Pipeline:
    """What the layer's steps cost besides the weight bytes (:func:`pipelined_cycles`)."""

    #: fc cycles of every weight row for all its input vectors, ``[chunk, row]``
    compute: np.ndarray
    #: the bus width in bytes
    axi_bytes: int
    #: requantisation parameter bytes per output row, loaded with the tile's first chunk
    param_bytes: float = 0.0
    #: LD cycles of each chunk's step besides its weights (its input vector's load, when
    #: the input does not stay in the neuron buffer)
    extra_load: list[int] = field(default_factory=list)
    #: the most rows of a tile when there are several (their parameters alternate between
    #: two halves of the layer's parameter rows, so that one tile's load need not wait for
    #: the previous tile's requantisation); ``None``: as many as fit
    split_rows: int | None = None


def pipelined_cycles(tiles: list[tuple[int, int]], banks: LaneBytes, pipeline: Pipeline) -> int:
    """Estimated cycles of the layer's loads and fcs in ``tiles``, double-buffered: a step's
    load starts when the previous load is done and the fc two steps back has freed its
    half; its fc starts when its load and the previous fc are done."""
    P = banks.lanes
    chunks = pipeline.compute.shape[0]
    lane_of = np.arange(pipeline.compute.shape[1]) % P
    loaded, computed = 0, [0, 0]
    for r0, r1 in tiles:
        stripes = banks.bytes(r0, r1).max(axis=2)  # [chunk, kind]: the striped load's planes
        work = np.zeros((chunks, P))
        np.add.at(work, (slice(None), lane_of[r0:r1]), pipeline.compute[:, r0:r1])
        for j in range(chunks):
            load = sum(timing.ld_cycles(np.arange(P) * _r(s, 8), _r(s, 8), pipeline.axi_bytes)
                       for s in stripes[j] if s)
            if j == 0 and pipeline.param_bytes:
                load += timing.ld_cycles(np.zeros(1, np.int64),
                                         _r(int(np.ceil((r1 - r0) * pipeline.param_bytes)), 8),
                                         pipeline.axi_bytes)
            if pipeline.extra_load:
                load += pipeline.extra_load[j]
            loaded = max(loaded, computed[0]) + load
            fc = timing.FC_PIPELINE + int(np.ceil(work[j].max()))
            computed = [computed[1], max(loaded, computed[1]) + fc]
    return computed[1]


def row_tiles(per_row: np.ndarray, lanes: int, limits: tuple[int, int], largest: int,
              pipeline: Pipeline | None = None, where: str = "layer") -> list[tuple[int, int]]:
    """Row tiles ``[(r0, r1), ...]`` of a layer whose rows take ``per_row`` bank bytes
    (:func:`row_bytes`), each tile's every chunk within ``limits`` = (value bytes, index
    bytes) of every lane and at most ``largest`` rows.  ``pipeline=None``: the largest
    tiles that fit; otherwise the tiling with the smallest :func:`pipelined_cycles`: one
    tile if the layer fits one, or tiles of at most ``pipeline.split_rows``.  Besides equal
    tiles it tries a smaller first tile (a half or a quarter of the others): the MX unit
    starts on it sooner while the larger tiles behind it load (the pipeline's ramp)."""
    rows = per_row.shape[2]
    banks = LaneBytes(per_row, lanes)
    fit = _greedy(banks, rows, limits, largest, where)
    if pipeline is None or rows <= lanes:
        return fit
    most = min(largest, pipeline.split_rows or largest)
    caps = {min(most, _r(-(-rows // n), lanes))
            for n in range(max(2, len(fit)), min(MOST_TILES, -(-rows // lanes)) + 1)}
    best = [(pipelined_cycles(fit, banks, pipeline), fit)] if len(fit) == 1 else []
    for cap in sorted(caps, reverse=True):
        for first in sorted({cap, _r(cap // 2, lanes), _r(cap // 4, lanes)} - {0},
                            reverse=True):
            tiles = _greedy(banks, rows, limits, cap, where, first)
            if len(tiles) <= MOST_TILES:
                best.append((pipelined_cycles(tiles, banks, pipeline), tiles))
    if not best:  # more tiles than MOST_TILES already: the largest that fit
        return fit
    fastest = min(c for c, _ in best)
    return min((t for c, t in best if c <= fastest * (1 + NEAR)), key=len)
