"""Metrics of a mapping computed here from the graph and the assignment alone, with numpy,
never with the mapper's own bookkeeping (so a bug there cannot hide itself)."""

import numpy as np


def _edges(t):
    """Every undirected connection once: (u, v, weight) with u < v (CSR holds both ways)."""
    src = np.repeat(np.arange(t.n_vertices), np.diff(t.indptr))
    keep = src < t.indices
    return src[keep], t.indices[keep], t.weights[keep].astype(np.int64)


def cut(t, part) -> int:
    """Weight of the connections whose ends are in different parts."""
    u, v, w = _edges(t)
    part = np.asarray(part)
    return int(w[part[u] != part[v]].sum())


def hop_traffic(t, core) -> int:
    """Sum over connections of weight x Manhattan distance between the ends' cores."""
    u, v, w = _edges(t)
    core = np.asarray(core)
    return int((w * np.abs(core[u] - core[v]).sum(axis=1)).sum())
