"""Force-directed swap refinement of a placement (seed 003 step 7).

Every connection of weight ``w`` between groups ``u`` and ``v`` pulls ``u`` towards ``v``
with force ``w * (p_v - p_u)`` and ``v`` the opposite way.  Each round computes the net
forces, takes the ``top`` fraction (5 %) of groups by force magnitude and, for each, looks
for a swap partner among the cores up to ``reach`` steps in the force's direction
(occupied cores swap groups; free usable cores take the group).  A swap's cost is the
exact change of the weighted Manhattan hop traffic of both groups' connections; the
cheapest negative one is done.  Rounds repeat until none helps or ``max_rounds``.  Every
swap lowers the hop traffic, so refinement never increases it.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def net_forces(qptr, qidx, qw, pos):
    G = qptr.size - 1
    f = np.zeros((G, 2), np.float64)
    for u in range(G):
        for e in range(qptr[u], qptr[u + 1]):
            v = qidx[e]
            f[u, 0] += qw[e] * (pos[v, 0] - pos[u, 0])
            f[u, 1] += qw[e] * (pos[v, 1] - pos[u, 1])
    return f


@numba.njit(cache=True)
def hop_traffic(qptr, qidx, qw, pos):
    total = 0
    for u in range(qptr.size - 1):
        for e in range(qptr[u], qptr[u + 1]):
            v = qidx[e]
            if v > u:
                total += qw[e] * (abs(pos[u, 0] - pos[v, 0]) + abs(pos[u, 1] - pos[v, 1]))
    return total


@numba.njit(cache=True)
def _swap_delta(qptr, qidx, qw, pos, u, v, x, y):
    """Change of hop traffic when ``u`` moves to core (x, y) and its occupant ``v`` (-1: a
    free core) moves to u's core.  The u-v connection is counted once (in u's row)."""
    ux, uy = pos[u, 0], pos[u, 1]
    before = 0
    after = 0
    for e in range(qptr[u], qptr[u + 1]):
        t = qidx[e]
        before += qw[e] * (abs(ux - pos[t, 0]) + abs(uy - pos[t, 1]))
        if t == v:
            after += qw[e] * (abs(x - ux) + abs(y - uy))
        else:
            after += qw[e] * (abs(x - pos[t, 0]) + abs(y - pos[t, 1]))
    if v >= 0:
        for e in range(qptr[v], qptr[v + 1]):
            t = qidx[e]
            if t == u:
                continue
            before += qw[e] * (abs(x - pos[t, 0]) + abs(y - pos[t, 1]))
            after += qw[e] * (abs(ux - pos[t, 0]) + abs(uy - pos[t, 1]))
    return after - before


@numba.njit(cache=True)
def _round(qptr, qidx, qw, pos, occupant, usable, top, reach):
    G = qptr.size - 1
    f = net_forces(qptr, qidx, qw, pos)
    mag = np.abs(f[:, 0]) + np.abs(f[:, 1])
    order = np.argsort(-mag)
    k = max(1, int(np.ceil(top * G)))
    H, W = occupant.shape
    swaps = 0
    gain = 0
    for r in range(k):
        u = order[r]
        if mag[u] == 0:
            break
        sx = 0 if f[u, 0] == 0 else (1 if f[u, 0] > 0 else -1)
        sy = 0 if f[u, 1] == 0 else (1 if f[u, 1] > 0 else -1)
        best, bx, by, bv = 0, -1, -1, -1
        for a in range(reach + 1):
            for b in range(reach + 1):
                if a == 0 and b == 0:
                    continue
                if (a > 0 and sx == 0) or (b > 0 and sy == 0):
                    continue
                x = pos[u, 0] + sx * a
                y = pos[u, 1] + sy * b
                if x < 0 or y < 0 or x >= W or y >= H or not usable[y, x]:
                    continue
                v = occupant[y, x]
                d = _swap_delta(qptr, qidx, qw, pos, u, v, x, y)
                if d < best:
                    best, bx, by, bv = d, x, y, v
        if best < 0:
            ux, uy = pos[u, 0], pos[u, 1]
            if bv >= 0:
                pos[bv, 0], pos[bv, 1] = ux, uy
            occupant[uy, ux] = bv
            pos[u, 0], pos[u, 1] = bx, by
            occupant[by, bx] = u
            swaps += 1
            gain -= best
    return swaps, gain


def force_refine(quotient, pos: np.ndarray, usable: np.ndarray, *, top: float = 0.05,
                 reach: int = 2, max_rounds: int = 200) -> dict:
    """Refine ``pos`` in place; returns rounds, swaps and the hop traffic before / after."""
    H, W = usable.shape
    occupant = np.full((H, W), -1, np.int64)
    occupant[pos[:, 1], pos[:, 0]] = np.arange(pos.shape[0])
    qptr, qidx, qw = quotient.indptr, quotient.indices, quotient.weights.astype(np.int64)
    before = int(hop_traffic(qptr, qidx, qw, pos))
    rounds = swaps = 0
    for rounds in range(1, max_rounds + 1):
        s, _ = _round(qptr, qidx, qw, pos, occupant, usable, top, reach)
        swaps += s
        if s == 0:
            break
    return {"rounds": rounds, "swaps": swaps, "hop_traffic_before": before,
            "hop_traffic_after": int(hop_traffic(qptr, qidx, qw, pos))}
