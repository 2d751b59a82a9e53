"""Capacity-aware k-way refinement (seed 003 step 4).

For a vertex ``v`` in part ``i`` with edge weight ``w_k`` into each part ``k``, moving it to
``k`` costs ``c_ik = w_i - w_k`` (the change of the edge cut).  Vertices are visited in a
random order; a vertex moves to its cheapest part with negative cost whose load stays
within ``capacity``, else to the next cheapest negative one.  A zero-cost move is taken
when it makes the loads more even (it frees room for later moves without touching the
cut).  Passes repeat until one moves nothing (or ``max_passes``).  No move raises the cut,
so refinement never increases it.

:func:`rebalance` is the one step that may raise the cut: it empties overfull parts (the
initial partition of coarse vertices cannot always pack cores exactly) by moving their
vertices to the cheapest neighbouring part with room, or to the emptiest part.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def _gather(v, indptr, indices, weights, part, acc, touched):
    """Edge weight of ``v`` into each neighbouring part: ``acc[p]`` for the ``touched[:n]``
    parts (``acc`` must be zero on entry; the caller clears it after use).  Returns ``n``."""
    nt = 0
    for e in range(indptr[v], indptr[v + 1]):
        p = part[indices[e]]
        if acc[p] == 0:
            touched[nt] = p
            nt += 1
        acc[p] += weights[e]
    return nt


@numba.njit(cache=True)
def _count_over(load, capacity):
    over = 0
    for p in range(load.size):
        if load[p] > capacity:
            over += 1
    return over


@numba.njit(cache=True)
def refine(indptr, indices, weights, sizes, part, load, capacity, order, max_passes):
    """In place on ``part`` / ``load``; returns (moves, cut reduction)."""
    nparts = load.size
    acc = np.zeros(nparts, np.int64)
    touched = np.empty(nparts, np.int64)
    moves = 0
    gain_total = 0
    for _ in range(max_passes):
        moved = 0
        for v in order:
            i = part[v]
            nt = _gather(v, indptr, indices, weights, part, acc, touched)
            wi = acc[i]
            # candidate parts with negative cost, cheapest first (nt is small: sort in place)
            for a in range(nt):
                for b in range(a + 1, nt):
                    if acc[touched[b]] > acc[touched[a]]:
                        tmp = touched[a]
                        touched[a] = touched[b]
                        touched[b] = tmp
            for a in range(nt):
                k = touched[a]
                if k == i:
                    continue
                c = wi - acc[k]
                if c > 0:
                    break
                if c == 0 and load[k] + sizes[v] >= load[i]:
                    continue  # zero gain: only if it evens the loads
                if load[k] + sizes[v] <= capacity:
                    part[v] = k
                    load[k] += sizes[v]
                    load[i] -= sizes[v]
                    moved += 1
                    gain_total -= c
                    break
            for a in range(nt):
                acc[touched[a]] = 0
        moves += moved
        if moved == 0:
            break
    return moves, gain_total


@numba.njit(cache=True)
def edge_cut(indptr, indices, weights, part):
    cut = 0
    for v in range(indptr.size - 1):
        for e in range(indptr[v], indptr[v + 1]):
            if part[indices[e]] != part[v]:
                cut += weights[e]
    return cut // 2


@numba.njit(cache=True)
def rebalance(indptr, indices, weights, sizes, part, load, capacity, order):
    """Move vertices out of parts above ``capacity`` (cheapest cut increase first among the
    neighbouring parts with room, else the emptiest part).  In place; returns the number of
    parts still over capacity (0 unless a single vertex cannot move anywhere)."""
    nparts = load.size
    acc = np.zeros(nparts, np.int64)
    touched = np.empty(nparts, np.int64)
    for _ in range(4):
        if _count_over(load, capacity) == 0:
            return 0
        for v in order:
            i = part[v]
            if load[i] <= capacity:
                continue
            nt = _gather(v, indptr, indices, weights, part, acc, touched)
            best, bc = -1, 0
            for a in range(nt):
                k = touched[a]
                if k != i and load[k] + sizes[v] <= capacity:
                    c = acc[i] - acc[k]
                    if best < 0 or c < bc:
                        best, bc = k, c
            for a in range(nt):
                acc[touched[a]] = 0
            if best < 0:
                best = np.argmin(load)
                if load[best] + sizes[v] > capacity:
                    continue
            part[v] = best
            load[best] += sizes[v]
            load[i] -= sizes[v]
    return _count_over(load, capacity)
