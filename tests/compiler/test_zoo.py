"""The model-zoo networks shipped in the onnx wheel (``onnx/backend/test/data/light``).

The fast suite runs the export round trip on two models and one model end to end on the
golden model; ``SNPU_ZOO=1`` (or ``-m slow``) compiles and runs all nine (about ten minutes).
"""

import os
from pathlib import Path

import numpy as np
import onnx
import pytest

from snpu.compiler import check, runtime
from snpu.compiler.export import onnxruntime_run, to_onnx
from snpu.compiler.frontend import input_arrays
from snpu.compiler.pipeline import CompileOptions, compile_model, reference_graph

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
ALL = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
       "shufflenet", "squeezenet", "vgg19", "zfnet512"]
FULL = bool(os.environ.get("SNPU_ZOO"))


def _input(g, seed=0):
    return np.random.default_rng(seed).standard_normal(g.tensor(g.inputs[0]).shape).astype(np.float32)


def test_zoo_is_complete():
    assert sorted(p.stem.removeprefix("light_") for p in ZOO.glob("light_*.onnx")) == ALL


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet"])
def test_exported_reference_graph_matches_onnxruntime_on_the_original(name):
    """IR -> ONNX export is faithful: folding constants and dropping no-ops change nothing."""
    src = (ZOO / f"light_{name}.onnx").read_bytes()
    # with the zoo's own weights (built by ConstantOfShape) against the untouched original
    original = onnx.load_from_string(src)
    g0 = reference_graph(src, CompileOptions())
    x = input_arrays(g0, _input(g0))
    want = onnxruntime_run(original, x)
    got = onnxruntime_run(to_onnx(g0), x)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def _compile_and_run(name, mesh=(1, 1)):
    c = compile_model(ZOO / f"light_{name}.onnx", CompileOptions(density=0.5, random_weights=0,
                                                                   mesh=mesh))
    x = [_input(c.graph)]
    agree = check.compare(c, x, runtime.run_batch(c, x))
    assert agree.bit_exact == 1, agree.mismatches
    assert agree.onnxruntime and np.isfinite(agree.max_abs_err)
    assert c.report["ops_on_core"] > c.report["ops_on_host"]
    return c


def test_squeezenet_end_to_end_on_the_golden_model():
    c = _compile_and_run("squeezenet")
    assert c.report["host_ops"] == ["Softmax"]
    dens = [l["density"] for l in c.report["layers"] if l.get("op") == "Conv" and "density" in l]
    assert dens and max(dens) <= 0.51


@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="set SNPU_ZOO=1 to compile and run all nine zoo models")
@pytest.mark.parametrize("name", ALL)
def test_every_zoo_model_end_to_end(name):
    _compile_and_run(name)


@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="set SNPU_ZOO=1 to run the zoo models on golden arrays")
@pytest.mark.parametrize("mesh", [(2, 2), (4, 4)], ids=["2x2", "4x4"])
@pytest.mark.parametrize("name", ALL)
def test_every_zoo_model_on_a_golden_array(name, mesh):
    """Split across the array, bit-exact with the int8 reference (races checked)."""
    c = _compile_and_run(name, mesh)
    assert any("roms" in s for s in c.segments)
