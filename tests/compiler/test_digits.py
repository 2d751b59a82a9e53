"""The committed demo models (examples/digits): sparse as promised, accurate, bit-exact."""

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from snpu.compiler import check, runtime
from snpu.compiler.export import onnxruntime_run
from snpu.compiler.passes.neurons import NeuronOptions
from snpu.compiler.pipeline import CompileOptions, compile_model
from snpu.config import CoreConfig

DIGITS = Path(__file__).resolve().parents[2] / "examples" / "digits"
sys.path.insert(0, str(DIGITS))
from train import split  # noqa: E402

MODELS = ["digits_cnn", "digits_mlp"]


@pytest.fixture(scope="module")
def data():
    return split()


@pytest.mark.parametrize("name", MODELS)
def test_committed_model_is_pruned_to_10_to_25_percent(name):
    m = onnx.load(str(DIGITS / f"{name}.onnx"))
    ws = [numpy_helper.to_array(t) for t in m.graph.initializer if t.name.endswith(".w")]
    density = sum(np.count_nonzero(w) for w in ws) / sum(w.size for w in ws)
    assert 0.10 <= density <= 0.25, density


@pytest.mark.parametrize("name", MODELS)
def test_float_accuracy_on_the_test_split(name, data):
    _, _, xte, yte = data
    m = onnx.load(str(DIGITS / f"{name}.onnx"))
    pred = [int(np.argmax(onnxruntime_run(m, {"image": x[None]})["logits"])) for x in xte]
    assert np.mean(np.asarray(pred) == yte) >= 0.95


@pytest.mark.parametrize("name", MODELS)
def test_int8_program_on_the_golden_model(name, data):
    xtr, _, xte, yte = data
    cfg = CoreConfig.load(DIGITS / "core.json")
    c = compile_model(DIGITS / f"{name}.onnx",
                      CompileOptions(config=cfg, calibration=[{"image": x[None]} for x in xtr[:64]]))
    assert c.report["ops_on_host"] == 0
    xs = [x[None] for x in xte[:60]]
    agree = check.compare(c, xs, runtime.run_batch(c, xs))
    assert agree.bit_exact == len(xs), agree.mismatches
    assert np.mean(np.asarray(agree.run_top1) == yte[:60]) >= 0.93
    assert agree.top1_agree >= len(xs) - 2  # int8 and float agree on nearly every image


@pytest.mark.parametrize("opts", [
    NeuronOptions(threshold=6), NeuronOptions(group=4, t3=4, t4=1),
    NeuronOptions(threshold=3, group=8, t3=2, t4=3), NeuronOptions(mixed="merge"),
    NeuronOptions(mixed="expand")], ids=["threshold", "groups", "both", "merge", "expand"])
def test_neuron_settings_on_the_golden_model(opts, data):
    """The sparse processing unit's threshold and group pruning drop neurons exactly as the
    int8 reference does, and the mixed paths compute the same sums; fewer pairs multiplied."""
    xtr, _, xte, _ = data
    cfg = CoreConfig.load(DIGITS / "core.json")
    calib = [{"image": x[None]} for x in xtr[:16]]
    density = 0.05 if opts.mixed != "auto" else 0.2
    base = compile_model(DIGITS / "digits_cnn.onnx",
                         CompileOptions(config=cfg, calibration=calib, density=density))
    c = compile_model(DIGITS / "digits_cnn.onnx",
                      CompileOptions(config=cfg, calibration=calib, density=density, neurons=opts))
    xs = [x[None] for x in xte[:12]]
    runs = runtime.run_batch(c, xs)
    agree = check.compare(c, xs, runs, onnxruntime=False)
    assert agree.bit_exact == len(xs), agree.mismatches
    pairs = sum(r.mac_pairs for r in runs)
    base_pairs = sum(r.mac_pairs for r in runtime.run_batch(base, xs))
    if opts.threshold or opts.group:
        assert pairs < base_pairs
    else:  # a different path, the same pairs
        assert pairs == base_pairs


def test_mixed_path_is_chosen_by_the_cost_model():
    """Dense neurons favour expanding the stride index (one 64-bit chunk per cycle); very
    sparse neurons and weights favour the merge of two short lists."""
    from snpu.verif import timing

    busy = {m: timing.fc_row_cycles_estimate(1024, 50, 0.5, 64, m) for m in (False, True)}
    assert busy[False] < busy[True]
    sparse = {m: timing.fc_row_cycles_estimate(4096, 8, 0.005, 64, m) for m in (False, True)}
    assert sparse[True] < sparse[False]


@pytest.mark.parametrize("mixed", ["auto", "expand", "merge"])
def test_stride_weights_are_stored_in_their_paths_format(mixed, data):
    """The lanes convert no weight index: weights that encode smallest as strides are
    stored direct where they meet the AND (claim 9, expanded here at compile time) and
    stride only where they merge (claim 10); at 5 % weights and dense-ish neurons the cost
    model picks the expansion."""
    xtr, _, _, _ = data
    cfg = CoreConfig.load(DIGITS / "core.json")
    c = compile_model(DIGITS / "digits_cnn.onnx",
                      CompileOptions(config=cfg, calibration=[{"image": x[None]} for x in xtr[:16]],
                                     density=0.05, neurons=NeuronOptions(mixed=mixed)))
    layers = [e for e in c.report["layers"] if "mixed_path" in e]
    assert len(layers) == 4  # every conv and fc layer
    want = "merge" if mixed == "merge" else "expand"
    assert all(e["mixed_path"] == want for e in layers)
    assert all(e["format"] == ("stride" if want == "merge" else "direct") for e in layers)
    if mixed == "auto":
        assert all(e["mixed_cost"]["expand"] < e["mixed_cost"]["merge"] for e in layers)
