"""Issue 14: ordinary models run end to end — host operators on onnxruntime, batches and
ReLU6 and large global pooling on the core.  Each model compiles, runs on the golden model
bit-exact with the int8 reference, and follows onnxruntime's float result."""

import numpy as np
import pytest

from snpu.compiler import check, runtime
from snpu.compiler.pipeline import CompileOptions, compile_model

from . import every_model
from .models import TEST_CORE

#: what each model must put on the host (everything else runs on the core)
HOST_OPS = {
    "lstm_head": ["LSTM", "Squeeze"], "attention": ["MatMul", "Softmax", "Transpose"],
    "where_gate": ["Greater", "Neg", "Where"],
    "sigmoid_tanh": ["HardSigmoid", "LeakyRelu", "Sigmoid", "Tanh"],
    "resize_upsample": ["Resize"],
    "layernorm_softmax": ["LayerNormalization", "Softmax"],
    "transpose_gather_slice": ["Einsum", "Gather", "Pad", "Slice", "Split", "Transpose"],
    "batch_mlp": [], "batch_cnn": [], "depthwise_relu6": [], "grouped_conv": [],
    "global_pool_large": [], "avgpool_whole_map": [], "argmax_output": ["ArgMax"],
}


def _inputs(m, n, seed=1):
    rng = np.random.default_rng(seed)
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


@pytest.mark.parametrize("name", every_model.MODELS)
def test_model_runs_bit_exact_and_follows_onnxruntime(name):
    m = every_model.build(name)
    xs = _inputs(m, 3)
    c = compile_model(m, CompileOptions(config=TEST_CORE, calibration=[{"x": x} for x in xs]))
    assert c.report["host_ops"] == HOST_OPS[name]
    for layer in c.report["layers"]:
        assert (layer["device"] == "host") == ("why_host" in layer), layer
    reports = runtime.run_batch(c, xs)
    agree = check.compare(c, xs, reports)
    assert agree.bit_exact == 3, agree.mismatches
    if name == "argmax_output":  # an index: the run's and onnxruntime's argmax agree
        assert agree.top1_agree == agree.images
    else:
        assert agree.top1_agree >= 0.6 * agree.images, agree.to_dict()
        assert agree.max_rel_err < 0.15, agree.to_dict()
    assert all(r.device_seconds.keys() == {"core", "host"} for r in reports)


def test_batched_layers_run_on_the_core_as_one_image_loop():
    """A batch stays on the core: each layer runs once per image; the re-roller makes the
    repetition a hardware loop, and the weights are stored once."""
    m = every_model.build("batch_cnn")
    c = compile_model(m, CompileOptions(config=TEST_CORE))
    assert c.report["ops_on_host"] == 0
    layer = next(l for l in c.report["layers"] if l["node"] == "c1")
    assert layer["batch"] == 3
    seg = c.report["segments"][0]
    assert seg["instructions"] < seg["dispatched_instructions"]  # the image loop re-rolled
    weights = [bytes(c.image.data[r.addr:r.end]) for r in c.image.regions.values()
               if r.kind == "weights"]
    assert weights and len(set(weights)) == len(weights)  # each layer's weights stored once


def test_relu6_is_fused_with_the_clip_as_the_scale():
    m = every_model.build("depthwise_relu6")
    c = compile_model(m, CompileOptions(config=TEST_CORE))
    g = c.graph
    pw1 = g.node("pw1")
    assert pw1.meta["relu"] and pw1.meta["clip_max"] == 6.0
    assert g.tensor(pw1.outputs[0]).scale == pytest.approx(6.0 / 127)


@pytest.mark.parametrize("overlap", [False, True, None], ids=["segments", "pipelined", "auto"])
def test_dispatch_modes_give_the_same_bits(overlap):
    """Seed 004's dispatch: pipelining a batch across core and host (threads, one segment
    per device at a time) changes only the timing, never a result."""
    m = every_model.build("sigmoid_tanh")
    xs = _inputs(m, 4)
    c = compile_model(m, CompileOptions(config=TEST_CORE))
    assert [s["kind"] for s in c.segments] == ["core", "host", "core"]
    reports = runtime.run_batch(c, xs, overlap=overlap)
    assert check.compare(c, xs, reports, onnxruntime=False).bit_exact == 4
    d = reports[0].dispatch
    if overlap is not None:
        assert d["pipelined"] is overlap
    assert d["inputs"] == 4 and d["busy_seconds"]["core"] > 0 and d["busy_seconds"]["host"] > 0
    for r in reports:  # every input went through every segment, in order
        assert [s["segment"] for s in r.segments] == [0, 1, 2]


def test_symbolic_batch_takes_the_batch_option():
    m = every_model.build("dynamic_batch")
    c = compile_model(m, CompileOptions(config=TEST_CORE, batch=4))
    assert c.graph.tensor("x").shape == (4, 3, 10, 10) and c.report["ops_on_host"] == 1
    xs = [np.random.default_rng(k).standard_normal((4, 3, 10, 10)).astype(np.float32) for k in range(2)]
    agree = check.compare(c, xs, runtime.run_batch(c, xs))
    assert agree.bit_exact == 2 and agree.images == 8, agree.to_dict()
    assert agree.top1_agree >= 6
