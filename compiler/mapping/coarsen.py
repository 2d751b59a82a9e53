"""Coarsening (seed 003 step 2): random-order heavy-edge matching, best of several tries.

One level: visit the vertices in a random order; each unmarked vertex takes its heaviest
incident edge to an unmarked vertex whose merged size stays within ``max_size``
(capacity / 15) and marks the pair.  ``tries`` orders are matched; the matching that removes
the most edge weight (weight inside merged pairs) is contracted.  Levels repeat until one
reduces the vertex count by less than ``min_reduction`` (20 %).

``literal=True`` follows the document word for word instead: a vertex looks only at its
single heaviest edge and stays unmatched when that neighbour is taken or too big.  It
matches far fewer pairs (coarsening stops early); the default is the usual reading.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from .topology import Topology, TopologyError


@numba.njit(cache=True)
def match(indptr, indices, weights, sizes, max_size, order, literal):
    """mate[v] (v itself when unmatched) and the edge weight removed."""
    V = sizes.size
    mate = np.full(V, -1, np.int64)
    removed = 0
    for v in order:
        if mate[v] != -1:
            continue
        best, bw = -1, -1
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            w = weights[e]
            if literal:
                if w > bw:
                    best, bw = u, w
            elif mate[u] == -1 and sizes[u] + sizes[v] <= max_size and w > bw:
                best, bw = u, w
        if best >= 0 and mate[best] == -1 and sizes[best] + sizes[v] <= max_size:
            mate[v] = best
            mate[best] = v
            removed += bw
        else:
            mate[v] = v
    return mate, removed


@numba.njit(cache=True)
def _members(cmap, nc):
    """CSR of the fine vertices of each coarse vertex (counting sort)."""
    mptr = np.zeros(nc + 1, np.int64)
    for c in cmap:
        mptr[c + 1] += 1
    for c in range(nc):
        mptr[c + 1] += mptr[c]
    fill = mptr[:-1].copy()
    members = np.empty(cmap.size, np.int64)
    for v in range(cmap.size):
        members[fill[cmap[v]]] = v
        fill[cmap[v]] += 1
    return mptr, members


@numba.njit(cache=True)
def contract(indptr, indices, weights, sizes, cmap, nc):
    """The quotient graph of ``cmap`` (fine vertex -> coarse vertex 0..nc-1): parallel
    edges merge (weights add), edges inside a coarse vertex vanish, sizes add.

    Two passes (count, then fill) so the result is allocated at its exact size: on a
    1e8-connection graph an upper-bound allocation would double the peak memory.
    Returns ``ok = False`` if a merged weight or size overflows int32."""
    mptr, members = _members(cmap, nc)
    pos = np.full(nc, -1, np.int64)
    cptr = np.zeros(nc + 1, np.int64)
    for c in range(nc):  # pass 1: row lengths
        n = 0
        for m in range(mptr[c], mptr[c + 1]):
            v = members[m]
            for e in range(indptr[v], indptr[v + 1]):
                u = cmap[indices[e]]
                if u != c and pos[u] != c:
                    pos[u] = c
                    n += 1
        cptr[c + 1] = cptr[c] + n
    cidx = np.empty(cptr[nc], np.int32)
    cw = np.zeros(cptr[nc], np.int32)
    csz = np.zeros(nc, np.int32)
    slot = np.full(nc, -1, np.int64)
    ok = True
    for c in range(nc):  # pass 2: fill
        k = cptr[c]
        start = k
        size = 0
        for m in range(mptr[c], mptr[c + 1]):
            v = members[m]
            size += sizes[v]
            for e in range(indptr[v], indptr[v + 1]):
                u = cmap[indices[e]]
                if u == c:
                    continue
                if slot[u] >= start:
                    s = np.int64(cw[slot[u]]) + weights[e]
                    if s >= 2**31:
                        ok = False
                    cw[slot[u]] = s
                else:
                    slot[u] = k
                    cidx[k] = u
                    cw[k] = weights[e]
                    k += 1
        if size >= 2**31:
            ok = False
        csz[c] = size
    return cptr, cidx, cw, csz, ok


def quotient(t: Topology, cmap: np.ndarray, nc: int, name: str | None = None) -> Topology:
    cptr, cidx, cw, csz, ok = contract(t.indptr, t.indices, t.weights, t.sizes,
                                       cmap.astype(np.int64), nc)
    if not ok:
        raise TopologyError(f"{t.name}: merged connection weights or sizes exceed 2**31 - 1")
    return Topology(cptr, cidx, cw, csz, None, name or t.name)


@dataclass
class Level:
    graph: Topology
    cmap: np.ndarray        #: finer vertex -> vertex of this level
    removed_weight: int


def coarsen_once(t: Topology, max_size: int, tries: int, rng: np.random.Generator,
                 literal: bool = False) -> Level:
    best = None
    for _ in range(tries):
        order = rng.permutation(t.n_vertices)
        mate, removed = match(t.indptr, t.indices, t.weights, t.sizes, max_size, order, literal)
        if best is None or removed > best[1]:
            best = (mate, removed)
    mate, removed = best
    v = np.arange(t.n_vertices)
    leader = np.minimum(v, mate)
    is_leader = leader == v
    cid = np.cumsum(is_leader) - 1
    cmap = cid[leader].astype(np.int32)
    nc = int(is_leader.sum())
    return Level(quotient(t, cmap, nc), cmap, int(removed))
