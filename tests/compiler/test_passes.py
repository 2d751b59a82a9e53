"""Each compiler pass on its own: what it must guarantee about the graph it returns."""

from pathlib import Path

import numpy as np
import onnx
import pytest

from snpu.compiler import float_ref
from snpu.compiler.export import onnxruntime_run
from snpu.compiler.frontend import load_onnx
from snpu.compiler.passes.fold_affine import fold_affine
from snpu.compiler.passes.fold_constants import fold_constants
from snpu.compiler.passes.fuse_relu import fuse_relu
from snpu.compiler.passes.partition import choose_device, partition, partition_nodes
from snpu.compiler.passes.prune import PruneOptions, _rows, prune
from snpu.compiler.passes.quantize import quantize
from snpu.compiler.passes.remove_noops import remove_noops
from snpu.errors import CompileError

from .models import inputs, tiny_cnn, tiny_mlp

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _front(model):
    return fuse_relu(fold_affine(remove_noops(fold_constants(load_onnx(model)))))


def test_fold_constants_removes_shape_arithmetic_of_zoo_model():
    g = fold_constants(load_onnx(ZOO / "light_squeezenet.onnx"))
    ops = {n.op for n in g.nodes}
    assert not ops & {"Constant", "ConstantOfShape", "Shape", "Gather", "Unsqueeze"}
    for n in g.nodes:
        if n.op == "Conv":
            assert g.const(n.inputs[1]) is not None, n.name


def test_fold_affine_and_fuse_relu_preserve_the_function():
    m = tiny_cnn()
    g = _front(m)
    ops = [n.op for n in g.nodes]
    assert "BatchNormalization" not in ops and "Dropout" not in ops and "Affine" not in ops
    assert "Relu" not in ops  # all three ReLUs fused into their producers
    assert g.node("conv1").meta.get("relu")
    for x in inputs(m, 3):
        want = onnxruntime_run(m, {"x": x})["prob"]
        np.testing.assert_allclose(float_ref.run(g, x)["prob"], want, rtol=1e-4, atol=1e-6)


def test_matmul_with_bias_add_becomes_one_gemm():
    m = tiny_mlp()
    g = _front(m)
    assert [n.op for n in g.nodes] == ["Gemm", "Gemm", "Gemm"]
    for x in inputs(m, 2):
        np.testing.assert_allclose(float_ref.run(g, x)["y"], onnxruntime_run(m, {"x": x})["y"],
                                   rtol=1e-4, atol=1e-5)


def test_partition_puts_unsupported_ops_on_the_host_in_dependency_order():
    g = partition(_front(tiny_cnn()), force_host={"conv3"})
    dev = {n.name: n.device for n in g.nodes}
    assert dev["softmax"] == "host" and dev["conv3"] == "host" and dev["conv1"] == "core"
    assert g.node("softmax").meta["core_reason"] == "Softmax has no core kernel"
    seen, pos = [], {}
    for k, s in enumerate(g.meta["subgraphs"]):
        seen += s["nodes"]
        for v in s["nodes"]:
            pos[v] = k
    assert sorted(seen) == sorted(dev)  # every node in exactly one subgraph
    producers = g.producers()
    for n in g.nodes:  # no subgraph needs a later one
        for i in n.inputs:
            if i in producers:
                assert pos[producers[i].name] <= pos[n.name]


@pytest.mark.parametrize("model", ["light_zfnet512", "light_bvlc_alexnet"])
def test_partition_keeps_core_layers_on_the_core_after_a_host_node(model):
    """LRN runs on the host; every convolution and fully connected layer after it still
    runs on the core (a host subgraph must not swallow nodes the host could also run)."""
    g = partition(_front(ZOO / f"{model}.onnx"))
    assert {n.op for n in g.nodes if n.device == "host"} == {"LRN", "Softmax"}
    core = [s for s in g.meta["subgraphs"] if s["device"] == "core"]
    assert len(core) == 3  # split by the two LRNs


def test_partition_records_device_support_and_choice():
    g = partition(_front(tiny_cnn()), force_host={"conv3"})
    assert g.node("conv1").meta["device_support"] == ["core", "host"]
    assert g.node("conv1").device == "core"  # both can: the core is preferred
    assert g.node("softmax").meta["device_support"] == ["host"]
    assert g.node("conv3").meta["core_reason"] == "forced to the host (--host)"


def test_partition_takes_candidates_in_depth_order_of_the_contracted_graph():
    """a -> b -> {d, e} <- c; b and d run on the host only, a, c and e on both (so on the
    core); c is a source listed after b.  After {a}, the shallowest free node is c (depth 1):
    its core subgraph takes e, and b and d then stay apart (together they would form a cycle
    with {c, e}).  In file order b would start first, take d, and leave c and e in two core
    subgraphs: three core segments instead of two."""
    order = ["a", "b", "c", "d", "e"]
    preds = {"a": set(), "b": {"a"}, "c": set(), "d": {"b", "c"}, "e": {"b", "c"}}
    succs = {v: {w for w in order if v in preds[w]} for v in order}
    both, host = {"core", "host"}, {"host"}
    support = {"a": both, "b": host, "c": both, "d": host, "e": both}
    subgraphs, depth = partition_nodes(order, preds, succs, support)
    assert [(s.device, s.nodes) for s in subgraphs] == [
        ("core", ["a"]), ("host", ["b"]), ("core", ["c", "e"]), ("host", ["d"])]
    assert [depth[s.id] for s in subgraphs] == [1, 2, 3, 4]


@pytest.mark.parametrize("seed", range(40))
def test_partition_of_random_dags(seed):
    """Every node in one subgraph on a device it supports; the contracted graph is a DAG
    and the subgraphs come in dependency order."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 30))
    order = [f"v{k}" for k in range(n)]
    preds = {v: {order[j] for j in range(k) if rng.random() < 3 / n} for k, v in enumerate(order)}
    succs = {v: {w for w in order if v in preds[w]} for v in order}
    support = {v: {"host"} if rng.random() < 0.3 else {"core", "host"} for v in order}
    subgraphs, _ = partition_nodes(order, preds, succs, support)
    where = {v: k for k, s in enumerate(subgraphs) for v in s.nodes}
    assert sorted(where) == sorted(order)
    for k, s in enumerate(subgraphs):
        assert all(s.device == choose_device(support[v]) for v in s.nodes)
        for v in s.nodes:
            assert all(where[p] <= k for p in preds[v])  # dependency order, hence no cycle


@pytest.mark.parametrize("density", [1.0, 0.5, 0.2, 0.05])
def test_magnitude_pruning_hits_the_target_per_layer(density):
    g = prune(partition(_front(tiny_mlp())), PruneOptions(density=density, keep_dense=frozenset({"matmul2"})))
    for n in g.nodes:
        w = g.const(n.inputs[1])
        if n.name == "matmul2":
            assert n.meta["prune"]["pruned"] is False and np.count_nonzero(w) == w.size
            continue
        assert np.count_nonzero(w) == int(round(density * w.size)), n.name
        assert n.meta["prune"]["density"] == pytest.approx(density, abs=1 / w.size)


def test_magnitude_pruning_keeps_the_largest_weights():
    g0 = partition(_front(tiny_mlp()))
    g = prune(g0, PruneOptions(density=0.3))
    for n0, n in zip(g0.nodes, g.nodes):
        w0, w = np.abs(g0.const(n0.inputs[1])), g.const(n.inputs[1])
        assert w0[w != 0].min() >= w0[w == 0].max()


def test_group_pruning_deletes_groups_with_too_many_small_weights():
    group, t5, t6 = 8, 0.3, 2
    g0 = partition(_front(tiny_mlp()))
    g = prune(g0, PruneOptions(group_size=group, t5=t5, t6=t6))
    deleted = 0
    for n0, n in zip(g0.nodes, g.nodes):
        rows0, rows = _rows(n0, g0.const(n0.inputs[1])), _rows(n, g.const(n.inputs[1]))
        small = np.abs(rows0) <= t5 * np.abs(rows0).max()
        for r in range(rows.shape[0]):
            for s in range(0, rows.shape[1], group):
                gone = not rows[r, s:s + group].any()
                assert gone == (small[r, s:s + group].sum() > t6), (n.name, r, s)
                deleted += gone
                if not gone:  # surviving groups are untouched
                    np.testing.assert_array_equal(rows[r, s:s + group], rows0[r, s:s + group])
    assert deleted > 0


def test_bad_density_is_a_compile_error():
    with pytest.raises(CompileError, match="density must be in"):
        prune(partition(_front(tiny_mlp())), PruneOptions(density=0.0))


def test_quantize_per_channel_weights_and_calibrated_scales():
    m = tiny_cnn()
    calib = [{"x": x} for x in inputs(m, 8)]
    g = quantize(partition(_front(m)), calib)
    for n in g.nodes:
        q = n.meta.get("q")
        if n.device != "core" or q is None or "w" not in q:
            continue
        w = q["w"]
        assert w.dtype == np.int8 and np.abs(w).max() <= 127
        # per-channel: every output channel that has a nonzero weight uses the full int8 range
        peak = np.abs(w.astype(int)).max(axis=1)
        assert set(peak[peak > 0]) == {127}, n.name
    # tensor scales cover the calibration range: no value saturates on the calibration inputs
    for c in calib:
        for name, v in float_ref.run(g, c, keep=True).items():
            t = g.tensor(name)
            if t.scale is not None and not t.is_const:
                assert np.abs(v).max() <= 127 * t.scale * (1 + 1e-6), name


def test_pool_halo_follows_what_keeps_a_map_never_negative():
    """A max pooling reads zeros for its padding only over a map that is never negative:
    a fused ReLU makes it so, LRN / concatenation / max pooling keep it, a plain conv
    does not; an average always may (zeros add nothing)."""
    from onnx import TensorProto, helper, numpy_helper

    from snpu.compiler import ops
    rng = np.random.default_rng(0)
    H = helper.make_node
    w = numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "w")
    pool = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    nodes = [H("Conv", ["x", "w"], ["c"], name="conv"), H("Relu", ["c"], ["r"], name="relu"),
             H("LRN", ["r"], ["n"], size=3, name="lrn"),
             H("MaxPool", ["n"], ["p1"], name="max_after_lrn", **pool),
             H("Conv", ["x", "w"], ["c2"], name="conv2"),
             H("LRN", ["c2"], ["n2"], size=3, name="lrn2"),
             H("MaxPool", ["n2"], ["p2"], name="max_signed", **pool),
             H("AveragePool", ["n2"], ["p3"], name="avg_signed", **pool),
             H("Concat", ["n", "r"], ["cat"], axis=1, name="cat"),
             H("MaxPool", ["cat"], ["p4"], name="max_after_concat", **pool),
             H("Concat", ["n", "c2"], ["cat2"], axis=1, name="cat2"),
             H("MaxPool", ["cat2"], ["p5"], name="max_after_mixed_concat", **pool)]
    graph = helper.make_graph(nodes, "halo", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 4, 8, 8])], [helper.make_tensor_value_info(
            o, TensorProto.FLOAT, None) for o in ("p1", "p2", "p3", "p4", "p5")], [w])
    g = _front(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert ops.pool_halo(g, g.node("max_after_lrn")) == (1, 1)
    assert ops.pool_halo(g, g.node("max_signed")) == (0, 0)
    assert ops.pool_halo(g, g.node("avg_signed")) == (1, 1)
    assert ops.pool_halo(g, g.node("max_after_concat")) == (1, 1)
    assert ops.pool_halo(g, g.node("max_after_mixed_concat")) == (0, 0)


@pytest.mark.parametrize("n", [1, 1023, 1024, 1025, 4608, 9216])
def test_int8_reference_products_are_exact_at_the_extremes(n):
    """The int8 reference multiplies in float32 over blocks of 1024 columns: exact while
    every partial sum stays below 2**24.  Worst cases (all -128 x -127, all -128 x 127,
    random signs) against int64 arithmetic, across the block boundaries."""
    from snpu.compiler.int8_ref import _int_matmul

    rng = np.random.default_rng(n)
    v = np.vstack([np.full(n, -128), np.full(n, 127), rng.integers(-128, 128, n)]).astype(np.int16)
    w = np.vstack([np.full(n, -127), np.full(n, 127), rng.integers(-127, 128, n)]).astype(np.int8)
    exact = v.astype(np.int64) @ w.astype(np.int64).T
    got = _int_matmul(v, w)
    assert got.dtype == np.int64 and np.array_equal(got, exact)
    assert exact[0, 0] == 128 * 127 * n
