"""Compiling onto a tiled array (``--mesh``): layers split across cores, data moved with
send / recv, every run bit-exact with the single core and the int8 reference on the golden
model (which also checks the cross-core synchronisation: races and deadlocks)."""

import copy
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from snpu.compiler import check, runtime
from snpu.compiler.artifact import Compiled
from snpu.compiler.passes.parallelize import blocks
from snpu.compiler.pipeline import CompileOptions, compile_model
from snpu.errors import CompileError
from snpu.verif.core_model import decode_rom

from .models import TEST_CORE, fire_cnn, inputs, tiny_cnn, tiny_mlp

DIGITS = Path(__file__).resolve().parents[2] / "examples" / "digits" / "digits_cnn.onnx"


def _run(c, xs):
    reps = runtime.run_batch(c, xs)
    agree = check.compare(c, xs, reps, onnxruntime=False)
    assert agree.bit_exact == len(xs), agree.mismatches
    return reps


def test_blocks_cover_the_range_on_unit_boundaries():
    assert blocks(10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert blocks(3, 4) == [(0, 1), (1, 2), (2, 3)]          # fewer rows than cores
    assert blocks(64, 4, 8) == [(0, 16), (16, 32), (32, 48), (48, 64)]
    assert blocks(10, 4, 8) == [(0, 8), (8, 10)]             # two channel blocks of 8
    for n, k, u in [(1, 3, 1), (37, 5, 4), (100, 16, 8)]:
        b = blocks(n, k, u)
        assert b[0][0] == 0 and b[-1][1] == n
        assert all(lo < hi and lo % u == 0 for lo, hi in b)
        assert all(b[i][1] == b[i + 1][0] for i in range(len(b) - 1))


def test_pixel_parts_and_row_spans():
    from snpu.compiler.kernels import row_spans
    from snpu.compiler.passes.parallelize import pixel_part

    p = pixel_part((1, 0), 10, 30, 13)          # pixels 10..29 of a 13-wide map
    assert (p.lo, p.hi, p.cols) == (0, 3, (10, 4)) and p.pixels(13) == (10, 30)
    assert row_spans((p.lo, p.hi), p.cols, 13) == [(0, 10, 13), (1, 0, 13), (2, 0, 4)]
    whole = pixel_part((0, 0), 26, 52, 13)      # rows 2 and 3 exactly
    assert (whole.lo, whole.hi, whole.cols) == (2, 4, None)
    assert row_spans((2, 4), None, 13) == [(2, 0, 13), (3, 0, 13)]
    one = pixel_part((0, 0), 15, 20, 13)        # inside one row
    assert (one.lo, one.hi, one.cols) == (1, 2, (2, 7))
    assert row_spans((1, 2), one.cols, 13) == [(1, 2, 7)]
    assert one.to_dict() == {"core": [0, 0], "kind": "rows", "range": [1, 2], "cols": [2, 7]}


@pytest.mark.parametrize("mesh,local_bytes", [((2, 2), 4096), ((2, 2), 65536), ((3, 1), 65536)])
def test_blocks_of_pixels_share_out_maps_whose_rows_do_not_divide(mesh, local_bytes):
    """13 rows on 4 cores, 16 on 3: convolutions split into blocks of pixels in raster
    order, whose first and last rows two cores share; those rows move without their halo
    pixels (each core that keeps them zeroes those itself).  Maps with channels that are not
    a multiple of 8 (the squeeze layers) keep whole rows.  Races and deadlocks are checked,
    the result is the single core's, bit for bit."""
    from snpu.compiler.passes.codegen_mesh import comade_rows

    size = 13 if mesh == (2, 2) else 16
    m = fire_cnn(seed=2, size=size)
    cfg = dataclasses.replace(TEST_CORE, local_bytes=local_bytes)
    c = compile_model(m, CompileOptions(config=cfg, density=0.6, mesh=mesh))
    g = c.graph
    cores = mesh[0] * mesh[1]
    pixel_layers = 0
    for n in g.nodes:
        parts = n.meta.get("parts", [])
        if len(parts) < 2 or parts[0].kind != "rows":
            continue
        w = g.tensor(n.outputs[0]).shape[3]
        spans = [p.pixels(w) for p in parts]
        # the blocks tile the map: contiguous, in order, every pixel once
        assert spans[0][0] == 0 and spans[-1][1] == size * size
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
        if any(p.cols for p in parts):
            pixel_layers += 1
            assert len(parts) == cores and g.tensor(n.outputs[0]).shape[1] % 8 == 0
            assert max(b - a for a, b in spans) - min(b - a for a, b in spans) <= 1
            assert comade_rows([n], w)
        if n.name.startswith("squeeze"):  # 4 channels: whole rows
            assert not any(p.cols for p in parts)
    assert pixel_layers >= 4
    assert {g.meta["storage_root"][f"cat{k}"] for k in range(2)} <= set(g.meta["local"])
    xs = inputs(m, 2)
    reps = _run(c, xs)
    single = runtime.run_batch(compile_model(m, CompileOptions(config=cfg, density=0.6)), xs)
    for r, s in zip(reps, single):
        np.testing.assert_array_equal(r.outputs_int8["y"], s.outputs_int8["y"])


@pytest.mark.parametrize("mesh,extra", [
    ((2, 2), {}),
    ((3, 1), {}),
    ((3, 3), {"unusable": ((1, 1), (0, 2))}),
    ((2, 2), {"density": 0.4, "dense": True}),
    ((2, 2), {"force_host": ("conv3",)}),   # three segments: array, host, array
    ((2, 2), {"split": "channels"}),         # convolutions by channels: maps in shared memory
    ((3, 1), {"split": "rows", "placement": "row-major"}),
])
def test_every_split_kind_is_bit_exact_on_the_array(mesh, extra):
    """tiny_cnn: convolutions, pools, the residual sum and the affine layer split by rows
    (halos exchanged), the fc by output channels, global pooling on one core, the
    concatenation in shared memory behind flags."""
    m = tiny_cnn()
    opts = dict(config=TEST_CORE, density=0.5, mesh=mesh)
    opts.update(extra)
    c = compile_model(m, CompileOptions(**opts))
    single = compile_model(m, CompileOptions(**{**opts, "mesh": (1, 1), "unusable": ()}))
    xs = inputs(m, 2)
    reps = _run(c, xs)
    ref = runtime.run_batch(single, xs)
    for r, s in zip(reps, ref):
        for o in r.outputs_int8:
            np.testing.assert_array_equal(r.outputs_int8[o], s.outputs_int8[o])
    kinds = {l["split"]["kind"] for l in c.report["layers"] if l.get("split")}
    assert {"rows", "whole"} <= kinds or extra.get("split") == "channels"
    if extra.get("split") == "channels":
        convs = [l for l in c.report["layers"] if l["op"] == "Conv"]
        assert all(l["split"]["kind"] == "channels" for l in convs if l["split"]["cores"] > 1)
    if extra.get("placement") == "row-major":
        assert c.report["mesh"]["placement"]["method"] == "row-major"
    arrays = [s for s in c.segments if "roms" in s]
    assert arrays and all(len(s["roms"]) == mesh[0] * mesh[1] for s in arrays)
    noc = [s["noc"] for s in arrays]
    assert sum(n["data_bytes"] for n in noc) > 0 and sum(n["flags"] for n in noc) > 0
    used = {p.core for n in c.graph.nodes for p in n.meta.get("parts", [])}
    assert not used & set(extra.get("unusable", ()))
    # unusable cores run a lone halt
    for s in arrays:
        for xy in extra.get("unusable", ()):
            words = c.rom(s["roms"][f"{xy[0]}_{xy[1]}"])
            assert [i.op for i in decode_rom(words)] == ["halt"]


@pytest.mark.parametrize("mesh,unusable", [((2, 2), ()), ((3, 3), ((2, 2),)), ((3, 1), ())])
def test_tiles_of_rows_and_channels_are_bit_exact(mesh, unusable):
    """``--split tiles``: every convolution with two blocks of output channels (the 16-channel
    expand and head layers of fire_cnn) splits into blocks of rows x channels, one per core:
    each core loads only its channels' weights and its rows' input window; the tiles go to
    shared memory behind flags.  Fewer than 4 cores: no tiling, the auto split.  Bit-exact with the single core, races checked."""
    m = fire_cnn(seed=3)
    opts = dict(config=TEST_CORE, density=0.5, mesh=mesh, unusable=unusable, split="tiles")
    c = compile_model(m, CompileOptions(**opts))
    g = c.graph
    tiled = [n for n in g.nodes if n.meta.get("split", {}).get("kind") == "tiles"]
    ncores = mesh[0] * mesh[1] - len(unusable)
    # 3 cores hold no 2 x 2 tiles: the layers split as --split auto would
    assert {n.name for n in tiled} >= ({"head"} if ncores >= 4 else set())
    assert tiled or ncores < 4
    for n in tiled:  # the tiles cover the output once: blocks of rows x channels
        parts = n.meta["parts"]
        oc, oh = g.tensor(n.outputs[0]).shape[1:3]
        assert 4 <= len(parts) <= ncores and len({p.core for p in parts}) == len(parts)
        assert all(p.kind == "rows" and p.ch is not None for p in parts)
        assert sum((p.hi - p.lo) * (p.ch[1] - p.ch[0]) for p in parts) == oc * oh
        assert len({(p.lo, p.hi) for p in parts}) >= 2 and len({p.ch for p in parts}) >= 2
        assert all(p.ch[0] % max(8, TEST_CORE.lanes) == 0 for p in parts)
        assert g.meta["storage_root"][n.outputs[0]] not in g.meta["local"]
        assert n.meta["split"]["why"].startswith("cost model: tiles ")
        assert parts[0].to_dict()["channels"] == list(parts[0].ch)
    xs = inputs(m, 2)
    reps = _run(c, xs)
    single = runtime.run_batch(compile_model(m, CompileOptions(config=TEST_CORE, density=0.5)), xs)
    for r, s in zip(reps, single):
        np.testing.assert_array_equal(r.outputs_int8["y"], s.outputs_int8["y"])


def test_tilings_are_blocks_of_rows_times_blocks_of_channels():
    from snpu.compiler.passes.parallelize import _tilings

    shapes = {len(t): t for _, t in _tilings(13, 64, 16, 8)}
    assert set(shapes) >= {4, 8, 16} and max(shapes) <= 16
    t16 = [t for _, t in _tilings(13, 64, 16, 8) if len(t) == 16]
    assert any(len({r[:2] for r in t}) == 4 for t in t16)   # 4 row blocks x 4 channel blocks
    assert _tilings(1, 64, 16, 8) == [] and _tilings(13, 8, 16, 8) == []  # 1 row, 1 block


def test_mlp_channel_split_and_array_speedup():
    m = tiny_mlp()
    single = compile_model(m, CompileOptions(config=TEST_CORE, density=0.4))
    c = compile_model(m, CompileOptions(config=TEST_CORE, density=0.4, mesh=(2, 2)))
    assert c.graph.node("matmul0").meta["split"]["kind"] == "channels"
    assert c.graph.node("matmul0").meta["split"]["why"].startswith("cost model")
    xs = inputs(m, 2)
    reps = _run(c, xs)
    one = runtime.run_batch(single, xs)
    assert reps[0].core_cycles < one[0].core_cycles
    assert reps[0].mac_pairs == one[0].mac_pairs  # the same work, divided


def test_digits_cnn_on_a_2x2_array_keeps_activations_in_local_memory(tmp_path):
    import json

    from snpu.config import CoreConfig

    cfg = CoreConfig.from_dict(json.loads((DIGITS.parent / "core.json").read_text()))
    c = compile_model(DIGITS, CompileOptions(config=cfg, mesh=(2, 2)))
    assert len(c.report["mesh"]["local_tensors"]) >= 4
    pl = c.report["mesh"]["placement"]
    assert 0 < pl["hop_bytes"] < pl["hop_bytes_row_major"]  # the mapper's snake beats row-major
    seg = c.segments[0]
    # no tensor goes through shared memory: the only flags are the credits that let a
    # core write over bytes another core's dead tensor held
    assert seg["noc"]["flags"] == seg["noc"].get("credits", 0) and seg["noc"]["data_bytes"] > 0
    c.save(tmp_path / "m")
    loaded = Compiled.load(tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").glob("seg0_*.hex")) == [
        "seg0_0_0.hex", "seg0_0_1.hex", "seg0_1_0.hex", "seg0_1_1.hex"]
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((1, 1, 8, 8)).astype(np.float32) for _ in range(2)]
    reps = _run(loaded, xs)
    single = compile_model(DIGITS, CompileOptions(config=cfg))
    assert reps[0].core_cycles < 0.7 * runtime.run_batch(single, xs[:1])[0].core_cycles
    seg_rep = reps[0].segments[0]
    assert set(seg_rep["cores"]) == {"0,0", "1,0", "0,1", "1,1"}
    assert seg_rep["network"]["flits"] > 0


@pytest.mark.parametrize("mesh,local_bytes", [((2, 2), 4096), ((3, 1), 4096), ((2, 2), 65536)])
def test_local_windows_reuse_and_concatenations(mesh, local_bytes):
    """Each core keeps only its window of a local map, the bytes of dead maps are reused
    (credits before remote writes over them, zeroed halos), concatenations stay local; the
    race and deadlock checks pass and the result is the single core's, bit for bit."""
    from snpu.compiler.passes.codegen_mesh import LocalCopies

    m = fire_cnn()
    cfg = dataclasses.replace(TEST_CORE, local_bytes=local_bytes)
    c = compile_model(m, CompileOptions(config=cfg, density=0.6, mesh=mesh))
    g = c.graph
    local = set(g.meta["local"])
    cats = {g.meta["storage_root"][f"cat{k}"] for k in range(2)}
    assert cats <= local  # both concatenations in local memory
    copies = LocalCopies(g, g.meta["layouts"], local)
    L = g.meta["layouts"]["r0"]  # the stem's output: 16 rows, a 1-row halo
    assert "r0" in local
    wins = copies.win["r0"]
    assert len(wins) == mesh[0] * mesh[1]
    # a core's window is its row block plus the 3x3 convolutions' halo, not the whole map
    assert max(b - a for a, b in wins.values()) < L.h // 2 + 2 * L.pad_h + 1
    offsets = g.meta["local_offsets"]
    assert max(offsets.values()) + 1 <= local_bytes
    seg = c.segments[0]
    if local_bytes < 65536:
        # bytes shared by maps alive at different times; remote writes over them wait
        shared = [(a, b) for a in local for b in local if a < b and offsets[a] == offsets[b]]
        assert shared and seg["noc"].get("credits", 0) > 0
    xs = inputs(m, 2)
    reps = _run(c, xs)
    single = compile_model(m, CompileOptions(config=cfg, density=0.6))
    one = runtime.run_batch(single, xs[:1])
    assert np.array_equal(reps[0].outputs["y"], one[0].outputs["y"])


def test_mesh_errors_are_clear():
    m = tiny_mlp()
    with pytest.raises(CompileError, match="at most 16 cores"):
        compile_model(m, CompileOptions(config=TEST_CORE, mesh=(5, 4)))
    with pytest.raises(CompileError, match="leaves no core"):
        compile_model(m, CompileOptions(config=TEST_CORE, mesh=(1, 2),
                                        unusable=((0, 0), (0, 1))))


def test_local_memory_too_small_falls_back_to_shared_memory():
    m = tiny_cnn()
    small = dataclasses.replace(TEST_CORE, local_bytes=1024)
    c = compile_model(m, CompileOptions(config=small, density=0.5, mesh=(2, 1)))
    big = compile_model(m, CompileOptions(config=TEST_CORE, density=0.5, mesh=(2, 1)))
    assert len(c.report["mesh"]["local_tensors"]) < len(big.report["mesh"]["local_tensors"])
    _run(c, inputs(m, 1))


def _batch_cnn_runs(mesh):
    from .every_model import build

    m = build("batch_cnn")
    xs = [np.random.default_rng(k).standard_normal((3, 3, 8, 8)).astype(np.float32) for k in range(2)]
    one = compile_model(m, CompileOptions(config=TEST_CORE))
    arr = compile_model(m, CompileOptions(config=TEST_CORE, mesh=mesh))
    r1, ra = _run(one, xs), _run(arr, xs)
    for a, b in zip(r1, ra):
        np.testing.assert_array_equal(a.outputs_int8["y"], b.outputs_int8["y"])
    return arr, r1[0].core_cycles, ra[0].core_cycles


def test_a_batch_is_split_by_images_across_the_array():
    """Seed 002's batch (N) split, 3 images on 3 cores: each core runs whole layers on its
    block of images; the race and deadlock checks pass, the result is the single core's,
    and the array is faster."""
    arr, one, cycles = _batch_cnn_runs((3, 1))
    splits = {n.name: n.meta["split"] for n in arr.graph.nodes if "split" in n.meta}
    assert splits and all(s["kind"] == "batch" and s["cores"] == 3 for s in splits.values())
    assert cycles < 0.6 * one


@pytest.mark.parametrize("mesh", [(3, 3), (2, 2)])
def test_a_batch_smaller_than_the_array_gives_each_image_its_own_cores(mesh):
    """3 images on 9 cores: each image on its own 3 cores, every layer split over them as a
    single image's would be (on 4 cores: groups of 1, 1 and 2).  A core works on one image
    only, so the maps stay in local memory; nothing moves between groups; races and
    deadlocks checked, bit-exact with the single core, and 9 cores beat 3 (the batch split)."""
    from snpu.compiler.passes.place_parts import traffic

    arr, one, cycles = _batch_cnn_runs(mesh)
    g = arr.graph
    groups: dict[int, set] = {}
    for n in g.nodes:
        for p in n.meta.get("parts", []):
            assert p.image is not None and p.to_dict()["image"] == p.image
            groups.setdefault(p.image, set()).add(p.core)
    assert sorted(groups) == [0, 1, 2]
    assert sum(len(c) for c in groups.values()) == mesh[0] * mesh[1]   # disjoint, all cores
    assert set(g.meta["local"])                                        # maps in local memory
    flows = traffic(g)
    assert flows and all(any({a, b} <= c for c in groups.values()) for a, b in flows)
    assert any(n.meta["split"].get("images") == 3 for n in g.nodes if "split" in n.meta)
    if mesh == (3, 3):
        assert {len(c) for c in groups.values()} == {3}
        _, _, batch_split = _batch_cnn_runs((3, 1))
        assert cycles < 0.7 * batch_split


def _with_batch(m, images: int):
    """``m`` with its input's and output's first dimension set to ``images``."""
    m = copy.deepcopy(m)
    for vi in (m.graph.input[0], m.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_value = images
    return m


@pytest.mark.parametrize("mesh,images,local_bytes", [((2, 2), 4, None), ((3, 1), 2, None),
                                                     ((2, 2), 3, 1024)])
def test_a_pipeline_of_layers_runs_a_stream_of_inputs(mesh, images, local_bytes):
    """``--split pipeline`` (throughput mode): the layers in program order form contiguous
    stages, each on its own group of cores that splits every layer of the stage as one
    image over an array that size; every stage runs all the images, image by image, so the
    stages overlap, and keeps its weights in local memory (as many as fit: with 1 KiB some
    stay in shared memory); races and deadlocks checked, bit-exact with the single core,
    faster than it."""
    from snpu.compiler.passes.parallelize import VIEW_OPS

    m = _with_batch(tiny_cnn(seed=1), images)
    cfg = dataclasses.replace(TEST_CORE, local_bytes=local_bytes or TEST_CORE.local_bytes)
    opts = dict(config=cfg, density=0.5)
    arr = compile_model(m, CompileOptions(**opts, mesh=mesh, split="pipeline"))
    layers = [n for n in arr.graph.nodes if n.device == "core" and n.op not in VIEW_OPS]
    stages = [n.meta["split"]["stage"] for n in layers]
    assert stages == sorted(stages) and len(set(stages)) > 1          # contiguous, in order
    info = arr.graph.meta["mesh"]["pipeline"]
    assert info["images"] == images and info["stages"] == len(set(stages))
    cores: dict[int, set] = {}
    for n in layers:
        assert n.meta["split"]["kind"] == "pipeline"
        assert all(p.kind != "batch" and p.image is None for p in n.meta["parts"])
        cores.setdefault(n.meta["split"]["stage"], set()).update(p.core for p in n.meta["parts"])
    assert all(len(c) <= info["cores_per_stage"] for c in cores.values())
    every = [c for group in cores.values() for c in group]
    assert len(every) == len(set(every))                               # disjoint groups
    kept = arr.segments[0]["resident_bytes"]
    assert 0 < kept <= len(every) * cfg.local_bytes
    if local_bytes:  # only some of the weights fit
        roomy = compile_model(m, CompileOptions(config=TEST_CORE, density=0.5, mesh=mesh,
                                                split="pipeline"))
        assert kept < roomy.segments[0]["resident_bytes"]
    xs = [np.random.default_rng(k).standard_normal((images, 3, 12, 12)).astype(np.float32)
          for k in range(2)]
    one = compile_model(m, CompileOptions(**opts))
    r1, ra = _run(one, xs), _run(arr, xs)
    for a, b in zip(r1, ra):
        for o in a.outputs_int8:
            np.testing.assert_array_equal(a.outputs_int8[o], b.outputs_int8[o])
    assert ra[0].core_cycles < r1[0].core_cycles


def test_a_pipeline_needs_a_stream():
    with pytest.raises(CompileError, match="pipeline .* batch of at least 2"):
        compile_model(tiny_cnn(), CompileOptions(config=TEST_CORE, mesh=(2, 2), split="pipeline"))


def test_memory_ports_are_recorded_and_run_on_the_golden_array(tmp_path):
    """A 4x1 array with one external-memory port per column (the default) against the same
    array with one port for all: the artifact records the ports, ``snpu run`` uses them,
    both are bit-exact, and the four-port array is not slower."""
    m = fire_cnn()
    xs = inputs(m, 1)
    cycles, moved = {}, {}
    for ports in (None, 1):
        c = compile_model(m, CompileOptions(config=TEST_CORE, density=0.6, mesh=(4, 1),
                                            memory_ports=ports))
        want = 4 if ports is None else 1
        assert c.report["mesh"]["memory_ports"] == want
        assert all(s["memory_ports"] == want for s in c.segments if "roms" in s)
        c.save(tmp_path / f"p{want}")
        rep = _run(Compiled.load(tmp_path / f"p{want}"), xs)[0]
        cycles[want] = rep.core_cycles
        # the bytes each port carried (the golden model's count; local memory excluded)
        arrays = [s for s in rep.segments if s["device"] == "array"]
        assert arrays and all(len(s["port_bytes"]) == want for s in arrays)
        moved[want] = sum(sum(s["port_bytes"]) for s in arrays)
        assert 0 < moved[want] < sum(v["dram_bytes"] for s in arrays for v in s["cores"].values())
    assert cycles[4] <= cycles[1] and moved[4] == moved[1]
    with pytest.raises(Exception, match="memory ports: 5 must be in 1..4"):
        compile_model(m, CompileOptions(config=TEST_CORE, mesh=(4, 1), memory_ports=5))


def test_a_concatenation_made_in_two_segments_is_not_local():
    """A concatenation whose slices are made by different segments (here one on the host)
    cannot live in local memory, which does not outlive an array segment; before, its
    slices were written to local addresses by one segment and read as garbage by the next
    (on shufflenet at 2x2: two wrong outputs, no error)."""
    m = fire_cnn()
    c = compile_model(m, CompileOptions(config=TEST_CORE, density=0.6, mesh=(2, 2),
                                        force_host=("expand3_0",)))
    assert [s["nodes"] for s in c.segments][:2] == [["stem", "squeeze0", "expand1_0"], ["expand3_0"]]
    root = c.graph.meta["storage_root"]
    assert root["cat0"] not in c.graph.meta["local"]
    assert root["cat1"] in c.graph.meta["local"]  # made inside one segment: still local
    _run(c, inputs(m, 2))
