"""The whole mapping flow, the importers and ``snpu map``."""

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from snpu.cli import main
from snpu.compiler.mapping.generate import layered, small_world
from snpu.compiler.mapping.importers import from_edge_list, from_onnx, from_onnx_blocks
from snpu.errors import CompileError
from snpu.compiler.mapping.mapper import MapOptions, map_topology
from snpu.compiler.mapping.topology import TopologyError

from . import independent
from .test_algorithms import cliques

DIGITS = Path(__file__).resolve().parents[3] / "examples" / "digits"


def _check(t, m, opts):
    V = t.n_vertices
    assert m.group.shape == (V,)                      # every neuron mapped once
    load = np.bincount(m.group, weights=t.sizes)
    assert load.max() <= opts.capacity                # no core over capacity
    cores = {tuple(p) for p in m.position}
    assert len(cores) == m.position.shape[0]          # one group per core
    W, H = opts.mesh
    assert all(0 <= x < W and 0 <= y < H and (x, y) not in opts.unusable for x, y in cores)
    assert m.metrics["max_core_load"] == load.max()
    assert m.metrics["hop_traffic"] <= m.metrics["hop_traffic_after_placement"]
    # the reported figures, recomputed from the graph and the assignment alone
    assert m.metrics["edge_cut"] == independent.cut(t, m.group)
    assert m.metrics["hop_traffic"] == independent.hop_traffic(t, m.core)
    np.testing.assert_array_equal(m.core, m.position[m.group])


@pytest.mark.parametrize("store_levels", [True, False])
def test_layered_graph(store_levels):
    t = layered(6, 40, 1, max_weight=3)
    opts = MapOptions(capacity=256, mesh=(8, 8), unusable=((0, 0), (3, 3)), store_levels=store_levels)
    m = map_topology(t, opts)
    _check(t, m, opts)
    assert m.metrics["groups"] >= -(-t.total_size // 256)
    # each level refines: the cut after refinement is never above the cut before
    for lv in m.levels:
        assert lv["cut_after_refinement"] <= lv["cut_before_refinement"]
    assert m.metrics["hop_traffic"] < m.metrics["hop_traffic_row_major"]


def test_levels_in_stores_or_in_memory_give_the_same_mapping():
    t = small_world(5000, seed=2)
    a = map_topology(t, MapOptions(capacity=300, mesh=(6, 6), store_levels=True))
    b = map_topology(t, MapOptions(capacity=300, mesh=(6, 6), store_levels=False))
    np.testing.assert_array_equal(a.group, b.group)
    np.testing.assert_array_equal(a.position, b.position)


def test_known_optimum_cliques():
    t = cliques(16, 32)
    m = map_topology(t, MapOptions(capacity=32, mesh=(4, 4)))
    _check(t, m, MapOptions(capacity=32, mesh=(4, 4)))
    assert m.metrics["groups"] == 16
    assert m.metrics["edge_cut"] == 16  # only the ring's bridges
    # a ring of 16 groups on a 4x4 mesh: the optimum is 16 (every bridge one hop)
    assert 16 <= m.metrics["hop_traffic"] <= 24
    assert m.metrics["hop_traffic"] < m.metrics["hop_traffic_row_major"]


def test_errors_are_clear():
    t = small_world(1000)
    with pytest.raises(TopologyError, match="need at least 10 cores of 100; the mesh has 4"):
        map_topology(t, MapOptions(capacity=100, mesh=(2, 2)))
    with pytest.raises(TopologyError, match="tries must be 4..8"):
        map_topology(t, MapOptions(tries=2))
    with pytest.raises(TopologyError, match=r"unusable core \(9, 0\) is outside"):
        map_topology(t, MapOptions(mesh=(4, 4), unusable=((9, 0),)))


def test_onnx_import_of_the_digits_cnn():
    t = from_onnx(DIGITS / "digits_cnn.onnx")
    t.check()
    # image 64 + conv 16x8x8 + pool 16x4x4 + conv 32x4x4 + pool 32x2x2 + fc 64 + fc 10
    assert t.n_vertices == 64 + 1024 + 256 + 512 + 128 + 64 + 10
    # fc layers are complete bipartite: 128*64 + 64*10 connections
    fc = 128 * 64 + 64 * 10
    pools = 1024 + 512  # each input neuron in exactly one 2x2 window
    conv = 16 * (8 * 8 * 9 - 4 * 8 * 3 + 4) + 32 * 16 * (4 * 4 * 9 - 4 * 4 * 3 + 4)
    assert t.n_edges == fc + pools + conv
    m = map_topology(t, MapOptions(capacity=256, mesh=(4, 4)))
    _check(t, m, MapOptions(capacity=256, mesh=(4, 4)))


def test_channel_block_import_is_the_neuron_graph_merged_by_block():
    """Each block vertex is exactly its neurons merged: the block graph equals the quotient
    of the neuron-level graph under the neuron -> block map (built here independently)."""
    from snpu.compiler.frontend import load_onnx
    from snpu.compiler.mapping.coarsen import quotient

    src = DIGITS / "digits_cnn.onnx"
    neurons = from_onnx(src)
    blocks = from_onnx_blocks(src, channel_block=4, vertex_limit=64)
    # tensors with neurons, in creation order (inputs, then every neuron-making node)
    g = load_onnx(src)
    shapes = [g.tensor(g.inputs[0]).shape] + [(1, 16, 8, 8), (1, 16, 4, 4), (1, 32, 4, 4),
                                              (1, 32, 2, 2), (1, 64), (1, 10)]
    cmap, base = [], 0
    for s in shapes:
        c, h, w = (s[1], s[2], s[3]) if len(s) == 4 else (s[1], 1, 1)
        cb, rb = min(4, 64 // w, c), max(1, min(h, 64 // (min(4, 64 // w, c) * w)))
        nrb = -(-h // rb)
        ch, y, _ = np.meshgrid(np.arange(c), np.arange(h), np.arange(w), indexing="ij")
        cmap.append(base + (ch // cb) * nrb + y // rb)
        base += (-(-c // cb)) * nrb
    cmap = np.concatenate([m.reshape(-1) for m in cmap])
    assert base == blocks.n_vertices and cmap.size == neurons.n_vertices
    q = quotient(neurons, cmap, base)
    np.testing.assert_array_equal(q.sizes, blocks.sizes)
    np.testing.assert_array_equal(q.indptr, blocks.indptr)
    for v in range(base):
        a, b = slice(q.indptr[v], q.indptr[v + 1]), slice(blocks.indptr[v], blocks.indptr[v + 1])
        assert dict(zip(q.indices[a], q.weights[a])) == dict(zip(blocks.indices[b], blocks.weights[b]))


def test_zoo_network_maps_at_channel_block_granularity():
    import onnx

    zoo = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    with pytest.raises(CompileError, match="max_connections"):
        from_onnx(zoo / "light_squeezenet.onnx", max_connections=10_000_000)
    t = from_onnx_blocks(zoo / "light_squeezenet.onnx")
    assert t.sizes.max() <= 1024
    opts = MapOptions(capacity=4096, mesh=(32, 32), fill=0.8)  # coarse vertices need slack
    m = map_topology(t, opts)
    _check(t, m, opts)


def test_edge_list_import(tmp_path):
    p = tmp_path / "e.txt"
    p.write_text("# a triangle and a tail\n0 1 5\n1 2\n2 0 3\n2 3 # tail\n")
    t = from_edge_list(p)
    assert t.n_vertices == 4 and t.n_edges == 4 and t.total_weight == 10
    p.write_text("0 1\n1 x\n")
    with pytest.raises(TopologyError, match=r"e.txt:2: not an integer"):
        from_edge_list(p)
    p.write_text("0 1 2 3\n")
    with pytest.raises(TopologyError, match=r"e.txt:1: expected 'src dst \[weight\]'"):
        from_edge_list(p)


def test_cli_generate_map_and_corrupt_store(tmp_path):
    r = CliRunner()
    out = r.invoke(main, ["topology", "generate", "layered", "--layers", "4", "--side", "30",
                          "-o", str(tmp_path / "t.zip")])
    assert out.exit_code == 0, out.output
    out = r.invoke(main, ["map", str(tmp_path / "t.zip"), "--mesh", "4x4", "--capacity", "400",
                          "-o", str(tmp_path / "m.npz"), "--heatmap", str(tmp_path / "m.png"),
                          "--unusable", "1,1", "--json"])
    assert out.exit_code == 0, out.output
    metrics = json.loads(out.output)
    z = np.load(tmp_path / "m.npz")
    assert z["group"].shape == (3600,) and z["core"].shape == (3600, 2)
    assert json.loads(str(z["metrics"]))["edge_cut"] == metrics["edge_cut"]
    assert (tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG"
    (tmp_path / "bad.zip").write_bytes((tmp_path / "t.zip").read_bytes()[:-40])
    out = r.invoke(main, ["map", str(tmp_path / "bad.zip"), "-o", str(tmp_path / "x.npz")])
    assert out.exit_code == 1 and out.output.count("\n") == 1
    assert "bad.zip" in out.output and not (tmp_path / "x.npz").exists()
