"""The committed demo models (examples/digits): sparse as promised, accurate, bit-exact."""

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from snpu.compiler import check, runtime
from snpu.compiler.export import onnxruntime_run
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
