"""Topology generators: realistic shapes of neural networks at any scale (seeded).

* :func:`layered` — layers of ``side x side`` neurons, each connected to a
  ``(2r+1) x (2r+1)`` window of the next layer (a stack of convolutions);
* :func:`dense` — fully connected layers;
* :func:`small_world` — Watts-Strogatz: a ring where every vertex links its ``k`` nearest
  neighbours, each link rewired to a random vertex with probability ``p``.

Weights are 1 unless ``max_weight`` > 1 (then uniform 1..max_weight, seeded).
"""

from __future__ import annotations

import numpy as np

from .topology import Topology, from_edges


def _weights(rng, n, max_weight):
    return np.ones(n, np.int64) if max_weight <= 1 else rng.integers(1, max_weight + 1, n)


def layered_edges(layers: int, side: int, radius: int = 1):
    """(src, dst) of the layered locally connected graph."""
    n = side * side
    idx = np.arange(n).reshape(side, side)
    src, dst = [], []
    for dy in range(-radius, radius + 1):
        for dx in range(-radius, radius + 1):
            ys = slice(max(0, -dy), side - max(0, dy))
            xs = slice(max(0, -dx), side - max(0, dx))
            a = idx[ys, xs].reshape(-1)
            b = idx[max(0, dy):side + min(0, dy), max(0, dx):side + min(0, dx)].reshape(-1)
            src.append(a)
            dst.append(b)
    s1, d1 = np.concatenate(src), np.concatenate(dst)
    S = np.concatenate([s1 + k * n for k in range(layers - 1)]) if layers > 1 else np.zeros(0, np.int64)
    D = np.concatenate([d1 + (k + 1) * n for k in range(layers - 1)]) if layers > 1 else np.zeros(0, np.int64)
    return S, D


def write_layered(path, layers: int, side: int, radius: int = 1, *, group_size: int = 1 << 15,
                  progress=None) -> dict:
    """Write the layered graph (weights 1) straight to a store, one vertex group at a time,
    never holding the whole graph: the way to make 1e8-connection topologies."""
    from . import store

    n = side * side
    V = layers * n
    offs = [(dy, dx) for dy in range(-radius, radius + 1) for dx in range(-radius, radius + 1)]
    # connections: every neuron of layers 0..L-2 to the valid window positions of the next
    per_layer = sum((side - abs(dy)) * (side - abs(dx)) for dy, dx in offs)
    E = per_layer * (layers - 1)

    def groups():
        for v0 in range(0, V, group_size):
            v = np.arange(v0, min(V, v0 + group_size), dtype=np.int64)
            layer, rem = v // n, v % n
            y, x = rem // side, rem % side
            cand, flag = [], []
            for dl, f in ((-1, 2), (1, 1)):  # previous layer first: rows come out sorted
                for dy, dx in offs:
                    yy, xx, ll = y + dy, x + dx, layer + dl
                    ok = (yy >= 0) & (yy < side) & (xx >= 0) & (xx < side) & (ll >= 0) & (ll < layers)
                    cand.append(np.where(ok, ll * n + yy * side + xx, -1))
                    flag.append(f)
            c = np.stack(cand, axis=1)
            fl = np.broadcast_to(np.array(flag, np.uint8), c.shape)
            valid = c >= 0
            deg = valid.sum(axis=1)
            others = c[valid]
            yield store.rows_values(np.ones(v.size, np.int64), deg, fl[valid], others,
                                    np.ones(others.size, np.int64), np.ones(others.size, np.int64))

    name = f"layered_{layers}x{side}x{side}_r{radius}"
    store.write_groups(path, name=name, vertices=V, connections=E, group_size=group_size,
                       groups=groups(), progress=progress)
    return {"name": name, "vertices": V, "connections": E}


def layered(layers: int, side: int, radius: int = 1, *, max_weight: int = 1, seed: int = 0) -> Topology:
    rng = np.random.default_rng(seed)
    s, d = layered_edges(layers, side, radius)
    return from_edges(layers * side * side, s, d, _weights(rng, s.size, max_weight),
                      name=f"layered_{layers}x{side}x{side}_r{radius}")


def dense(sizes: list[int], *, max_weight: int = 1, seed: int = 0) -> Topology:
    rng = np.random.default_rng(seed)
    offs = np.concatenate([[0], np.cumsum(sizes)])
    src, dst = [], []
    for k in range(len(sizes) - 1):
        a = np.arange(offs[k], offs[k + 1])
        b = np.arange(offs[k + 1], offs[k + 2])
        src.append(np.repeat(a, b.size))
        dst.append(np.tile(b, a.size))
    s = np.concatenate(src) if src else np.zeros(0, np.int64)
    d = np.concatenate(dst) if dst else np.zeros(0, np.int64)
    return from_edges(int(offs[-1]), s, d, _weights(rng, s.size, max_weight),
                      name="dense_" + "-".join(map(str, sizes)))


def small_world(n: int, k: int = 8, p: float = 0.1, *, max_weight: int = 1, seed: int = 0) -> Topology:
    rng = np.random.default_rng(seed)
    src = np.repeat(np.arange(n), k // 2)
    dst = (src + np.tile(np.arange(1, k // 2 + 1), n)) % n
    rewire = rng.random(src.size) < p
    dst[rewire] = rng.integers(0, n, int(rewire.sum()))
    return from_edges(n, src, dst, _weights(rng, src.size, max_weight),
                      name=f"small_world_{n}_k{k}_p{p}")
