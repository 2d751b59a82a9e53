"""The whole compiler: ONNX -> program -> golden model, bit-exact with the int8 reference."""

import numpy as np
import pytest

from snpu.compiler import check, runtime
from snpu.compiler.artifact import Compiled
from snpu.compiler.pipeline import CompileOptions, compile_model
from snpu.errors import CompileError

from .models import TEST_CORE, inputs, tiny_cnn, tiny_mlp

MODELS = {"cnn": tiny_cnn, "mlp": tiny_mlp}
VARIANTS = {
    "sparse": dict(density=0.4),
    "groups": dict(density=0.6, group_size=4, group_small=0.2, group_max_small=1),
    "dense_mode": dict(density=0.4, dense=True),
    "host_conv": dict(density=0.5, force_host=("conv3",)),
}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("model", MODELS)
def test_golden_model_is_bit_exact_with_int8_reference(model, variant):
    if model == "mlp" and variant == "host_conv":
        pytest.skip("no conv in the MLP")
    m = MODELS[model]()
    c = compile_model(m, CompileOptions(config=TEST_CORE, **VARIANTS[variant]))
    xs = inputs(m, 3)
    reports = runtime.run_batch(c, xs)  # checks RAW/WAR races of the token protocol too
    agree = check.compare(c, xs, reports, onnxruntime=False)
    assert agree.bit_exact == 3, agree.mismatches
    assert all(r.core_cycles > 0 for r in reports)


def test_matrix_layers_are_tiled_on_the_small_core():
    c = compile_model(tiny_mlp(sizes=(200, 300, 10)), CompileOptions(config=TEST_CORE))
    # 200x300 int8 weights (60 kB) cannot sit in a 4 kB weight buffer at once
    layer = next(l for l in c.report["layers"] if l["node"] == "matmul0")
    assert layer["weight_tiles"] > 1
    x = inputs(tiny_mlp(sizes=(200, 300, 10)), 1)
    assert check.compare(c, x, runtime.run_batch(c, x), onnxruntime=False).bit_exact == 1


def test_sparse_program_takes_fewer_cycles_than_dense_mode():
    m = tiny_mlp(sizes=(128, 128, 128, 10))
    sparse = compile_model(m, CompileOptions(config=TEST_CORE, density=0.2))
    dense = compile_model(m, CompileOptions(config=TEST_CORE, density=0.2, dense=True))
    x = inputs(m, 1)
    rs, rd = runtime.run(sparse, x[0]), runtime.run(dense, x[0])
    np.testing.assert_array_equal(rs.outputs_int8["y"], rd.outputs_int8["y"])  # same numbers
    assert rs.mac_pairs < 0.3 * rd.mac_pairs
    assert rs.core_cycles < 0.6 * rd.core_cycles


def test_quantisation_error_against_onnxruntime_when_calibrated():
    """Unpruned, calibrated on the inputs themselves (no saturation): the int8 program
    follows onnxruntime's float result to a few output steps."""
    m = tiny_cnn()
    xs = inputs(m, 8)
    c = compile_model(m, CompileOptions(config=TEST_CORE, calibration=[{"x": x} for x in xs]))
    agree = check.compare(c, xs, runtime.run_batch(c, xs))
    assert agree.onnxruntime and agree.bit_exact == 8
    assert agree.max_rel_err < 0.1, agree.to_dict()
    assert agree.top1_agree >= 7, agree.to_dict()


def test_artifact_round_trip(tmp_path):
    m = tiny_cnn()
    c = compile_model(m, CompileOptions(config=TEST_CORE, density=0.5))
    c.save(tmp_path / "build")
    names = {p.name for p in (tmp_path / "build").iterdir()}
    assert {"source.onnx"} <= names and not any(n.endswith(".tmp") for n in names)
    back = Compiled.load(tmp_path / "build")
    assert back.config == c.config and back.report == c.report
    x = inputs(m, 1)[0]
    a, b = runtime.run(c, x), runtime.run(back, x)
    np.testing.assert_array_equal(a.outputs_int8["prob"], b.outputs_int8["prob"])
    assert a.core_cycles == b.core_cycles


def test_bad_options_are_compile_errors():
    with pytest.raises(CompileError, match="density"):
        compile_model(tiny_mlp(), CompileOptions(config=TEST_CORE, density=1.5))
    with pytest.raises(CompileError, match="calibration"):
        compile_model(tiny_mlp(), CompileOptions(config=TEST_CORE, calibration=[]))


def _pool_model(pool: dict, relu: bool, conv_reader: bool = False):
    """x -> 3x3 conv (ReLU or not) -> the pooling ``pool`` -> y; ``conv_reader``: a padded
    conv also reads the conv's output (the map then has a zero halo either way)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(5)
    H = helper.make_node
    inits = [numpy_helper.from_array((rng.standard_normal((16, 4, 3, 3)) * 0.4)
                                     .astype(np.float32), "w"),
             numpy_helper.from_array((rng.standard_normal((16, 16, 3, 3)) * 0.2)
                                     .astype(np.float32), "w2")]
    nodes = [H("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv")]
    src = "c"
    if relu:
        nodes.append(H("Relu", ["c"], ["r"], name="relu"))
        src = "r"
    nodes.append(H(pool.pop("op"), [src], ["p"], name="pool", **pool))
    outs = ["p"]
    if conv_reader:
        nodes.append(H("Conv", [src, "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"))
        outs.append("c2")
    g = helper.make_graph(nodes, "pool", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 4, 11, 13])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("case", ["max_after_relu", "max_signed", "max_signed_halo",
                                  "avg_exclude_pad_ceil"])
def test_padded_pooling_reads_the_zero_halo_only_where_zeros_are_exact(case):
    """A pooling's padding read from the map's zero halo gives every window the pooling's
    shape (one loop body per row); zeros stand for the padding only where that is exact:
    an average, or a maximum over a never-negative input.  Bit-exact either way."""
    from snpu.verif.core_model import decode_rom
    pool, relu, reader = {
        "max_after_relu": (dict(op="MaxPool", kernel_shape=[3, 3], strides=[2, 2],
                                pads=[1, 1, 1, 1]), True, False),
        "max_signed": (dict(op="MaxPool", kernel_shape=[3, 3], strides=[1, 1],
                            pads=[1, 1, 1, 1]), False, False),
        "max_signed_halo": (dict(op="MaxPool", kernel_shape=[3, 3], strides=[2, 2],
                                 pads=[1, 1, 1, 1]), False, True),
        "avg_exclude_pad_ceil": (dict(op="AveragePool", kernel_shape=[3, 3], strides=[2, 2],
                                      pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=0),
                                 False, False),
    }[case]
    m = _pool_model(pool, relu, reader)
    c = compile_model(m, CompileOptions(config=TEST_CORE, density=0.6))
    xs = inputs(m, 2)
    agree = check.compare(c, xs, runtime.run_batch(c, xs), onnxruntime=False)
    assert agree.bit_exact == 2, agree.mismatches
    windows = {(i.args["k1"], i.args["k2"])
               for s in c.segments if s.get("rom") for i in decode_rom(c.rom(s["rom"]))
               if i.op == "vred"}
    if case.startswith("max_signed"):  # clipped at the map's edges: the halo is not read
        assert (2, 2) in windows and (3, 3) in windows
    else:
        assert windows == {(3, 3)}


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pooling_of_several_channel_chunks_walks_them_inside_each_pixel_group(op):
    """A pooling whose channels take several chunks of the accumulators (60 channels: 32 +
    28 on the test core; averaging, whose parameters take room too, 16 + 16 + 16 + 12):
    each pixel group's chunks are tiles one after the other, the last
    at the pitch of a whole one, so the groups of a row are alike.  Race-free and
    bit-exact with the int8 reference."""
    from onnx import TensorProto, helper, numpy_helper
    H = helper.make_node
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array((rng.standard_normal((60, 4, 3, 3)) * 0.4).astype(np.float32), "w")
    kw = dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    if op == "AveragePool":
        kw["count_include_pad"] = 0
    nodes = [H("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             H("Relu", ["c"], ["r"], name="relu"), H(op, ["r"], ["p"], name="pool", **kw)]
    g = helper.make_graph(nodes, "pool", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 4, 11, 13])],
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, None)], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    c = compile_model(m, CompileOptions(config=TEST_CORE, density=0.6))
    assert next(r for r in c.report["layers"] if r["node"] == "pool")["channel_chunks"] >= 2
    xs = inputs(m, 2)
    agree = check.compare(c, xs, runtime.run_batch(c, xs, check_races=True), onnxruntime=False)
    assert agree.bit_exact == 2, agree.mismatches
