"""Seed 001's memory-saving rewrite on bare dataflow graphs (issue 13, first step): timing
analysis, candidates, the rewrite's nodes and control edges (never a cycle, on random
DAGs), the memory profile."""

import random

import pytest

from snpu.compiler.passes import memory_plan as M


def _flow(edges: dict[str, list[str]], size: dict[str, int], delay: dict[str, float]) -> M.Flow:
    """``edges[n]``: the nodes whose outputs ``n`` reads (``"in"``: the graph input);
    node ``n`` writes tensor ``n``."""
    order = list(edges)
    reads = {n: [p for p in edges[n]] for n in order}
    writes = {n: [n] for n in order}
    return M.Flow(order, reads, writes, {**size, "in": size.get("in", 1)}, delay)


def test_timing_analysis_matches_the_seed_on_a_diamond():
    # a -> b -> d, a -> c -> d; b is slow, so c's output waits at d
    f = _flow({"a": ["in"], "b": ["a"], "c": ["a"], "d": ["b", "c"]},
              {"a": 1, "b": 1, "c": 1, "d": 1}, {"a": 2, "b": 10, "c": 3, "d": 1})
    tat, trt, tts = M.timing_analysis(f)
    assert tat["a"] == 2 and tat["b"] == 12 and tat["c"] == 5
    assert trt["d"] == 12 and tat["d"] == 13
    assert tts[("d", "b")] == 0 and tts[("d", "c")] == 7
    assert tts[("b", "a")] == 0 and tts[("c", "a")] == 0


def test_candidates_take_slack_and_size_thresholds_and_the_largest():
    f = _flow({"a": ["in"], "b": ["a"], "c": ["b"], "d": ["c", "a"], "e": ["d", "b"]},
              {"a": 100, "b": 50, "c": 10, "d": 10, "e": 1}, {n: 5 for n in "abcde"})
    _, _, tts = M.timing_analysis(f)
    assert M.candidates(f, tts, 0, 0, 10) == [("d", "a"), ("e", "b")]
    assert M.candidates(f, tts, 0, 60, 10) == [("d", "a")]
    assert M.candidates(f, tts, 0, 0, 1) == [("d", "a")]
    assert M.candidates(f, tts, 100, 0, 10) == []


def _unet(depth: int = 4, size: int = 1000):
    """Encoder-decoder with long skips: e_k feeds d_k across the bottleneck."""
    edges, sizes = {}, {}
    prev = "in"
    for k in range(depth):
        edges[f"e{k}"] = [prev]
        sizes[f"e{k}"] = size >> k
        prev = f"e{k}"
    edges["mid"] = [prev]
    sizes["mid"] = 10
    prev = "mid"
    for k in reversed(range(depth)):
        edges[f"d{k}"] = [prev, f"e{k}"]
        sizes[f"d{k}"] = size >> (k + 3)
        prev = f"d{k}"
    return _flow(edges, sizes, {n: 100.0 for n in edges})


def test_swapping_long_skips_lowers_the_peak():
    f = _unet()
    before = max(M.memory_profile(f))
    _, _, tts = M.timing_analysis(f)
    chosen = M.candidates(f, tts, 15, 100, 3)
    assert {t for _, t in chosen} == {"e0", "e1", "e2"}
    g = M.rewrite(f, chosen)
    after = max(M.memory_profile(g))
    assert after < 0.8 * before
    # every late consumer reads the restored tensor; reductions follow their producers
    assert "e0@back" in g.reads["d0"] and "e0" not in g.reads["d0"]
    pos = {n: i for i, n in enumerate(g.order)}
    for n, k in g.kind.items():
        if k == "reduction":
            assert pos[n] > pos[g.reads[n][0]]
    # restorations come in the order they are needed and never overlap
    restores = [n for n in g.order if g.kind.get(n) == "restoration"]
    assert restores == ["swap_in:e2", "swap_in:e1", "swap_in:e0"]
    assert "d2" in g.after["swap_in:e1"] and "d1" in g.after["swap_in:e0"]


def test_a_restoration_per_late_consumer_far_apart():
    f = _flow({"a": ["in"], "b": ["a"], "c": ["b"], "x": ["c", "a"], "y": ["x"], "z": ["y"],
               "w": ["z", "a"]}, {n: 100 for n in "abcxyzw"}, {n: 10.0 for n in "abcxyzw"})
    g = M.rewrite(f, [("x", "a"), ("w", "a")], gap=5)
    assert {n for n, k in g.kind.items() if k == "restoration"} == {"swap_in:a#0", "swap_in:a#1"}
    assert [n for n, k in g.kind.items() if k == "reduction"] == ["swap_out:a"]
    one = M.rewrite(f, [("x", "a"), ("w", "a")], gap=1000)
    assert [n for n, k in one.kind.items() if k == "restoration"] == ["swap_in:a"]


def _random_flow(rng: random.Random, n: int) -> M.Flow:
    edges = {}
    names = [f"n{i}" for i in range(n)]
    for i, v in enumerate(names):
        ins = [u for u in names[:i] if rng.random() < 0.25] or ([names[i - 1]] if i else ["in"])
        edges[v] = ins
    return _flow(edges, {v: rng.randint(1, 1000) for v in names},
                 {v: float(rng.randint(1, 50)) for v in names})


@pytest.mark.parametrize("seed", range(200))
def test_the_rewrite_never_creates_a_cycle(seed):
    rng = random.Random(seed)
    f = _random_flow(rng, rng.randint(2, 14))
    _, _, tts = M.timing_analysis(f)
    chosen = M.candidates(f, tts, rng.choice([0, 5, 20]), rng.choice([0, 200]), rng.randint(1, 6))
    # and a few arbitrary slots besides the candidates
    slots = [(n, t) for n in f.order for t in f.reads[n] if t != "in"]
    chosen += rng.sample(slots, min(len(slots), rng.randint(0, 3)))
    g = M.rewrite(f, list(dict.fromkeys(chosen)), gap=rng.choice([0, 30, 1e9]))
    preds = g.preds()
    seen = set()
    for v in g.order:  # a topological order of data + control edges exists: no cycle
        assert preds[v] <= seen, (v, preds[v] - seen)
        seen.add(v)
    assert sorted(g.order) == sorted(g.reads)
    M.timing_analysis(g)  # and the analysis runs on the result
    for n, t in chosen:  # every chosen slot now reads a restored copy
        if t in f.producer():
            assert t not in g.reads[n]
    # a tensor and its restored copy are never live together: every restoration comes
    # after the original's last reader
    pos = {v: i for i, v in enumerate(g.order)}
    for b, k in g.kind.items():
        if k == "restoration":
            t = g.reads[b][0].removesuffix("@far")
            readers = [v for v in g.order if t in g.reads[v]]
            assert pos[b] > max(pos[v] for v in readers), (b, readers)
