"""Compiler output on the RTL: ROM + memory images from real models, through cocotb + Verilator,
bit-exact with the golden model and the compiler's int8 reference."""

import sys
from pathlib import Path

import numpy as np
import pytest

from snpu.compiler import check, runtime
from snpu.compiler.passes.neurons import NeuronOptions
from snpu.compiler.pipeline import CompileOptions, compile_model
from snpu.config import CoreConfig
from snpu.verif import isa

from ..compiler.models import TEST_CORE, fire_cnn, inputs, tiny_cnn

pytestmark = pytest.mark.rtl

DIGITS = Path(__file__).resolve().parents[2] / "examples" / "digits"


def _rtl_matches(c, xs):
    golden = runtime.run_batch(c, xs, sim="golden")
    rtl = runtime.run_batch(c, xs, sim="rtl")  # raises on any counter / memory mismatch
    for g, r in zip(golden, rtl):
        for k in g.outputs_int8:
            np.testing.assert_array_equal(r.outputs_int8[k], g.outputs_int8[k])
        assert r.core_cycles > 0 and r.mac_pairs == g.mac_pairs
    assert check.compare(c, xs, rtl, onnxruntime=False).bit_exact == len(xs)
    return rtl


def test_digits_cnn_on_the_rtl():
    sys.path.insert(0, str(DIGITS))
    from train import split

    xtr, _, xte, yte = split()
    cfg = CoreConfig.load(DIGITS / "core.json")
    assert cfg == TEST_CORE  # one Verilator build serves all RTL tests
    c = compile_model(DIGITS / "digits_cnn.onnx",
                      CompileOptions(config=cfg, calibration=[{"image": x[None]} for x in xtr[:16]]))
    rtl = _rtl_matches(c, [x[None] for x in xte[:4]])
    assert [check.top1(r.outputs["logits"]) for r in rtl] == list(yte[:4])


@pytest.mark.parametrize("build", [lambda: None, lambda: fire_cnn(4), lambda: tiny_cnn(4)],
                         ids=["digits", "fire_cnn", "tiny_cnn"])
def test_programs_compiled_for_speed_on_the_rtl(build):
    """``--optimize speed``: precise tokens, loops that leave their last iteration's tokens
    to the code after them, carriers, channels drained at halt, loops over ping-pong groups
    that flip halves, loops whose first iterations take their tokens from the words before
    them -- bit-exact on the RTL, with the golden model's cycle counters."""
    sys.path.insert(0, str(DIGITS))
    from train import split

    m = build()
    if m is None:
        xtr, _, xte, _ = split()
        c = compile_model(DIGITS / "digits_cnn.onnx",
                          CompileOptions(config=TEST_CORE, optimize="speed",
                                         calibration=[{"image": x[None]} for x in xtr[:16]]))
        xs = [x[None] for x in xte[:2]]
    else:
        c = compile_model(m, CompileOptions(config=TEST_CORE, density=0.5, optimize="speed"))
        xs = inputs(m, 2)
    assert c.report["options"]["optimize"] == "speed"
    if m is not None and m.graph.name == "fire_cnn":  # token no-ops and carriers: tokens a
        # loop's last iteration left
        assert any(s.get("token_nops") for s in c.report["segments"] if s["kind"] == "core")
    words = [isa.decode(w) for s in c.segments if s["kind"] == "core" for w in c.rom(s["rom"])]
    assert any(i.op == "loop" and i.args["flip"] for i in words)
    _rtl_matches(c, xs)


def test_digits_cnn_on_a_2x2_array_on_the_rtl():
    """The compiler's array output (layers split across 4 cores, activations in local
    memories moved with send / recv) on the RTL array: bit-exact, faster than one core."""
    sys.path.insert(0, str(DIGITS))
    from train import split

    xtr, _, xte, yte = split()
    calib = [{"image": x[None]} for x in xtr[:16]]
    c = compile_model(DIGITS / "digits_cnn.onnx",
                      CompileOptions(config=TEST_CORE, calibration=calib, mesh=(2, 2)))
    xs = [x[None] for x in xte[:3]]
    rtl = _rtl_matches(c, xs)
    assert [check.top1(r.outputs["logits"]) for r in rtl] == list(yte[:3])
    seg = rtl[0].segments[0]
    assert seg["device"] == "array" and seg["network"]["flits"] > 0
    one = compile_model(DIGITS / "digits_cnn.onnx", CompileOptions(config=TEST_CORE, calibration=calib))
    assert rtl[0].core_cycles < 0.75 * runtime.run_batch(one, xs[:1])[0].core_cycles


def test_local_windows_credits_and_concatenations_on_a_2x2_array_on_the_rtl():
    """Fire modules on the RTL array: each core keeps its window of every map, bytes of dead
    maps are reused behind credits (with zeroed halos), both concatenations stay local; the
    13-row maps are split into blocks of pixels (rows two cores share)."""
    m = fire_cnn(seed=2, size=13)
    c = compile_model(m, CompileOptions(config=TEST_CORE, density=0.6, mesh=(2, 2)))
    g = c.graph
    assert any(p.cols for n in g.nodes for p in n.meta.get("parts", []))
    assert {g.meta["storage_root"][f"cat{k}"] for k in range(2)} <= set(g.meta["local"])
    assert c.segments[0]["noc"].get("credits", 0) > 0
    _rtl_matches(c, inputs(m, 2))


def test_tiles_of_rows_and_channels_on_a_2x2_array_on_the_rtl():
    """``--split tiles`` on the RTL array: the 16-channel head layer of fire_cnn splits into 2x2
    blocks of rows x channels, each core storing its tile into shared memory between the
    other cores' tiles; the readers wait for every writer's flag."""
    m = fire_cnn(seed=4, size=10)
    c = compile_model(m, CompileOptions(config=TEST_CORE, density=0.5, mesh=(2, 2), split="tiles"))
    tiled = [n for n in c.graph.nodes if n.meta.get("split", {}).get("kind") == "tiles"]
    assert [n.name for n in tiled] == ["head"] and len(tiled[0].meta["parts"]) == 4
    _rtl_matches(c, inputs(m, 1))


@pytest.mark.parametrize("dense", [False, True], ids=["sparse", "dense_mode"])
def test_every_core_operator_on_the_rtl(dense):
    """tiny_cnn: conv (grouped, 1x1), max / average / global pooling, residual add (its
    scales in the parameter memory, ``vewp``), concat, flatten, Gemm, and a host Softmax
    between core segments' outputs."""
    m = tiny_cnn()
    c = compile_model(m, CompileOptions(config=TEST_CORE, density=0.5, dense=dense))
    ops = {isa.decode(w).op for s in c.segments if s["kind"] == "core" for w in s["words"]}
    assert {"vewp", "vred", "req"} <= ops
    _rtl_matches(c, inputs(m, 2))


# The sparse processing unit's settings and the mixed-format paths, through the compiler:
# (weight density, neuron options) -- at 5 % density the weights are stride-coded, so the
# mixed direct x stride path is taken.
NEURON_SETTINGS = {
    "threshold": (0.2, NeuronOptions(threshold=5)),
    "groups": (0.2, NeuronOptions(group=4, t3=2, t4=1)),
    "threshold+groups": (0.2, NeuronOptions(threshold=2, group=8, t3=3, t4=4)),
    "expand": (0.05, NeuronOptions(mixed="expand")),
    "merge": (0.05, NeuronOptions(mixed="merge")),
}


@pytest.mark.parametrize("setting", NEURON_SETTINGS)
def test_neuron_settings_on_the_rtl(setting):
    """Each setting of the sparse processing unit and each mixed path: the compiled digits
    CNN on the RTL equals the golden model and the int8 reference bit for bit."""
    sys.path.insert(0, str(DIGITS))
    from train import split

    xtr, _, xte, _ = split()
    density, opts = NEURON_SETTINGS[setting]
    c = compile_model(DIGITS / "digits_cnn.onnx",
                      CompileOptions(config=TEST_CORE, density=density, neurons=opts,
                                     calibration=[{"image": x[None]} for x in xtr[:16]]))
    layers = [entry for entry in c.report["layers"] if entry["op"] in ("Conv", "Gemm")]
    if opts.group:
        assert any(isinstance(entry.get("neuron_groups"), list) for entry in layers)
    if opts.mixed != "auto":
        # layers whose weights encode smallest as strides: merged as strides (claim 10), or
        # expanded at compile time and stored direct (claim 9)
        mixed = [e for e in layers if "mixed_path" in e]
        assert mixed and all(e["mixed_path"] == opts.mixed for e in mixed)
        assert all(e["format"] == ("stride" if opts.mixed == "merge" else "direct") for e in mixed)
    _rtl_matches(c, [x[None] for x in xte[:2]])


@pytest.mark.parametrize("name", ["batch_cnn", "depthwise_relu6", "global_pool_large",
                                  "avgpool_whole_map", "sigmoid_tanh"])
def test_ordinary_models_on_the_rtl(name):
    """Issue 14's models through the RTL: a batch as an image loop, ReLU6 by the scale,
    global pooling (and an AveragePool over the whole map) tile by tile into a running
    total, and host activations on onnxruntime between core segments."""
    from ..compiler import every_model

    m = every_model.build(name)
    rng = np.random.default_rng(3)
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(2)]
    c = compile_model(m, CompileOptions(config=TEST_CORE, density=0.5))
    if name == "batch_cnn":
        # its convolutions' weight tiles are loops flipping the weights' halves
        loops = [i for s in c.segments if s["kind"] == "core"
                 for i in map(isa.decode, c.rom(s["rom"])) if i.op == "loop"]
        assert any(i.args["flip"] & 2 for i in loops)
    _rtl_matches(c, xs)


@pytest.mark.parametrize("images", [4, 3])
def test_a_batch_split_across_a_2x2_array_on_the_rtl(images):
    """A batch of 4 on a 2x2 array: each core runs whole layers on its image (data parallel,
    no activation moves).  A batch of 3: each image on its own cores (1, 1 and 2), the
    two-core group splitting every layer with its maps in local memory.  Bit-exact on the
    RTL array."""
    from ..compiler import every_model

    m = every_model.build("batch_cnn")
    for vi in (m.graph.input[0], m.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_value = images
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((images, 3, 8, 8)).astype(np.float32) for _ in range(2)]
    c = compile_model(m, CompileOptions(config=TEST_CORE, density=0.5, mesh=(2, 2)))
    parts = [p for n in c.graph.nodes for p in n.meta.get("parts", [])]
    if images == 4:
        assert all(n.meta["split"]["kind"] == "batch" for n in c.graph.nodes if "split" in n.meta)
    else:
        assert {p.image for p in parts} == {0, 1, 2} and c.graph.meta["local"]
        assert any(p.kind == "rows" for p in parts)
    rtl = _rtl_matches(c, xs)
    assert rtl[0].segments[0]["device"] == "array"


def test_a_pipeline_of_layers_on_a_2x2_array_on_the_rtl():
    """``--split pipeline`` on the RTL array: a stream of 3 images through stages of layers,
    one core each, image by image; each stage copies its weights, indices and parameter
    rows into its local memory before its first image and loads them from there."""
    from ..compiler import every_model

    m = every_model.build("batch_cnn")
    xs = [np.random.default_rng(5).standard_normal((3, 3, 8, 8)).astype(np.float32)]
    c = compile_model(m, CompileOptions(config=TEST_CORE, density=0.5, mesh=(2, 2),
                                        split="pipeline"))
    assert {n.meta["split"]["kind"] for n in c.graph.nodes if "split" in n.meta} == {"pipeline"}
    assert c.segments[0]["resident_bytes"] > 0
    _rtl_matches(c, xs)


def test_layers_larger_than_every_buffer_split_and_searched_on_the_rtl():
    """Issue 12: layers whose operands exceed the core's on-chip memory become pieces
    (rows of a convolution, channels of a pooling), the order search interleaves the
    pieces of independent branches, and the linked program runs bit-exact on the RTL."""
    from onnx import TensorProto, helper, numpy_helper

    from snpu.compiler.passes.schedule import ScheduleOptions
    from snpu.compiler.passes.split import onchip_bytes

    rng = np.random.default_rng(5)
    w = lambda name, *s: numpy_helper.from_array(  # noqa: E731
        (rng.standard_normal(s) * 0.2).astype(np.float32), name)
    H = helper.make_node
    nodes = [H("Conv", ["x", "w1"], ["c1"], pads=[1] * 4), H("Relu", ["c1"], ["r1"]),
             H("MaxPool", ["r1"], ["p"], kernel_shape=[3, 3], pads=[1] * 4),
             H("Conv", ["r1", "w2"], ["c2"], pads=[1] * 4), H("Relu", ["c2"], ["r2"]),
             H("Concat", ["p", "r2"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "big_layers",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 44, 44])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 44, 44])],
                          [w("w1", 16, 8, 3, 3), w("w2", 16, 16, 3, 3)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    xs = [rng.standard_normal((1, 8, 44, 44)).astype(np.float32)]
    c = compile_model(m, CompileOptions(config=TEST_CORE, density=0.5, calibration=[{"x": xs[0]}],
                                        schedule=ScheduleOptions("search")))
    split = c.report["split"]
    assert split["threshold"] == onchip_bytes(TEST_CORE)
    kinds = {d for s in split["nodes"] for d in s["dimensions"]}
    assert {"rows", "channels"} <= kinds and all(s["whole_bytes"] > split["threshold"]
                                                 for s in split["nodes"])
    assert c.report["schedule"]["subgraphs"][0]["blocks"]
    _rtl_matches(c, xs)


def test_a_tight_memory_budget_on_the_rtl():
    """Issue 13: a U-Net-like model under a budget below its unplanned footprint: the arena
    shares bytes, halos on reused bytes are zeroed, long skips are swapped to far memory and
    back by Copy kernels (compressed: stc out, ldc back); bit-exact on the RTL,
    whose RAM makes the far region slower as the golden model does (a slower far memory
    costs the RTL cycles too)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import unet

    from snpu.compiler.passes.memory_budget import MemoryOptions
    from snpu.verif.tb import rtl_sim

    m = unet.build(0, depth=3, channels=8, size=8)
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((1, 8, 8, 8)).astype(np.float32)]
    opts = dict(config=TEST_CORE, calibration=[{"x": xs[0]}])
    free = compile_model(m, CompileOptions(**opts, memory=MemoryOptions(budget=1 << 30)))
    budget = int(free.report["memory"]["fast_bytes"] * 0.8)
    c = compile_model(m, CompileOptions(**opts, memory=MemoryOptions(budget=budget,
                                                                     compress="all")))
    mem = c.report["memory"]
    assert mem["swapped"] and mem["zero_halo"] and mem["fast_bytes"] <= budget
    assert any(s["compressed"] for s in mem["swapped"])
    _rtl_matches(c, xs)
    seg = next(s for s in c.graph.meta["segments"] if s["kind"] == "core")
    words, image = c.rom(seg["rom"]), c.image
    slow, fast = rtl_sim.run_many([rtl_sim.Job(words, image.copy_image(), seg["rom"])] * 2,
                                  c.config, far={"latency": 300, "beat_cycles": 8})[0], \
        rtl_sim.run_many([rtl_sim.Job(words, image.copy_image(), seg["rom"])], c.config,
                         far={"latency": 0, "beat_cycles": 1})[0]
    assert slow.ok and fast.ok and slow.cycles > fast.cycles


def test_maps_kept_in_far_memory_on_the_rtl():
    """Issue 13: a budget below the smallest plan swaps alone reach: a map stays in far
    memory (its producer stores it there; a convolution reads it a band of rows at a time
    through a staging buffer in fast memory, the others directly), beside swaps; bit-exact
    on the RTL, whose RAM makes the far region slower as the golden model does."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import unet

    from snpu.compiler.passes.memory_budget import BudgetError, MemoryOptions

    m = unet.build(0, depth=3, channels=8, size=16)
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((1, 8, 16, 16)).astype(np.float32)]
    opts = dict(config=TEST_CORE, calibration=[{"x": xs[0]}])
    with pytest.raises(BudgetError) as e:
        compile_model(m, CompileOptions(**opts, memory=MemoryOptions(budget=1,
                                                                     far_resident=False)))
    budget = e.value.smallest - 64
    c = compile_model(m, CompileOptions(**opts, memory=MemoryOptions(budget=budget,
                                                                     far_reads="staged")))
    mem = c.report["memory"]
    assert mem["fast_bytes"] <= budget and mem["far_resident"] and mem["swapped"]
    assert any(n.meta.get("far_read", {}).get("mode") == "staged" for n in c.graph.nodes)
    _rtl_matches(c, xs)


def test_a_memory_plan_in_local_memory_on_the_rtl():
    """Issue 13 on the memory hierarchy of the tiled array's core: the fast memory is the
    core's local memory (maps live there by lifetime, halos zeroed: local memory holds
    whatever the last run left), the graph's input and output and the maps that do not fit
    in far memory; two inputs in one simulation, bit-exact on the RTL."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import unet

    from snpu.compiler.passes.memory_budget import MemoryOptions
    from snpu.verif import isa

    m = unet.build(0, depth=3, channels=8, size=16)
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((1, 8, 16, 16)).astype(np.float32) for _ in range(2)]
    opts = dict(config=TEST_CORE, calibration=[{"x": x} for x in xs])
    c = compile_model(m, CompileOptions(**opts, memory=MemoryOptions(budget=8000,
                                                                     fast="local")))
    mem = c.report["memory"]
    assert mem["fast_memory"] == "local" and 0 < mem["fast_bytes"] <= 8000
    assert mem["far_resident"] and mem["zero_halo"]
    layouts = c.graph.meta["layouts"]
    assert layouts["x"].base < isa.LOCAL_BASE
    assert any(L.base >= isa.LOCAL_BASE for L in layouts.values())
    _rtl_matches(c, xs)
