"""A neuron topology in memory: an undirected weighted graph in CSR form.

Vertices are neurons (or, after coarsening, groups of neurons) with an integer ``size``
(neurons they stand for); edges are connections with an integer ``weight`` (synapses or
traffic).  Every edge is stored in both endpoints' rows (``indices`` / ``weights``), so a
row lists all of a vertex's neighbours; there are no self loops and no repeated neighbours.
``flags`` (optional, one byte per stored entry) keeps the direction of the original
connections: bit 0 = this vertex sends, bit 1 = it receives; ``None`` means "both".

Indices and weights are int32 (half the memory of int64: a 1e8-connection graph is 1.6 GB).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from snpu.errors import SnpuError


class TopologyError(SnpuError):
    """A topology that is not a valid graph, or a store that cannot be read."""


@dataclass
class Topology:
    indptr: np.ndarray            #: int64 [V + 1]
    indices: np.ndarray           #: int32 [2E] neighbour of each entry
    weights: np.ndarray           #: int32 [2E] weight of each entry (same in both rows)
    sizes: np.ndarray             #: int32 [V] vertex sizes
    flags: np.ndarray | None = None  #: uint8 [2E] direction bits, or None (undirected)
    name: str = "topology"

    @property
    def n_vertices(self) -> int:
        return int(self.sizes.size)

    @property
    def n_edges(self) -> int:
        """Undirected connections (each stored twice)."""
        return int(self.indices.size // 2)

    @property
    def total_size(self) -> int:
        return int(self.sizes.sum())

    @property
    def total_weight(self) -> int:
        return int(self.weights.sum(dtype=np.int64) // 2)

    def degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    def check(self) -> None:
        """Raise :class:`TopologyError` unless the CSR arrays form a valid symmetric graph."""
        V = self.n_vertices
        if self.indptr.size != V + 1 or self.indptr[0] != 0 or self.indptr[-1] != self.indices.size:
            raise TopologyError(f"{self.name}: indptr does not match {V} vertices / {self.indices.size} entries")
        if self.weights.size != self.indices.size:
            raise TopologyError(f"{self.name}: {self.weights.size} weights for {self.indices.size} entries")
        if self.indices.size and (self.indices.min() < 0 or self.indices.max() >= V):
            raise TopologyError(f"{self.name}: neighbour index out of range 0..{V - 1}")
        if np.any(np.diff(self.indptr) < 0):
            raise TopologyError(f"{self.name}: indptr is not non-decreasing")
        if self.sizes.size and self.sizes.min() < 1:
            raise TopologyError(f"{self.name}: vertex {int(np.argmin(self.sizes))} has size < 1")
        if self.weights.size and self.weights.min() < 1:
            raise TopologyError(f"{self.name}: a connection has weight < 1")
        bad = _check_rows(self.indptr, self.indices, self.weights)
        if bad >= 0:
            raise TopologyError(f"{self.name}: vertex {bad} has a self loop, a repeated neighbour "
                                "or a connection missing / with another weight in the other row")


@numba.njit(cache=True)
def _check_rows(indptr, indices, weights):
    V = indptr.size - 1
    mark = np.full(V, -1, np.int64)
    for v in range(V):
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if u == v or mark[u] == v:
                return v
            mark[u] = v
            # the reverse entry must exist with the same weight
            found = False
            for f in range(indptr[u], indptr[u + 1]):
                if indices[f] == v:
                    found = weights[f] == weights[e]
                    break
            if not found:
                return v
    return -1


def from_edges(n_vertices: int, src: np.ndarray, dst: np.ndarray, weights: np.ndarray | None = None,
               sizes: np.ndarray | None = None, *, name: str = "topology", directed: bool = True) -> Topology:
    """Directed connections ``src -> dst`` (weight, default 1) -> a :class:`Topology`.

    Self loops are dropped, both directions of a pair merge into one undirected edge (weights
    add) and, with ``directed``, ``flags`` record who sends to whom."""
    src = np.asarray(src, np.int64)
    dst = np.asarray(dst, np.int64)
    w = np.ones(src.size, np.int64) if weights is None else np.asarray(weights, np.int64)
    if not (src.size == dst.size == w.size):
        raise TopologyError(f"{name}: src, dst and weights differ in length")
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n_vertices):
        raise TopologyError(f"{name}: a connection names a vertex outside 0..{n_vertices - 1}")
    if w.size and w.min() < 1:
        raise TopologyError(f"{name}: connection weights must be positive integers")
    keep = src != dst
    src, dst, w = src[keep], dst[keep], w[keep]
    # both directions: (row, col, weight, flag)
    rows = np.concatenate([src, dst])
    cols = np.concatenate([dst, src])
    ww = np.concatenate([w, w])
    fl = np.concatenate([np.ones(src.size, np.uint8), np.full(src.size, 2, np.uint8)])
    order = np.lexsort((cols, rows))
    rows, cols, ww, fl = rows[order], cols[order], ww[order], fl[order]
    first = np.ones(rows.size, bool)
    first[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
    starts = np.flatnonzero(first)
    wsum = np.add.reduceat(ww, starts) if starts.size else ww
    fsum = np.bitwise_or.reduceat(fl, starts) if starts.size else fl
    rows, cols = rows[starts], cols[starts]
    if wsum.size and wsum.max() >= 2**31:
        raise TopologyError(f"{name}: a merged connection weight exceeds 2**31 - 1")
    indptr = np.zeros(n_vertices + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n_vertices), out=indptr[1:])
    sz = np.ones(n_vertices, np.int32) if sizes is None else np.asarray(sizes, np.int32)
    if sz.size != n_vertices:
        raise TopologyError(f"{name}: {sz.size} sizes for {n_vertices} vertices")
    return Topology(indptr, cols.astype(np.int32), wsum.astype(np.int32), sz,
                    fsum.astype(np.uint8) if directed else None, name)
