"""Channel shuffles folded into the convolutions reading them (passes/fold_shuffle.py)."""

import numpy as np
import pytest

from snpu.compiler import check, float_ref, runtime
from snpu.compiler.export import onnxruntime_run
from snpu.compiler.frontend import load_onnx
from snpu.compiler.passes.fold_constants import fold_constants
from snpu.compiler.passes.fold_shuffle import fold_shuffle
from snpu.compiler.passes.prune import PruneOptions, prune
from snpu.compiler.pipeline import CompileOptions, compile_model

from .models import TEST_CORE, inputs, shuffle_cnn


def _ops(g):
    return [n.op for n in g.nodes]


@pytest.mark.parametrize("pooled", [False, True])
def test_shuffles_read_only_by_convolutions_fold_and_the_function_stays(pooled):
    m = shuffle_cnn(pooled_shuffle=pooled)
    before = fold_constants(load_onnx(m))
    g = fold_shuffle(before)
    # the first shuffle (read by the depthwise convolution) always folds; the second only
    # while a convolution alone reads it
    assert _ops(before).count("Transpose") == 2
    assert _ops(g).count("Transpose") == (1 if pooled else 0)
    dw = g.node("dwconv")
    assert dw.attrs["group"] == 1 and dw.inputs[0] == "ar"
    assert dw.meta["own_weights"] == 12 * 9 and g.const(dw.inputs[1]).shape == (12, 12, 3, 3)
    # one weight per output channel and window position: the renamed depthwise kernel
    assert (np.count_nonzero(g.const(dw.inputs[1]), axis=(1, 2, 3)) <= 9).all()
    for x in inputs(m, 2):
        want = onnxruntime_run(m, {"x": x})["y"]
        np.testing.assert_allclose(float_ref.run(g, x)["y"], want, rtol=1e-4, atol=1e-5)


def test_pruning_keeps_the_share_of_a_folded_convolutions_own_weights():
    g = fold_shuffle(fold_constants(load_onnx(shuffle_cnn())))
    for n in g.nodes:
        n.device = "core"
    pruned = prune(g, PruneOptions(density=0.5))
    w = pruned.const(pruned.node("dwconv").inputs[1])
    assert np.count_nonzero(w) == 54  # half of its 108 weights, not half of 12 x 108
    assert pruned.node("dwconv").meta["prune"]["density"] == 0.5


@pytest.mark.parametrize("density", [1.0, 0.5])
def test_a_shufflenet_unit_runs_on_the_core_in_one_segment(density):
    m = shuffle_cnn()
    xs = inputs(m, 2)
    c = compile_model(m, CompileOptions(config=TEST_CORE, density=density,
                                        calibration=[{"x": x} for x in xs]))
    assert [s["kind"] for s in c.report["segments"]] == ["core"]
    agree = check.compare(c, xs, runtime.run_batch(c, xs), onnxruntime=density == 1.0)
    assert agree.bit_exact == 2, agree.mismatches
    if density == 1.0:  # calibrated on its inputs: a few output steps from onnxruntime
        assert agree.max_rel_err < 0.1, agree.to_dict()
