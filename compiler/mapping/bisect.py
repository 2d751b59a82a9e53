"""Greedy graph-growing bisection (seed 003 step 3) and the recursive partitioning built on it.

:func:`grow` selects part of a vertex set: start from a random vertex; a vertex's selection
cost is (edge weight to unselected vertices) - (edge weight to selected ones); repeatedly
move the cheapest vertex of the selection's frontier in (a min-priority queue holding only
neighbours of the selection, costs updated as neighbours join) until the selected size
reaches the target.  :func:`bisect` runs ``tries`` growths from different
random starts and keeps the one with the smallest cut.  :func:`recursive_partition` splits
until every part fits ``capacity``; each split divides the cores a set needs,
``ceil(size / capacity)``, as evenly as possible and sizes the halves in proportion.
"""

from __future__ import annotations

import heapq

import numba
import numpy as np

from .topology import Topology


@numba.njit(cache=True)
def grow(indptr, indices, weights, sizes, verts, local, start, target, limit):
    """Grow a selection of ``verts`` (``local[v]`` = position in ``verts`` or -1) from
    ``verts[start]`` along its frontier until its size reaches ``target``, never above
    ``limit``.  Returns (selected mask, cut weight).

    Only vertices adjacent to the selection are candidates (the frontier, in a min-priority
    queue keyed by selection cost = weight to unselected - weight to selected); a vertex
    enters the queue when its first neighbour is selected.  When the frontier empties
    before the target (the rest is not connected to the selection) growth restarts from the
    next unselected vertex after ``start`` in ``verts`` order."""
    n = verts.size
    sel = np.zeros(n, np.bool_)
    queued = np.zeros(n, np.bool_)
    cost = np.zeros(n, np.int64)
    for i in range(n):
        v = verts[i]
        for e in range(indptr[v], indptr[v + 1]):
            if local[indices[e]] >= 0:
                cost[i] += weights[e]
    heap = [(cost[start], start)]
    queued[start] = True
    size = 0
    scan = start  # where to restart when the frontier runs dry
    while size < target:
        if not heap:
            nxt = -1
            for k in range(n):
                c = (scan + k) % n
                if not sel[c] and not queued[c]:
                    nxt = c
                    break
            if nxt < 0:
                break
            scan = nxt
            queued[nxt] = True
            heap.append((cost[nxt], nxt))
        c, i = heapq.heappop(heap)
        if sel[i] or c != cost[i]:
            continue  # stale entry
        if size + sizes[verts[i]] > limit:
            continue  # would overfill this side: leave it to the other
        sel[i] = True
        size += sizes[verts[i]]
        v = verts[i]
        for e in range(indptr[v], indptr[v + 1]):
            j = local[indices[e]]
            if j >= 0 and not sel[j]:
                cost[j] -= 2 * weights[e]
                queued[j] = True
                heapq.heappush(heap, (cost[j], j))
    cut = 0
    for i in range(n):
        if sel[i]:
            v = verts[i]
            for e in range(indptr[v], indptr[v + 1]):
                j = local[indices[e]]
                if j >= 0 and not sel[j]:
                    cut += weights[e]
    return sel, cut


def growths(t: Topology, verts: np.ndarray, target: int, limit: int, tries: int,
            rng: np.random.Generator, local: np.ndarray) -> list[tuple[int, np.ndarray, int]]:
    """``tries`` growths from distinct random starts: [(start, selected mask, cut)]."""
    local[verts] = np.arange(verts.size)
    out = []
    for start in rng.choice(verts.size, size=min(tries, verts.size), replace=False):
        sel, cut = grow(t.indptr, t.indices, t.weights, t.sizes, verts, local, int(start),
                        target, limit)
        out.append((int(start), sel, int(cut)))
    local[verts] = -1
    return out


def bisect(t: Topology, verts: np.ndarray, target: int, limit: int, tries: int,
           rng: np.random.Generator, local: np.ndarray) -> tuple[np.ndarray, int]:
    """Best of ``tries`` growths (seed 003 step 3): (selected mask over ``verts``, cut)."""
    _, sel, cut = min(growths(t, verts, target, limit, tries, rng, local), key=lambda r: r[2])
    return sel, cut


def recursive_partition(t: Topology, capacity: int, tries: int, rng: np.random.Generator,
                        parts: int | None = None, *, strict: bool = True) -> np.ndarray:
    """Part index of every vertex, about ``parts`` parts (default ``ceil(size / capacity)``),
    every part's size at most ``capacity`` (given that no single vertex is bigger).

    Each split divides the set's cores ``n`` into ``n // 2`` and the rest and sizes the
    halves in proportion; a side never gets more than its cores hold.  When a side still
    overflows (vertices too coarse to pack its cores exactly) it gets extra cores with
    ``strict`` (the result can have more than ``parts`` parts), or, without, keeps exactly
    ``parts`` parts and may leave one a little over capacity for :func:`.refine.rebalance`
    to fix at a finer level."""
    if t.sizes.max(initial=0) > capacity:
        raise ValueError(f"a vertex of size {int(t.sizes.max())} exceeds the capacity {capacity}")
    total = int(t.sizes.sum(dtype=np.int64))
    part = np.zeros(t.n_vertices, np.int64)
    local = np.full(t.n_vertices, -1, np.int64)
    stack = [(np.arange(t.n_vertices), max(parts or 0, -(-total // capacity), 1))]
    nparts = 0
    while stack:
        verts, cores = stack.pop()
        size = int(t.sizes[verts].sum(dtype=np.int64))
        if strict:
            cores = max(cores, -(-size // capacity))  # overflow: more cores
        if cores == 1 or verts.size == 1:
            part[verts] = nparts
            nparts += 1
            continue
        left = cores // 2
        target = max(size * left // cores, size - (cores - left) * capacity)
        sel, _ = bisect(t, verts, target, left * capacity, tries, rng, local)
        a, b = verts[sel], verts[~sel]
        if a.size == 0 or b.size == 0:  # cannot split (e.g. all weight in one vertex)
            a, b = verts[: verts.size // 2], verts[verts.size // 2:]
        stack += [(b, cores - left), (a, left)]
    return part
