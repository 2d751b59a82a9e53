"""Issue 13 (seed 001) in the compiler: the activations' arena under ``--memory-budget``,
swaps to far memory as ``Copy`` kernels, zeroed halos on reused bytes, the memory profile,
the far memory's timing.  Every plan runs on the golden model bit-exact with the int8
reference (which knows nothing of arenas or swaps)."""

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from snpu.cli import main
from snpu.compiler import check, runtime
from snpu.compiler.passes.memory_budget import MemoryOptions
from snpu.compiler.pipeline import CompileOptions, compile_model
from snpu.errors import CompileError
from snpu.verif import timing

from .models import TEST_CORE

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import branchy  # noqa: E402
import unet  # noqa: E402


def _compile(m, budget, x_shape, n=2, **options):
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal(x_shape).astype(np.float32) for _ in range(n)]
    memory = MemoryOptions(budget=budget, **options.pop("memory", {}))
    c = compile_model(m, CompileOptions(config=TEST_CORE, calibration=[{"x": x} for x in xs],
                                        memory=memory, **options))
    return c, xs


def _bit_exact(c, xs):
    reps = runtime.run_batch(c, xs)
    agree = check.compare(c, xs, reps)
    assert agree.bit_exact == len(xs), agree.mismatches
    return reps


@pytest.fixture(scope="module")
def unet_model():
    return unet.build(0, depth=4, channels=8, size=12)


@pytest.fixture(scope="module")
def unet_unplanned(unet_model):
    """The plan with room to spare: an arena, no swaps."""
    return _compile(unet_model, 1 << 30, (1, 8, 12, 12))


def test_an_arena_without_swaps_shares_bytes_and_stays_bit_exact(unet_model, unet_unplanned):
    c, xs = unet_unplanned
    mem = c.report["memory"]
    assert mem["swapped"] == [] and mem["far_bytes"] == 0
    # tensors whose lifetimes do not overlap share bytes: less than a region per tensor
    plain = compile_model(unet_model, CompileOptions(config=TEST_CORE))
    regions = sum(r.size for r in plain.image.regions.values() if r.name.startswith("act:"))
    assert mem["fast_bytes"] < 0.7 * regions and mem["arena_bytes"] < mem["peak_before"] * 1.2
    assert mem["fast_bytes"] >= mem["peak_before"]
    assert len(mem["profile_before"]) == len(mem["profile_after"])
    # halos on reused bytes are zeroed by the producing kernel
    assert mem["zero_halo"]
    _bit_exact(c, xs)


def test_a_tight_budget_swaps_long_skips_and_stays_bit_exact(unet_model, unet_unplanned):
    free = unet_unplanned[0].report["memory"]
    budget = int(free["fast_bytes"] * 0.75)
    c, xs = _compile(unet_model, budget, (1, 8, 12, 12))
    mem = c.report["memory"]
    assert mem["fast_bytes"] <= budget < free["fast_bytes"]
    assert mem["peak_after"] < mem["peak_before"]
    swapped = {s["tensor"] for s in mem["swapped"]}
    assert swapped and swapped <= {"enc0_y", "enc1_y", "enc2_y"}  # the skips, not the chain
    copies = [n for n in c.graph.nodes if n.op == "Copy"]
    assert {n.meta["memory"] for n in copies} == {"reduction", "restoration"}
    far = [r for r in c.image.regions.values() if r.kind == "far"]
    assert len(far) == 1 and far[0].size >= mem["far_bytes"] > 0
    # the restored copies are what the late consumers read
    for n in c.graph.nodes:
        if n.name.startswith("skip"):
            assert any(i.endswith("@back") for i in n.inputs) == (
                f"enc{n.name[-1]}_y" in swapped)
    _bit_exact(c, xs)


def test_a_budget_below_the_minimum_is_one_error_giving_the_smallest_that_works(unet_model):
    with pytest.raises(CompileError) as e:
        _compile(unet_model, 1000, (1, 8, 12, 12))
    msg = str(e.value)
    assert "--memory-budget 1000" in msg and "give a budget of" in msg
    smallest = int(msg.rsplit("give a budget of ", 1)[1].split()[0])
    c, xs = _compile(unet_model, smallest, (1, 8, 12, 12), n=1)
    assert c.report["memory"]["fast_bytes"] <= smallest
    _bit_exact(c, xs)


def test_the_distance_baseline_swaps_without_slack_analysis(unet_model, unet_unplanned):
    budget = int(unet_unplanned[0].report["memory"]["fast_bytes"] * 0.8)
    c, xs = _compile(unet_model, budget, (1, 8, 12, 12), n=1,
                     memory={"strategy": "distance"})
    assert c.report["memory"]["swapped"] and c.report["memory"]["fast_bytes"] <= budget
    _bit_exact(c, xs)


def test_concatenations_pieces_and_a_batch_under_a_budget():
    """Branchy blocks (concatenated slices share their root's arena bytes), operators split
    into pieces, and a batch of two images (copies run per image)."""
    m = branchy.build(seed=2, blocks=2, channels=16, size=8)
    free, _ = _compile(m, 1 << 30, (1, 16, 8, 8), n=1, split_threshold=2000)
    budget = free.report["memory"]["fast_bytes"]
    c, xs = _compile(m, budget, (1, 16, 8, 8), split_threshold=2000)
    assert c.report["split"]["nodes"]
    _bit_exact(c, xs)
    u = unet.build(1, depth=3, channels=8, size=8)
    b = onnx.helper.make_tensor_value_info  # batch 2 via a symbolic dimension
    u.graph.input[0].CopyFrom(b("x", onnx.TensorProto.FLOAT, ["N", 8, 8, 8]))
    u.graph.output[0].CopyFrom(b("y", onnx.TensorProto.FLOAT, ["N", 8, 8, 8]))
    free, _ = _compile(u, 1 << 30, (2, 8, 8, 8), n=1, batch=2)
    c, xs = _compile(u, int(free.report["memory"]["fast_bytes"] * 0.85), (2, 8, 8, 8), n=1,
                     batch=2)
    assert c.report["memory"]["swapped"]
    _bit_exact(c, xs)


def test_a_mesh_refuses_a_memory_budget(unet_model):
    with pytest.raises(CompileError, match="--memory-budget plans the memory of one core"):
        compile_model(unet_model, CompileOptions(config=TEST_CORE, mesh=(2, 1),
                                                 memory=MemoryOptions(budget=1 << 20)))


def test_far_memory_is_slower_and_only_there():
    far = timing.FarMemory(lo=1 << 16, hi=1 << 17, latency=40, beat_cycles=2)
    near = np.arange(4) * 256
    assert far.extra(near, 256, 8, write=False) == 0
    rows = (1 << 16) + np.arange(4) * 256
    # 32 beats per row, 2 bursts: one more cycle per beat and 40 per burst when reading
    assert far.extra(rows, 256, 8, write=False) == 4 * (32 + 2 * 40)
    assert far.extra(rows, 256, 8, write=True) == 4 * 32


def test_swapping_costs_far_memory_cycles(unet_model, unet_unplanned):
    """The same planned program is slower when its far region is slower."""
    budget = int(unet_unplanned[0].report["memory"]["fast_bytes"] * 0.75)
    c, xs = _compile(unet_model, budget, (1, 8, 12, 12), n=1)
    from snpu.verif import golden

    seg = next(s for s in c.graph.meta["segments"] if s["kind"] == "core")
    words = c.rom(seg["rom"])
    cycles = {}
    for latency in (0, 200):
        image = c.image.copy_image()
        far = timing.FarMemory.of_image(image, latency=latency, beat_cycles=1 + latency // 50)
        cycles[latency] = golden.run_image(words, image, c.config, far=far).stats.cycles
    assert cycles[200] > cycles[0]


def test_cli_memory_budget_and_profile(tmp_path, unet_model):
    onnx.save(unet_model, tmp_path / "u.onnx")
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "u.onnx"), "-o", str(tmp_path / "out"),
                                  "--memory-budget", "30000", "--far-latency", "300",
                                  "--memory-profile", str(tmp_path / "p.png")])
    assert r.exit_code == 0, r.output
    assert "memory plan:" in r.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["memory"]["far_memory"] == {"latency": 300, "beat_cycles": 2}
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "u.onnx"), "-o", str(tmp_path / "o2"),
                                  "--memory-profile", str(tmp_path / "q.png")])
    assert r.exit_code == 1 and "give --memory-budget too" in r.output
    assert not (tmp_path / "q.png").exists() and not (tmp_path / "o2").exists()
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "u.onnx"), "-o", str(tmp_path / "o3"),
                                  "--memory-budget", "100"])
    assert r.exit_code == 1 and "give a budget of" in r.output and "Traceback" not in r.output
    # below what swaps reach: maps kept in far memory, or (without) the smallest swap plan
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "u.onnx"), "-o", str(tmp_path / "o4"),
                                  "--memory-budget", "4000", "--far-reads", "direct"])
    assert r.exit_code == 0 and "kept in far memory: " in r.output, r.output
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "u.onnx"), "-o", str(tmp_path / "o5"),
                                  "--memory-budget", "4000", "--no-far-resident"])
    assert r.exit_code == 1 and "give a budget of" in r.output and not (tmp_path / "o5").exists()
    # the core's local memory as the fast memory: the budget defaults to its size
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "u.onnx"), "-o", str(tmp_path / "o6"),
                                  "--fast-memory", "local", "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "o6" / "report.json").read_text())
    assert report["memory"]["fast_memory"] == "local"
    assert report["memory"]["budget"] == 65536  # the default core's local memory


def test_a_residual_add_writes_over_the_input_that_dies_there():
    """A bottleneck-like block: the Add's output takes the storage of the branch result it
    consumes last (each pixel block is loaded before it is stored at the same place)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)
    w = lambda name, *s: numpy_helper.from_array(  # noqa: E731
        (rng.standard_normal(s) * 0.3).astype(np.float32), name)
    H = helper.make_node
    nodes = [H("Conv", ["x", "w0"], ["a"], pads=[1] * 4), H("Relu", ["a"], ["ar"]),
             H("Conv", ["ar", "w1"], ["b"], pads=[1] * 4), H("Relu", ["b"], ["br"]),
             H("Conv", ["br", "w2"], ["c"]), H("Add", ["c", "ar"], ["s"]), H("Relu", ["s"], ["sr"]),
             H("Conv", ["sr", "w3"], ["y"], pads=[1] * 4)]
    g = helper.make_graph(nodes, "residual",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 10, 10])],
                          [w("w0", 16, 8, 3, 3), w("w1", 8, 16, 3, 3), w("w2", 16, 8, 1, 1),
                           w("w3", 8, 16, 3, 3)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    c, xs = _compile(m, 1 << 30, (1, 8, 10, 10))
    mem = c.report["memory"]
    (out, over), = [p for p in mem["in_place"] if p[0] == "sr"] or [(None, None)]
    assert out == "sr" and over in ("c", "ar")
    assert mem["peak_before"] < mem["peak_plain"]
    assert c.layouts["sr"].base == c.layouts[over].base
    _bit_exact(c, xs)


def test_a_swap_across_a_host_subgraph(unet_model, unet_unplanned):
    """A node forced to the host splits the core program in two: a skip written by the
    first core subgraph is swapped out there and restored in the second."""
    budget = int(unet_unplanned[0].report["memory"]["fast_bytes"] * 0.75)
    c, xs = _compile(unet_model, budget, (1, 8, 12, 12), force_host=("dec1",))
    segs = [s["kind"] for s in c.graph.meta["segments"]]
    assert segs.count("core") == 2 and "host" in segs
    subgraph = {v: k for k, sg in enumerate(c.graph.meta["subgraphs"]) for v in sg["nodes"]}
    swapped = [s["tensor"] for s in c.report["memory"]["swapped"]]
    across = [t for t in swapped if subgraph[f"swap_out:{t}"] != subgraph[f"swap_in:{t}"]]
    assert across, swapped
    _bit_exact(c, xs)


def test_random_graphs_under_memory_plans():
    """The graph fuzzer's random models (core and host operators) under a plan with room to
    spare (arena, outputs in place) and under the smallest budget the error for a 1-byte
    budget names (as many swaps as help): bit-exact.  ``SNPU_FUZZ_MODELS`` scales
    the count (default: 60 seeds here)."""
    import os

    from snpu.compiler.passes.memory_budget import BudgetError

    from .graph_fuzz import random_model

    count = max(1, int(os.environ.get("SNPU_FUZZ_MODELS", "300")) // 5)
    planned = swapped = 0
    for seed in range(count):
        m = random_model(seed)
        rng = np.random.default_rng(seed)
        shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
        xs = [rng.standard_normal(shape).astype(np.float32)]
        opts = dict(config=TEST_CORE, calibration=[{"x": x} for x in xs])
        try:
            free = compile_model(m, CompileOptions(**opts, memory=MemoryOptions(budget=1 << 30)))
        except CompileError as e:  # the fuzzer's clear errors (tested there)
            assert not isinstance(e, BudgetError)
            continue
        plans = [free]
        try:  # the smallest plan: as many swaps as help
            compile_model(m, CompileOptions(**opts, memory=MemoryOptions(1)))
        except BudgetError as e:
            assert e.smallest > 1 and "give a budget of" in str(e)
            plans.append(compile_model(m, CompileOptions(**opts,
                                                         memory=MemoryOptions(e.smallest))))
            swapped += bool(plans[-1].report["memory"]["swapped"])
        for c in plans:
            agree = check.compare(c, xs, runtime.run_batch(c, xs))
            assert agree.bit_exact == 1, f"seed {seed}: {agree.mismatches}"
        planned += 1
    assert planned >= 0.8 * count


@pytest.mark.parametrize("seed", range(6))
def test_random_unets_and_branchy_networks_at_their_smallest_budget(seed):
    """Generated networks with long-lived tensors, random sizes: the smallest plan of swaps
    alone swaps, the smallest with maps kept in far memory is smaller still, and both run
    bit-exact."""
    from snpu.compiler.passes.memory_budget import BudgetError

    rng = np.random.default_rng(seed)
    c = int(rng.choice([4, 8, 12]))
    s = int(rng.integers(5, 11))
    if seed == 4:  # the classic shape: upsampling on the host, skips across host subgraphs
        m, shape = unet.build(seed, depth=3, channels=c, size=12, resample=True), (1, c, 12, 12)
    elif seed % 2 == 0:
        m, shape = unet.build(seed, depth=int(rng.integers(2, 5)), channels=c, size=s), (1, c, s, s)
    else:
        c = 8 * int(rng.integers(1, 3))
        m, shape = branchy.build(seed=seed, blocks=2, channels=c, size=s), (1, c, s, s)
    swaps = {"strategy": ("slack", "distance")[seed % 3 == 2], "far_resident": False}
    with pytest.raises(BudgetError) as e:
        _compile(m, 1, shape, n=1, memory=swaps)
    c, xs = _compile(m, e.value.smallest, shape, n=1, memory=swaps)
    assert c.report["memory"]["fast_bytes"] <= e.value.smallest
    assert not c.report["memory"]["far_resident"]
    if seed % 2 == 0:
        assert c.report["memory"]["swapped"]
    _bit_exact(c, xs)
    with pytest.raises(BudgetError) as far:
        _compile(m, 1, shape, n=1)
    assert far.value.smallest <= e.value.smallest
    c, xs = _compile(m, far.value.smallest, shape, n=1)
    assert c.report["memory"]["fast_bytes"] <= far.value.smallest
    _bit_exact(c, xs)


def test_swapped_relu_maps_are_stored_compressed_when_that_is_smaller(unet_model, unet_unplanned):
    """`all` stores every swapped map compressed (stc out, ldc back; far bytes reserved at
    the streams' bound); `auto` only ReLU maps whose stream is expected to be smaller: not
    the 8-channel U-Net's (a mask word per 8 values), but a 64-channel one's, which then
    moves fewer far bytes than the same plan dense; all bit-exact."""
    from snpu.verif import isa

    def plan(m, budget, shape, mode):
        c, xs = _compile(m, budget, shape, n=1, memory={"compress": mode})
        seg = next(s for s in c.graph.meta["segments"] if s["kind"] == "core")
        ops = [isa.decode(w).op for w in c.rom(seg["rom"])]
        _bit_exact(c, xs)
        r = runtime.run(c, {"x": xs[0]}, check_races=True)
        swapped = c.report["memory"]["swapped"]
        assert swapped and (ops.count("stc") > 0) == (ops.count("ldc") > 0) == \
            any(s["compressed"] for s in swapped)
        return swapped, r.core_cycles, c.report["memory"]["far_bytes"]

    budget = int(unet_unplanned[0].report["memory"]["fast_bytes"] * 0.75)
    shape = (1, 8, 12, 12)
    every, _, far_all = plan(unet_model, budget, shape, "all")
    auto, _, far_auto = plan(unet_model, budget, shape, "auto")
    assert all(s["compressed"] for s in every) and not any(s["compressed"] for s in auto)
    assert far_all > far_auto  # the reservation is the bound
    wide = unet.build(0, depth=3, channels=64, size=4)
    free, _ = _compile(wide, 1 << 30, (1, 64, 4, 4), n=1)
    budget = int(free.report["memory"]["fast_bytes"] * 0.8)
    auto, cycles_auto, _ = plan(wide, budget, (1, 64, 4, 4), "auto")
    off, cycles_off, _ = plan(wide, budget, (1, 64, 4, 4), "off")
    assert all(s["compressed"] and s["expected_ratio"] < 0.9 for s in auto)
    assert not any(s["compressed"] for s in off)
    assert cycles_auto < cycles_off  # fewer far bytes move
    with pytest.raises(CompileError, match="compress='zip' is not auto, all or off"):
        _compile(unet_model, int(unet_unplanned[0].report["memory"]["fast_bytes"] * 0.75),
                 shape, n=1, memory={"compress": "zip"})


@pytest.fixture(scope="module")
def tall_unet():
    """A U-Net with maps of 24 rows: a third of its peak holds two staging buffers of a
    convolution window's rows."""
    m = unet.build(4, depth=3, channels=8, size=24)
    return m, _compile(m, 1 << 30, (1, 8, 24, 24), n=1)[0].report["memory"]


@pytest.mark.parametrize("reads", ["auto", "direct", "staged"])
def test_a_budget_no_swap_fits_keeps_maps_in_far_memory(tall_unet, reads):
    """Below what swapping can reach (a kernel's own input and output exceed the budget),
    whole maps stay in far memory: their producers store them there and their readers load
    them from there, directly or a band of rows at a time through a staging buffer in fast
    memory; the plan fits, its estimate names each map's cost, and it runs bit-exact."""
    m, free = tall_unet
    budget = free["peak_before"] // 3
    with pytest.raises(CompileError, match="give a budget of"):
        _compile(m, budget, (1, 8, 24, 24), n=1, memory={"far_resident": False})
    c, xs = _compile(m, budget, (1, 8, 24, 24), memory={"far_reads": reads})
    mem = c.report["memory"]
    assert mem["fast_bytes"] <= budget and mem["far_resident"]
    assert all(f["bytes"] > 0 and "estimated_cycles" in f for f in mem["far_resident"])
    layouts, far = c.graph.meta["layouts"], next(r for r in c.image.regions.values()
                                                  if r.kind == "far")
    for f in mem["far_resident"]:
        assert far.addr <= layouts[f["tensor"]].base < far.end
    modes = {n.meta["far_read"]["mode"] for n in c.graph.nodes if "far_read" in n.meta}
    if reads == "staged":
        assert modes == {"staged"}
    if reads == "direct":
        assert "staged" not in modes
    _bit_exact(c, xs)


def test_staged_reads_of_far_maps_cover_padding_strides_and_pieces():
    """Staged reads on a branchy network (padded pooling, 1x1 convolutions, operators split
    into pieces by memory): every band copies whole padded rows, halo included, and a
    reader's pieces run as one node by bands; bit-exact with the int8 reference.  (The
    U-Net above stages padded 3x3 convolutions.)"""
    m = branchy.build(seed=3, blocks=2, channels=16, size=24)
    free, _ = _compile(m, 1 << 30, (1, 16, 24, 24), n=1, split_threshold=6000)
    budget = free.report["memory"]["peak_before"] // 2
    c, xs = _compile(m, budget, (1, 16, 24, 24), split_threshold=6000,
                     memory={"far_reads": "staged"})
    assert c.report["split"]["nodes"]
    mem = c.report["memory"]
    assert mem["fast_bytes"] <= budget and mem["far_resident"]
    staged = [n for n in c.graph.nodes if n.meta.get("far_read", {}).get("mode") == "staged"]
    assert any(n.meta.get("pieces") for n in staged)
    assert {n.op for n in staged} >= {"Conv", "AveragePool"}
    _bit_exact(c, xs)


def test_far_reads_option_is_checked(unet_model):
    with pytest.raises(CompileError, match="far_reads='sideways' is not auto, direct or staged"):
        _compile(unet_model, 1000, (1, 8, 12, 12), n=1, memory={"far_reads": "sideways"})


def test_the_fast_memory_can_be_the_cores_local_memory():
    """``fast="local"``: the arena is the core's local memory.  Maps one core run writes
    and reads live there (every halo zeroed: local memory holds what the last run left);
    the graph's input and output and maps that cross to the host live in far memory; a
    budget larger than the local memory is an error; bit-exact at every budget, down to
    none at all in local memory."""
    from snpu.verif import isa

    m = unet.build(4, depth=3, channels=8, size=12, resample=True)  # upsampling on the host
    sizes = []
    for budget in (TEST_CORE.local_bytes, 3000, 1):
        c, xs = _compile(m, budget, (1, 8, 12, 12), memory={"fast": "local"})
        mem = c.report["memory"]
        assert mem["fast_memory"] == "local" and mem["fast_bytes"] <= budget
        layouts, st = c.graph.meta["layouts"], c.graph.meta["storage_root"]
        host = {t for n in c.graph.nodes if n.device == "host" for t in (*n.inputs, *n.outputs)}
        for t, L in layouts.items():
            if t in ("x", "y") or st.get(t, t) in {st.get(h, h) for h in host}:
                assert L.base < isa.LOCAL_BASE, t
        local = [t for t, L in layouts.items() if L.base >= isa.LOCAL_BASE]
        assert set(mem["zero_halo"]) == {st.get(t, t) for t in local if layouts[t].pad_h}
        sizes.append(len(local))
        _bit_exact(c, xs)
    assert sizes[0] > sizes[-1] == 0
    with pytest.raises(CompileError, match="local memory, which holds 65536 bytes"):
        _compile(m, 1 << 20, (1, 8, 12, 12), n=1, memory={"fast": "local"})
