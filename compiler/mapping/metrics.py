"""Quality figures of a mapping: edge cut, core load, hop traffic, busiest mesh link."""

from __future__ import annotations

import numba
import numpy as np

from .force import hop_traffic
from .topology import Topology


@numba.njit(cache=True)
def link_loads(qptr, qidx, qw, pos, W, H):
    """Traffic on every mesh link under XY routing (x first, then y), both directions
    summed: horizontal [H, W-1] (link (x, y)-(x+1, y)) and vertical [H-1, W]."""
    hor = np.zeros((H, max(W - 1, 0)), np.int64)
    ver = np.zeros((max(H - 1, 0), W), np.int64)
    for u in range(qptr.size - 1):
        for e in range(qptr[u], qptr[u + 1]):
            v = qidx[e]
            if v <= u:
                continue
            x0, y0, x1, y1 = pos[u, 0], pos[u, 1], pos[v, 0], pos[v, 1]
            for x in range(min(x0, x1), max(x0, x1)):
                hor[y0, x] += qw[e]
            for y in range(min(y0, y1), max(y0, y1)):
                ver[y, x1] += qw[e]
    return hor, ver


def placement_metrics(quotient: Topology, pos: np.ndarray, mesh: tuple[int, int]) -> dict:
    """Weighted Manhattan hop traffic and the busiest link (XY routing) of a placement."""
    W, H = mesh
    qw = quotient.weights.astype(np.int64)
    hor, ver = link_loads(quotient.indptr, quotient.indices, qw, pos, W, H)
    return {"hop_traffic": int(hop_traffic(quotient.indptr, quotient.indices, qw, pos)),
            "busiest_link_load": max(int(hor.max(initial=0)), int(ver.max(initial=0)))}


def evaluate(t: Topology, quotient: Topology, group: np.ndarray, pos: np.ndarray,
             capacity: int, mesh: tuple[int, int]) -> dict:
    """All figures of a mapping.  The edge cut is the group graph's total weight: every
    connection between two groups is in it, merged, and no other."""
    load = np.bincount(group, weights=t.sizes, minlength=quotient.n_vertices)
    cut = quotient.total_weight
    return {
        "vertices": t.n_vertices, "connections": t.n_edges, "total_weight": t.total_weight,
        "groups": int(quotient.n_vertices),
        "edge_cut": cut, "edge_cut_fraction": round(cut / max(1, t.total_weight), 4),
        "max_core_load": int(load.max(initial=0)), "capacity": capacity,
        "max_load_over_capacity": round(float(load.max(initial=0)) / capacity, 4),
        **placement_metrics(quotient, pos, mesh),
    }


def row_major_positions(groups: int, W: int) -> np.ndarray:
    """The naive placement: group g at core (g mod W, g div W)."""
    g = np.arange(groups)
    return np.stack([g % W, g // W], axis=1)
