"""Random small graphs of core and host operators (tests/compiler/graph_fuzz.py): compile
-> run on the golden model never ends in a traceback; every result is bit-exact with the
int8 reference and follows onnxruntime within the int8 tolerance, or is one clear line.

``SNPU_FUZZ_MODELS=N`` sets how many seeds run (default 300, a few seconds);
``SNPU_FUZZ_SEED=S`` starts elsewhere.  A failure names its seed and the replay command."""

import os

import numpy as np
import pytest

from snpu.compiler import check, runtime
from snpu.compiler.pipeline import CompileOptions, compile_model
from snpu.errors import CompileError

from .graph_fuzz import random_model
from .models import TEST_CORE

COUNT = int(os.environ.get("SNPU_FUZZ_MODELS", "300"))
START = int(os.environ.get("SNPU_FUZZ_SEED", "0"))
#: largest |run - onnxruntime| / max |onnxruntime| accepted: int8 quantisation of a few
#: layers (measured on seeds 0-399: median 0.013, max 0.096)
TOLERANCE = 0.2


def _replay(seed: int) -> str:
    return (f"replay: python tests/compiler/graph_fuzz.py {seed} -o fuzz{seed}.onnx && "
            f"snpu compile fuzz{seed}.onnx -o fuzz{seed} && snpu run fuzz{seed}")


def test_random_graphs_compile_and_run_or_fail_clearly():
    ran, clear = 0, []
    for seed in range(START, START + COUNT):
        m = random_model(seed)
        rng = np.random.default_rng(seed)
        shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
        xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(2)]
        try:
            c = compile_model(m, CompileOptions(config=TEST_CORE,
                                                calibration=[{"x": x} for x in xs]))
            reports = runtime.run_batch(c, xs)
        except CompileError as e:
            assert "\n" not in str(e) and str(e), f"seed {seed}: {e!r}; {_replay(seed)}"
            clear.append(f"seed {seed}: {e}")
            continue
        except Exception as e:  # a traceback is the failure this test looks for
            pytest.fail(f"seed {seed}: {type(e).__name__}: {e}; {_replay(seed)}")
        agree = check.compare(c, xs, reports)
        assert agree.bit_exact == 2, f"seed {seed}: {agree.mismatches}; {_replay(seed)}"
        assert agree.max_rel_err <= TOLERANCE, f"seed {seed}: {agree.to_dict()}; {_replay(seed)}"
        ran += 1
    # the generator builds models the product must run: clear errors stay the exception
    assert ran >= 0.9 * COUNT, clear[:5]


def test_the_generator_is_replayable_and_mixes_devices():
    assert random_model(7).SerializeToString() == random_model(7).SerializeToString()
    devices = set()
    for seed in range(20):
        c = compile_model(random_model(seed), CompileOptions(config=TEST_CORE))
        devices |= {n.device for n in c.graph.nodes}
    assert devices == {"core", "host"}
