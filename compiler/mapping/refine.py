"""Capacity-aware k-way refinement (seed 003 step 4).

For a vertex ``v`` in part ``i`` with edge weight ``w_k`` into each part ``k``, moving it to
``k`` costs ``c_ik = w_i - w_k`` (the change of the edge cut).  Vertices are visited in a
random order; a vertex moves to its cheapest part with negative cost whose load stays
within ``capacity``, else to the next cheapest negative one.  Passes repeat until one moves
nothing (or ``max_passes``).  Every move lowers the cut, so refinement never increases it.
"""

from __future__ import annotations

import numba
import numpy as np


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
            nt = 0
            for e in range(indptr[v], indptr[v + 1]):
                p = part[indices[e]]
                if acc[p] == 0:
                    touched[nt] = p
                    nt += 1
                acc[p] += weights[e]
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
                if c >= 0:
                    break
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
