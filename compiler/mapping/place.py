"""Placement (seed 003 step 6): neuron groups onto the cores of a 2-D mesh.

Take a rectangle of cores anchored at (0, 0) holding at least as many usable cores as
there are groups, as square as the mesh allows; mark the surplus usable cores (the last in
row-major order) unusable.  Then recursively cut the rectangle at the middle of its longer
side and split the groups with the greedy graph-growing bisection (:mod:`.bisect`, on the
group graph, every group of size 1) so that each half gets exactly as many groups as it
has usable cores, until one group per core.
"""

from __future__ import annotations

import numpy as np

from .bisect import bisect
from .topology import Topology, TopologyError


def choose_rectangle(usable: np.ndarray, groups: int) -> tuple[int, int]:
    """(width, height) of the smallest near-square rectangle at (0, 0) with >= ``groups``
    usable cores.  ``usable`` is [height, width] of the whole mesh."""
    H, W = usable.shape
    if usable.sum() < groups:
        raise TopologyError(f"{groups} neuron groups do not fit {int(usable.sum())} usable cores "
                            f"of the {W}x{H} mesh")
    best = None
    cum = usable.cumsum(0).cumsum(1)
    for h in range(1, H + 1):
        for w in range(1, W + 1):
            if cum[h - 1, w - 1] >= groups:
                key = (w * h, abs(w - h))
                if best is None or key < best[0]:
                    best = (key, (w, h))
                break
    return best[1]


def place(quotient: Topology, usable: np.ndarray, tries: int, rng: np.random.Generator) -> np.ndarray:
    """(x, y) core of every group ([G, 2] int); ``usable`` [H, W] bool marks working cores."""
    G = quotient.n_vertices
    w, h = choose_rectangle(usable, G)
    mask = usable[:h, :w].copy()
    surplus = int(mask.sum()) - G
    if surplus:
        ys, xs = np.nonzero(mask)
        for y, x in list(zip(ys, xs))[::-1][:surplus]:
            mask[y, x] = False
    unit = Topology(quotient.indptr, quotient.indices, quotient.weights,
                    np.ones(G, np.int32), None, quotient.name)
    pos = np.zeros((G, 2), np.int64)
    local = np.full(G, -1, np.int64)
    stack = [(0, 0, w, h, np.arange(G))]
    while stack:
        x0, y0, ww, hh, groups = stack.pop()
        cores = mask[y0:y0 + hh, x0:x0 + ww]
        if groups.size == 0:
            continue
        if groups.size == 1:
            ys, xs = np.nonzero(cores)
            pos[groups[0]] = (x0 + xs[0], y0 + ys[0])
            continue
        if ww >= hh:
            cut = ww // 2
            a = (x0, y0, cut, hh)
            b = (x0 + cut, y0, ww - cut, hh)
        else:
            cut = hh // 2
            a = (x0, y0, ww, cut)
            b = (x0, y0 + cut, ww, hh - cut)
        na = int(mask[a[1]:a[1] + a[3], a[0]:a[0] + a[2]].sum())
        if na == 0 or na == groups.size:
            stack.append(b + (groups,) if na == 0 else a + (groups,))
            continue
        sel, _ = bisect(unit, groups, na, na, tries, rng, local)
        stack += [a + (groups[sel],), b + (groups[~sel],)]
    return pos
