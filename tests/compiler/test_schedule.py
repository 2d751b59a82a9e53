"""Issue 12 (seed 002): operator splitting by memory, key nodes, topological-order search
on the cost model, linking.  Every program here runs on the golden model bit-exact with
the int8 reference (which knows nothing of pieces or orders)."""

import itertools
import random
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import helper, numpy_helper

from snpu.compiler import check, runtime
from snpu.compiler.passes import schedule as S
from snpu.compiler.passes.schedule import ScheduleOptions
from snpu.compiler.passes.split import onchip_bytes
from snpu.compiler.pipeline import CompileOptions, compile_model
from snpu.errors import CompileError

from .models import TEST_CORE

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import branchy  # noqa: E402
import layer_models  # noqa: E402
from layer_models import layer_model as _split_model, one_node as _model  # noqa: E402

H = helper.make_node


def _run(m, x_shape, options, n=2):
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal(x_shape).astype(np.float32) for _ in range(n)]
    c = compile_model(m, CompileOptions(config=TEST_CORE, calibration=[{"x": x} for x in xs],
                                        **options))
    agree = check.compare(c, xs, runtime.run_batch(c, xs))
    assert agree.bit_exact == n, agree.mismatches
    return c


SPLIT_KINDS = layer_models.KINDS


@pytest.mark.parametrize("kind", SPLIT_KINDS)
def test_split_pieces_compute_the_unsplit_result(kind):
    """Each operator kind, split along its dimension by the memory threshold, runs
    bit-exact with the int8 reference of the unsplit graph (and with the unsplit program)."""
    m, shape = _split_model(kind, np.random.default_rng(3))
    whole = _run(m, shape, {"split_threshold": 0})
    c = _run(m, shape, {"split_threshold": 4096})
    nodes = c.report["split"]["nodes"]
    assert nodes, c.report["split"]
    entry = nodes[0]
    assert entry["pieces"] > 1 and entry["largest_bytes"] <= max(4096, entry["largest_bytes"])
    if SPLIT_KINDS[kind]:
        assert SPLIT_KINDS[kind] in entry["dimensions"], entry
    assert "rows" not in entry["dimensions"] or kind not in ("maxpool", "avgpool", "global_pool")
    assert whole.report["split"]["nodes"] == []


def test_pieces_fit_the_threshold_when_the_dimensions_allow():
    m, shape = _split_model("conv_rows", np.random.default_rng(3))
    c = compile_model(m, CompileOptions(config=TEST_CORE, split_threshold=8192))
    (entry,) = c.report["split"]["nodes"]
    assert entry["largest_bytes"] <= 8192 < entry["whole_bytes"]
    assert c.report["split"]["threshold"] == 8192
    default = compile_model(m, CompileOptions(config=TEST_CORE))
    assert default.report["split"]["threshold"] == onchip_bytes(TEST_CORE)


def test_pooling_window_larger_than_every_buffer_runs_on_the_host_and_says_why():
    """A pooling window is never split (a reduction): a window the accumulators cannot hold
    goes to the host, and report.json names the operand and the smallest core that fits."""
    m = _model([H("MaxPool", ["x"], ["y"], kernel_shape=[20, 20], name="bigpool")],
               [1, 8, 40, 40], [1, 8, 21, 21], [])
    c = _run(m, [1, 8, 40, 40], {})
    (layer,) = c.report["layers"]
    why = layer["why_host"]
    assert layer["device"] == "host" and "input window" in why and "acc_words >=" in why
    # the core the reason names runs it
    from dataclasses import replace
    bigger = replace(TEST_CORE, acc_words=int(why.rsplit(">= ", 1)[1]))
    c = compile_model(m, CompileOptions(config=bigger))
    assert c.report["ops_on_core"] == 1


def test_a_convolution_patch_larger_than_the_neuron_buffer_is_one_clear_line():
    rng = np.random.default_rng(0)
    m = _model([H("Conv", ["x", "w"], ["y"], name="hugeconv")], [1, 1, 50, 50], [1, 2, 1, 1],
               [numpy_helper.from_array(rng.standard_normal((2, 1, 50, 50)).astype(np.float32), "w")])
    with pytest.raises(CompileError) as e:
        compile_model(m, CompileOptions(config=TEST_CORE))
    msg = str(e.value)
    assert "hugeconv" in msg and "input patch" in msg and "nbuf_bytes >= 8192" in msg
    assert "\n" not in msg


def test_global_pooling_over_a_large_map_runs_on_the_core():
    m = _model([H("GlobalAveragePool", ["x"], ["y"])], [1, 8, 300, 300], [1, 8, 1, 1], [])
    c = _run(m, [1, 8, 300, 300], {}, n=1)
    assert c.report["ops_on_core"] == 1


# ----------------------------------------------------------------------------------------
# key nodes, orders


def _random_dag(rng: random.Random, n: int) -> dict:
    preds = {}
    for v in range(n):
        preds[v] = {u for u in range(v) if rng.random() < 0.3}
    return preds


def test_key_nodes_are_on_every_path():
    rng = random.Random(0)
    for _ in range(50):
        preds = _random_dag(rng, rng.randint(1, 9))
        order = list(preds)
        keys = set(S.key_nodes(order, preds))
        # brute force: v is a key node iff every other node is comparable with it
        anc = {v: set() for v in order}
        for v in order:
            for p in preds[v]:
                anc[v] |= {p} | anc[p]
        for v in order:
            comparable = all(u == v or u in anc[v] or v in anc[u] for u in order)
            assert (v in keys) == comparable


def test_orders_are_all_topological_orders():
    rng = random.Random(1)
    for _ in range(30):
        preds = _random_dag(rng, rng.randint(1, 6))
        nodes = list(preds)
        got = [tuple(o) for o in S.all_orders(nodes, preds)]
        brute = [p for p in itertools.permutations(nodes) if S.is_topological(list(p), preds)]
        assert sorted(got) == sorted(brute)
        assert got[0] == tuple(nodes)  # the file order first
        assert S.count_orders(nodes, preds, 5) == min(len(brute), 6)
        o = S.random_order(nodes, preds, rng)
        assert S.is_topological(o, preds)
        # blocks: concatenations of block orders are topological orders of the whole
        bl = S.blocks(nodes, preds, 1)
        assert [v for b in bl for v in b] == nodes
        shuffled = [v for b in bl for v in S.random_order(b, preds, rng)]
        assert S.is_topological(shuffled, preds)


@pytest.mark.parametrize("mode", ["search", "greedy"])
def test_order_search_keeps_bit_exactness_and_reports_its_choice(mode):
    m = branchy.build(1, blocks=2, channels=16, size=8)
    c = _run(m, [1, 16, 8, 8], {"schedule": ScheduleOptions(mode), "split_threshold": 2048,
                                 "density": 0.3})
    sch = c.report["schedule"]
    assert sch["mode"] == mode
    (entry,) = sch["subgraphs"]
    assert entry["blocks"] and all(b["timed"] >= 2 for b in entry["blocks"])
    if mode == "search":
        assert entry["chosen_cycles"] <= entry["file_cycles"]
    assert len(entry["order"]) == entry["kernels"]
    assert any("#" in u for u in entry["order"])  # pieces are ordered too


def test_cost_model_follows_the_golden_model():
    """The compile-time estimate (neuron densities instead of activations) of a program
    stays close to the golden model's cycles running it on a real input."""
    m = branchy.build(0, blocks=2, channels=16, size=8)
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((1, 16, 8, 8)).astype(np.float32) for _ in range(2)]
    c = compile_model(m, CompileOptions(config=TEST_CORE, calibration=[{"x": x} for x in xs],
                                        loops=False, density=0.5))
    golden = runtime.run(c, xs[0]).core_cycles
    (sg,) = [s for s in c.graph.meta["subgraphs"] if s["device"] == "core"]
    from snpu.compiler.passes.codegen import units
    est = S.KernelTimer(c.graph, c.config, c.image, False)(units(c.graph, sg["nodes"]))
    assert abs(est - golden) / golden < 0.05, (est, golden)


def test_bad_schedule_mode_is_a_clear_error():
    m, shape = _split_model("add", np.random.default_rng(0))
    with pytest.raises(CompileError, match="--schedule 'fastest'"):
        compile_model(m, CompileOptions(config=TEST_CORE, schedule=ScheduleOptions("fastest")))


def test_pieces_next_to_each_other_are_one_kernel():
    """codegen._kernel_units: adjacent row pieces (same channels) of a node that walks rows,
    adjacent channel pieces of a convolution (whole rows) or of a per-channel layer, are one
    kernel when nothing runs between them; pieces apart, or of other shapes, are not."""
    from types import SimpleNamespace

    from snpu.compiler.passes.codegen import _kernel_units
    from snpu.compiler.passes.split import Piece

    def node(op, *pieces):
        return SimpleNamespace(op=op, meta={"pieces": list(pieces)})

    nodes = {
        "conv": node("Conv", Piece(rows=(0, 4)), Piece(rows=(4, 9)), Piece(rows=(9, 12))),
        "convc": node("Conv", Piece(channels=(0, 16)), Piece(channels=(16, 32))),
        "convcr": node("Conv", Piece(channels=(0, 16), rows=(0, 4)),
                       Piece(channels=(16, 32), rows=(0, 4))),
        "fc": node("Gemm", Piece(channels=(0, 8)), Piece(channels=(8, 16))),
        "aff": node("Affine", Piece(channels=(0, 8), rows=(0, 2)), Piece(channels=(8, 16), rows=(0, 2)),
                    Piece(channels=(0, 8), rows=(2, 4))),
        "img": node("Conv", Piece(images=(0, 1)), Piece(images=(1, 2))),
        "other": node("Relu"),
    }
    order = [("conv", 0), ("conv", 1), ("other", None), ("conv", 2),
             ("convc", 0), ("convc", 1), ("convcr", 0), ("convcr", 1), ("fc", 0), ("fc", 1),
             ("aff", 0), ("aff", 1), ("aff", 2), ("img", 0), ("img", 1)]
    got = [(name, index, piece) for _, name, index, piece in _kernel_units(order, nodes)]
    assert got == [
        ("conv", 0, Piece(rows=(0, 9))), ("other", None, None), ("conv", 2, Piece(rows=(9, 12))),
        ("convc", 0, Piece(channels=(0, 32))),
        ("convcr", 0, Piece(channels=(0, 16), rows=(0, 4))),  # a convolution's channel
        ("convcr", 1, Piece(channels=(16, 32), rows=(0, 4))),  # pieces merge over whole rows
        ("fc", 0, Piece(channels=(0, 16))),
        ("aff", 0, Piece(channels=(0, 16), rows=(0, 2))), ("aff", 2, Piece(channels=(0, 8), rows=(2, 4))),
        ("img", 0, Piece(images=(0, 1))), ("img", 1, Piece(images=(1, 2)))]
