"""Coarsening, bisection, refinement, placement and force refinement: their invariants, and
small graphs whose optimal partitions are known."""

import itertools

import numpy as np
import pytest

from snpu.compiler.mapping.bisect import bisect, grow, growths, recursive_partition
from snpu.compiler.mapping.coarsen import coarsen_once, quotient
from snpu.compiler.mapping.force import _swap_delta, force_refine, hop_traffic
from snpu.compiler.mapping.generate import dense, layered, small_world
from snpu.compiler.mapping.place import choose_rectangle, place
from snpu.compiler.mapping.fm import fm_pass, fm_refine
from snpu.compiler.mapping.refine import refine
from snpu.compiler.mapping.topology import from_edges

from . import independent

SEEDS = range(3)


def cliques(k: int, size: int, bridge_weight: int = 1):
    """``k`` cliques of ``size`` vertices (weight 10) joined in a ring by single light edges."""
    src, dst, w = [], [], []
    for c in range(k):
        for a, b in itertools.combinations(range(size), 2):
            src.append(c * size + a)
            dst.append(c * size + b)
            w.append(10)
        src.append(c * size)
        dst.append(((c + 1) % k) * size + 1)
        w.append(bridge_weight)
    return from_edges(k * size, src, dst, w)


def _cut(t, part):
    return independent.cut(t, part)


@pytest.mark.parametrize("seed", SEEDS)
def test_coarsening_keeps_size_and_accounts_for_weight(seed):
    t = small_world(3000, k=10, p=0.2, max_weight=5, seed=seed)
    t.sizes[:] = np.random.default_rng(seed).integers(1, 6, t.n_vertices)
    lv = coarsen_once(t, 8, 4, np.random.default_rng(seed))
    c = lv.graph
    c.check()
    assert c.total_size == t.total_size
    assert c.total_weight == t.total_weight - lv.removed_weight
    assert c.sizes.max() <= max(8, t.sizes.max())
    assert c.n_vertices < t.n_vertices
    # the map is onto, and each coarse vertex holds one or two fine vertices
    counts = np.bincount(lv.cmap, minlength=c.n_vertices)
    assert counts.min() >= 1 and counts.max() <= 2


def test_literal_matching_matches_fewer_pairs():
    t = small_world(3000, k=10, p=0.2, max_weight=5)
    rng = np.random.default_rng(0)
    default = coarsen_once(t, 64, 4, rng)
    literal = coarsen_once(t, 64, 4, rng, literal=True)
    assert literal.graph.n_vertices > default.graph.n_vertices


def test_bisection_finds_the_bridge():
    t = cliques(2, 12, bridge_weight=1)
    local = np.full(t.n_vertices, -1, np.int64)
    sel, cut = bisect(t, np.arange(t.n_vertices), 12, 12, 4, np.random.default_rng(0), local)
    assert cut == 2  # two light edges join the two cliques in the ring
    assert sel.sum() == 12 and len(set(sel[:12])) == 1


def ring(n: int):
    return from_edges(n, np.arange(n), (np.arange(n) + 1) % n, np.ones(n, np.int64))


def test_growth_starts_from_its_start_vertex():
    """Seed 003 step 3 grows from the start along the frontier: on a ring, growth from
    vertex s selects a contiguous arc of n/2 vertices holding s.  No such arc holds both 0
    and n/2, so those two starts must give different selections (a cheapest-first heap
    over all vertices gives the same one whatever the start)."""
    n = 16
    t = ring(n)
    verts = np.arange(n)
    local = np.full(n, -1, np.int64)
    local[verts] = verts
    selections = set()
    for s in (0, n // 2):
        sel, cut = grow(t.indptr, t.indices, t.weights, t.sizes, verts, local, s, n // 2, n // 2)
        chosen = np.flatnonzero(sel)
        assert sel[s] and chosen.size == n // 2 and cut == 2
        # contiguous arc around the ring
        assert sum(sel[(i + 1) % n] != sel[i] for i in range(n)) == 2
        selections.add(tuple(chosen))
    assert len(selections) == 2


@pytest.mark.parametrize("seed", SEEDS)
def test_best_of_tries_is_no_worse_than_each_try(seed):
    t = small_world(400, k=6, p=0.3, max_weight=9, seed=seed)
    verts = np.arange(t.n_vertices)
    local = np.full(t.n_vertices, -1, np.int64)
    tries = growths(t, verts, 200, 200, 8, np.random.default_rng(seed), local)
    assert len({tuple(np.flatnonzero(sel)) for _, sel, _ in tries}) > 1, "tries must differ"
    for start, sel, cut in tries:
        assert sel[start]
        assert cut == _cut(t, sel.astype(np.int64))
    _, best = bisect(t, verts, 200, 200, 8, np.random.default_rng(seed), local)
    assert best == min(c for _, _, c in tries)


@pytest.mark.parametrize("k", [2, 4, 8])
def test_recursive_partition_recovers_cliques(k):
    t = cliques(k, 16)
    part = recursive_partition(t, 16, 4, np.random.default_rng(1))
    assert np.bincount(part).max() <= 16
    assert _cut(t, part) == k  # only the bridges are cut: optimal


@pytest.mark.parametrize("seed", SEEDS)
def test_recursive_partition_respects_capacity(seed):
    t = small_world(2000, seed=seed)
    t.sizes[:] = np.random.default_rng(seed).integers(1, 5, t.n_vertices)
    part = recursive_partition(t, 200, 4, np.random.default_rng(seed))
    assert np.bincount(part, weights=t.sizes).max() <= 200
    assert part.min() == 0 and np.unique(part).size == part.max() + 1


@pytest.mark.parametrize("seed", SEEDS)
def test_refinement_never_increases_cut_nor_overfills(seed):
    rng = np.random.default_rng(seed)
    t = small_world(2000, k=8, p=0.3, max_weight=9, seed=seed)
    cap = 120
    part = np.repeat(np.arange(20), 100)[rng.permutation(2000)].astype(np.int64)  # random, full-ish
    load = np.bincount(part, minlength=20).astype(np.int64)
    before = _cut(t, part)
    moves, gain = refine(t.indptr, t.indices, t.weights, t.sizes, part, load, cap,
                         rng.permutation(2000), 8)
    after = _cut(t, part)
    assert after == before - gain and after <= before and moves > 0
    assert load.max() <= cap
    np.testing.assert_array_equal(load, np.bincount(part, minlength=20))


@pytest.mark.parametrize("seed", SEEDS)
def test_fm_climbs_out_of_the_greedy_local_minimum(seed):
    """After greedy refinement has converged, FM (hill climbing with rollback) lowers the cut
    further -- computed independently from the graph and the parts -- and never overfills."""
    rng = np.random.default_rng(seed)
    t = small_world(2000, k=8, p=0.3, max_weight=9, seed=seed)
    cap = 110
    part = np.repeat(np.arange(20), 100)[rng.permutation(2000)].astype(np.int64)
    load = np.bincount(part, minlength=20).astype(np.int64)
    refine(t.indptr, t.indices, t.weights, t.sizes, part, load, cap, rng.permutation(2000), 50)
    stuck = independent.cut(t, part)
    # greedy has converged: another pass moves nothing
    assert refine(t.indptr, t.indices, t.weights, t.sizes, part, load, cap,
                  rng.permutation(2000), 50)[0] == 0
    gain, kept = fm_refine(t.indptr, t.indices, t.weights, t.sizes, part, load, cap, rng)
    after = independent.cut(t, part)
    assert after == stuck - gain and gain > 0 and kept > 0
    assert load.max() <= cap
    np.testing.assert_array_equal(load, np.bincount(part, minlength=20))


@pytest.mark.parametrize("patience", [1, 10, 1000])
def test_fm_pass_never_ends_above_its_start(patience):
    rng = np.random.default_rng(5)
    t = small_world(600, k=6, p=0.5, max_weight=5, seed=5)
    part = (np.arange(600) % 7).astype(np.int64)
    load = np.bincount(part, minlength=7).astype(np.int64)
    before = independent.cut(t, part)
    gain, _ = fm_pass(t.indptr, t.indices, t.weights, t.sizes, part, load, 100,
                      rng.permutation(600), patience)
    assert gain >= 0 and independent.cut(t, part) == before - gain
    assert load.max() <= 100


def test_placement_uses_distinct_usable_cores():
    t = small_world(400, seed=0)
    part = recursive_partition(t, 16, 4, np.random.default_rng(0))
    q = quotient(t, part.astype(np.int32), int(part.max()) + 1)
    usable = np.ones((6, 7), bool)
    usable[0, 0] = usable[2, 3] = False
    pos = place(q, usable, 4, np.random.default_rng(0))
    cores = {tuple(p) for p in pos}
    assert len(cores) == q.n_vertices
    assert all(usable[y, x] for x, y in cores)


def test_rectangle_is_near_square():
    assert choose_rectangle(np.ones((32, 32), bool), 100) == (10, 10)
    assert choose_rectangle(np.ones((4, 64), bool), 100) == (25, 4)


def test_swap_delta_is_exact():
    rng = np.random.default_rng(3)
    q = small_world(40, k=6, p=0.5, max_weight=7, seed=3)
    pos = np.array([(x, y) for y in range(5) for x in range(8)], np.int64)
    qw = q.weights.astype(np.int64)
    base = hop_traffic(q.indptr, q.indices, qw, pos)
    for _ in range(50):
        u, v = rng.choice(40, 2, replace=False)
        x, y = pos[v]
        d = _swap_delta(q.indptr, q.indices, qw, pos, u, v, x, y)
        p2 = pos.copy()
        p2[[u, v]] = p2[[v, u]]
        assert d == hop_traffic(q.indptr, q.indices, qw, p2) - base


@pytest.mark.parametrize("seed", SEEDS)
def test_force_refinement_never_increases_hop_traffic(seed):
    rng = np.random.default_rng(seed)
    q = small_world(64, k=6, p=0.3, max_weight=9, seed=seed)
    usable = np.ones((9, 9), bool)
    cores = rng.permutation(81)[:64]
    pos = np.stack([cores % 9, cores // 9], axis=1).astype(np.int64)
    r = force_refine(q, pos, usable, max_rounds=50)
    assert r["hop_traffic_after"] <= r["hop_traffic_before"]
    assert r["swaps"] > 0
    assert len({tuple(p) for p in pos}) == 64


def test_generators_have_the_promised_shape():
    t = layered(3, 10, 1)
    t.check()
    assert t.n_vertices == 300
    assert t.n_edges == 2 * (8 * 8 * 9 + 4 * 8 * 6 + 4 * 4)  # interior, edges, corners
    d = dense([5, 4, 3])
    assert d.n_edges == 5 * 4 + 4 * 3


def test_rebalance_empties_overfull_parts():
    from snpu.compiler.mapping.refine import rebalance

    rng = np.random.default_rng(0)
    t = small_world(1000, seed=4)
    part = np.minimum(np.arange(1000) // 80, 9).astype(np.int64)  # part 9 holds 280
    load = np.bincount(part, minlength=12).astype(np.int64)
    over = rebalance(t.indptr, t.indices, t.weights, t.sizes, part, load, 100, rng.permutation(1000))
    assert over == 0 and load.max() <= 100
    np.testing.assert_array_equal(load, np.bincount(part, minlength=12))


def test_non_strict_partition_keeps_the_part_count():
    t = small_world(3000, seed=5)
    t.sizes[:] = np.random.default_rng(5).integers(1, 40, t.n_vertices)
    cap = 1000
    parts = -(-t.total_size // cap)
    part = recursive_partition(t, cap, 4, np.random.default_rng(0), parts, strict=False)
    assert part.max() + 1 == parts
