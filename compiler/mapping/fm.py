"""Fiduccia-Mattheyses-style k-way refinement with hill climbing (seed 003 step 4, P6).

The greedy pass of :mod:`.refine` only takes moves that do not raise the cut, so it stops
in the first local minimum.  This pass climbs out of it, as FM does: it moves boundary
vertices one at a time, always the move of highest gain (cut reduction) anywhere in the
graph *even when that gain is negative*, locks each moved vertex for the rest of the pass,
updates its neighbours' gains, and remembers the best cut seen; after ``patience`` moves
without a new best it stops and rolls every move after the best point back.  Moves keep
every part within ``capacity``.  Passes repeat while one improves the cut.

The moves wait in a max-heap keyed on gain (lazy: an entry is checked against the vertex's
current version when it comes out), which plays the role of FM's gain buckets for
arbitrary integer edge weights.  Each vertex's best target is its neighbouring part of
largest gain with room.  The cut never ends higher than it started.
"""

from __future__ import annotations

import numba
import numpy as np

from .refine import _gather


@numba.njit(cache=True)
def _best(v, indptr, indices, weights, sizes, part, load, capacity, acc, touched):
    """(target part, gain) of ``v``'s best move with room, or (-1, 0)."""
    i = part[v]
    nt = _gather(v, indptr, indices, weights, part, acc, touched)
    wi = acc[i]
    best, gain = -1, 0
    for a in range(nt):
        k = touched[a]
        if k != i and load[k] + sizes[v] <= capacity:
            g = acc[k] - wi
            if best < 0 or g > gain:
                best, gain = k, g
    for a in range(nt):
        acc[touched[a]] = 0
    return best, gain


@numba.njit(cache=True)
def _push(hg, hv, hs, n, gain, v, stamp):
    if n == hg.size:
        hg2 = np.empty(2 * n, np.int64)
        hv2 = np.empty(2 * n, np.int64)
        hs2 = np.empty(2 * n, np.int64)
        hg2[:n] = hg
        hv2[:n] = hv
        hs2[:n] = hs
        hg, hv, hs = hg2, hv2, hs2
    j = n
    hg[j], hv[j], hs[j] = gain, v, stamp
    while j > 0:
        p = (j - 1) // 2
        if hg[p] >= hg[j]:
            break
        hg[p], hg[j] = hg[j], hg[p]
        hv[p], hv[j] = hv[j], hv[p]
        hs[p], hs[j] = hs[j], hs[p]
        j = p
    return hg, hv, hs, n + 1


@numba.njit(cache=True)
def _pop(hg, hv, hs, n):
    gain, v, stamp = hg[0], hv[0], hs[0]
    n -= 1
    hg[0], hv[0], hs[0] = hg[n], hv[n], hs[n]
    j = 0
    while True:
        a, b, m = 2 * j + 1, 2 * j + 2, j
        if a < n and hg[a] > hg[m]:
            m = a
        if b < n and hg[b] > hg[m]:
            m = b
        if m == j:
            break
        hg[m], hg[j] = hg[j], hg[m]
        hv[m], hv[j] = hv[j], hv[m]
        hs[m], hs[j] = hs[j], hs[m]
        j = m
    return gain, v, stamp, n


@numba.njit(cache=True)
def fm_pass(indptr, indices, weights, sizes, part, load, capacity, order, patience):
    """One pass, in place on ``part`` / ``load``; returns (cut reduction, moves kept)."""
    V = indptr.size - 1
    nparts = load.size
    acc = np.zeros(nparts, np.int64)
    touched = np.empty(nparts, np.int64)
    # memory per vertex: a 4-byte stamp and a lock byte; the heap and the move log grow on
    # demand (a pass touches the boundary only), so the finest level of a 1e8-connection
    # graph stays within the mapper's memory budget
    stamp = np.zeros(V, np.int32)
    locked = np.zeros(V, np.bool_)
    cap0 = 1 << 16
    hg = np.empty(cap0, np.int64)
    hv = np.empty(cap0, np.int64)
    hs = np.empty(cap0, np.int64)
    n = 0
    for v in order:
        boundary = False
        for e in range(indptr[v], indptr[v + 1]):
            if part[indices[e]] != part[v]:
                boundary = True
                break
        if boundary:
            k, g = _best(v, indptr, indices, weights, sizes, part, load, capacity, acc, touched)
            if k >= 0:
                hg, hv, hs, n = _push(hg, hv, hs, n, g, v, 0)
    moved_v = np.empty(cap0, np.int64)
    moved_from = np.empty(cap0, np.int64)
    nm = 0
    cum, best_cum, best_len, since = 0, 0, 0, 0
    while n > 0 and since < patience:
        g, v, s, n = _pop(hg, hv, hs, n)
        if locked[v] or s != stamp[v]:
            continue
        k, g2 = _best(v, indptr, indices, weights, sizes, part, load, capacity, acc, touched)
        if k < 0:
            continue
        if g2 < g:  # its gain fell since it was queued: queue it again at its real gain
            stamp[v] += 1
            hg, hv, hs, n = _push(hg, hv, hs, n, g2, v, stamp[v])
            continue
        i = part[v]
        part[v] = k
        load[k] += sizes[v]
        load[i] -= sizes[v]
        locked[v] = True
        if nm == moved_v.size:
            mv2 = np.empty(2 * nm, np.int64)
            mf2 = np.empty(2 * nm, np.int64)
            mv2[:nm] = moved_v
            mf2[:nm] = moved_from
            moved_v, moved_from = mv2, mf2
        moved_v[nm] = v
        moved_from[nm] = i
        nm += 1
        cum += g2
        if cum > best_cum:
            best_cum, best_len, since = cum, nm, 0
        else:
            since += 1
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if locked[u]:
                continue
            ku, gu = _best(u, indptr, indices, weights, sizes, part, load, capacity, acc, touched)
            stamp[u] += 1
            if ku >= 0:
                hg, hv, hs, n = _push(hg, hv, hs, n, gu, u, stamp[u])
    for j in range(nm - 1, best_len - 1, -1):  # roll back past the best point
        v, i = moved_v[j], moved_from[j]
        k = part[v]
        part[v] = i
        load[i] += sizes[v]
        load[k] -= sizes[v]
    return best_cum, best_len


def fm_refine(indptr, indices, weights, sizes, part, load, capacity, rng,
              max_passes: int = 4, patience: int = 2000) -> tuple[int, int]:
    """Passes of :func:`fm_pass` while they improve the cut; returns (cut reduction,
    moves kept)."""
    total = kept = 0
    for _ in range(max_passes):
        gain, moves = fm_pass(indptr, indices, weights, sizes, part, load, capacity,
                              rng.permutation(indptr.size - 1), patience)
        total += int(gain)
        kept += int(moves)
        if gain <= 0:
            break
    return total, kept
