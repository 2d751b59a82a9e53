"""Every command against bad arguments and bad files: exit 1 or 2, exactly one line on
stderr, no traceback, and no file in or around the output path lost.

The table is the specification: one row per (command, bad input).  Each row runs in a fresh
copy of a small workspace whose working directory, home directory and user files carry
sentinels that must survive.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from snpu.cli import main
from snpu.verif.image import MemoryImage

from .compiler.models import TEST_CORE, inputs, tiny_mlp

SENTINEL = "precious user data\n"


def _write_models(ws: Path) -> None:
    m = tiny_mlp()
    onnx.save(m, ws / "model.onnx")
    m16 = onnx.helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "half",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 8])]))
    onnx.save(m16, ws / "model16.onnx")
    empty = onnx.helper.make_model(helper.make_graph(
        [], "empty", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])]))
    onnx.save(empty, ws / "empty.onnx")
    (ws / "garbage.onnx").write_bytes(b"\x08\x07not a protobuf at all" * 10)


def _workspace(root: Path) -> Path:
    """A workspace with good inputs, broken copies of them and sentinel files."""
    ws = root / "ws"
    ws.mkdir()
    _write_models(ws)
    (ws / "prog.s").write_text("ld buf=acc ext=0 dst=0 cols=8\nhalt\n")
    (ws / "bad_utf8.s").write_bytes(b"halt\n\xff\xfe ld\n")
    img = MemoryImage(4096)
    img.add_region("rom", 1024, 256, "rom")
    img.add_region("y", 2048, 64, "output")
    img.save(ws / "mem.bin")
    (ws / "short.bin").write_bytes((ws / "mem.bin").read_bytes()[:1500])
    shutil.copy(ws / "mem.json", ws / "short.json")
    x = inputs(tiny_mlp(), 1)[0]
    np.save(ws / "x.npy", x)
    np.save(ws / "x16.npy", x.astype(np.float16))
    xn = x.copy()
    xn.reshape(-1)[3] = np.nan
    np.save(ws / "xnan.npy", xn)
    np.save(ws / "xshape.npy", np.zeros((3, 5), np.float32))
    np.savez(ws / "xname.npz", not_an_input=x)
    np.save(ws / "labels.npy", np.zeros(5, np.int64))
    (ws / "core.json").write_text("{not json")
    (ws / "sentinel.txt").write_text(SENTINEL)
    (ws / "user.vcd").write_text("my own notes, not a waveform\n")
    (ws / "user.png").write_bytes(b"\x89PNG\r\n\x1a\n" + SENTINEL.encode())
    (ws / "model_in_dir").mkdir()
    shutil.copy(ws / "model.onnx", ws / "model_in_dir" / "model.onnx")
    (ws / "userdir").mkdir()
    (ws / "userdir" / "keep.txt").write_text(SENTINEL)
    (ws / "home").mkdir()
    (ws / "home" / "keep.txt").write_text(SENTINEL)
    (ws / "work").mkdir()
    (ws / "work" / "keep.txt").write_text(SENTINEL)
    return ws


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """The workspace plus a compiled model, a topology store and damaged artifacts."""
    root = tmp_path_factory.mktemp("cli_fuzz")
    ws = _workspace(root)
    runner = CliRunner()
    cfg = ws / "core_ok.json"
    cfg.write_text(__import__("json").dumps(TEST_CORE.to_dict()))
    for args in (["asm", ws / "prog.s", "-o", ws / "prog.hex"],
                 ["compile", ws / "model.onnx", "-o", ws / "compiled", "--core", cfg],
                 ["topology", "generate", "layered", "--layers", "2", "--side", "4",
                  "-o", ws / "store.zip"]):
        r = runner.invoke(main, [str(a) for a in args])
        assert r.exit_code == 0, r.output
    for name, damage in (
            ("short_mem", lambda d: _truncate(d / "mem.bin", 100)),
            ("short_npz", lambda d: _truncate(d / "arrays.npz", 50)),
            ("short_seg", lambda d: _truncate(d / "seg0.hex", 40)),
            ("no_mem", lambda d: (d / "mem.bin").unlink()),
            ("bad_json", lambda d: (d / "model.json").write_text("{\"format\": ")),
            ("edited_json", lambda d: (d / "model.json").write_text(
                (d / "model.json").read_text().replace('"graph"', '"grahp"'))),
            ("edited_scale", lambda d: (d / "model.json").write_text(
                (d / "model.json").read_text().replace('"scale": 0.', '"scale": 1.', 1))),
            ("edited_seg", lambda d: (d / "seg0.hex").write_text(
                "0" * 31 + "1\n" + (d / "seg0.hex").read_text()[33:]))):
        shutil.copytree(ws / "compiled", ws / name)
        damage(ws / name)
    return ws


def _truncate(path: Path, keep: int) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:keep])


# Each row: an id and the arguments (``{ws}`` is the workspace; the working directory is
# ``{ws}/work`` and $HOME is ``{ws}/home``).
ROWS = [
    # asm
    ("asm-not-utf8", "asm {ws}/bad_utf8.s -o {ws}/o.hex"),
    ("asm-out-is-dir", "asm {ws}/prog.s -o {ws}/userdir"),
    ("asm-out-user-file", "asm {ws}/prog.s -o {ws}/sentinel.txt"),
    ("asm-out-is-input", "asm {ws}/prog.s -o {ws}/prog.s"),
    ("asm-missing-source", "asm {ws}/nope.s -o {ws}/o.hex"),
    ("asm-source-is-dir", "asm {ws}/userdir -o {ws}/o.hex"),
    ("asm-out-under-file", "asm {ws}/prog.s -o {ws}/sentinel.txt/o.hex"),
    # disasm
    ("disasm-text-file", "disasm {ws}/sentinel.txt"),
    ("disasm-dir", "disasm {ws}/userdir"),
    ("disasm-garbage-bin", "disasm {ws}/short.bin"),
    # sim
    ("sim-short-image", "sim {ws}/prog.hex --mem {ws}/short.bin"),
    ("sim-out-cwd", "sim {ws}/prog.hex --mem {ws}/mem.bin --out ."),
    ("sim-out-userdir", "sim {ws}/prog.hex --mem {ws}/mem.bin --out {ws}/userdir"),
    ("sim-out-parent", "sim {ws}/prog.hex --mem {ws}/mem.bin --out {ws}"),
    ("sim-waves-user-file", "sim {ws}/prog.hex --mem {ws}/mem.bin --rtl --waves {ws}/user.vcd"),
    ("sim-waves-not-a-waveform", "sim {ws}/prog.hex --mem {ws}/mem.bin --rtl --waves {ws}/w.txt"),
    ("sim-waves-without-rtl", "sim {ws}/prog.hex --mem {ws}/mem.bin --waves {ws}/w.vcd"),
    ("sim-bad-lanes", "sim {ws}/prog.hex --mem {ws}/mem.bin --lanes 3"),
    ("sim-core-not-json", "sim {ws}/prog.hex --mem {ws}/mem.bin --core {ws}/core.json"),
    ("sim-rom-is-text", "sim {ws}/sentinel.txt --mem {ws}/mem.bin"),
    # verilog
    ("verilog-bad-name", "verilog -o {ws}/v.v --name 1core"),
    ("verilog-keyword-name", "verilog -o {ws}/v.v --name module"),
    ("verilog-out-dir", "verilog -o {ws}/userdir"),
    ("verilog-out-user-file", "verilog -o {ws}/sentinel.txt"),
    ("verilog-bad-lanes", "verilog -o {ws}/v.v --lanes 3"),
    # compile
    ("compile-out-cwd", "compile {ws}/model.onnx -o ."),
    ("compile-out-parent-of-cwd", "compile {ws}/model.onnx -o .."),
    ("compile-out-root", "compile {ws}/model.onnx -o /"),
    ("compile-out-home", "compile {ws}/model.onnx -o {ws}/home"),
    ("compile-out-userdir", "compile {ws}/model.onnx -o {ws}/userdir"),
    ("compile-out-is-model", "compile {ws}/model.onnx -o {ws}/model.onnx"),
    ("compile-out-user-file", "compile {ws}/model.onnx -o {ws}/sentinel.txt"),
    ("compile-out-contains-model",
     "compile {ws}/model_in_dir/model.onnx -o {ws}/model_in_dir --force"),
    ("compile-float16", "compile {ws}/model16.onnx -o {ws}/o1"),
    ("compile-empty-graph", "compile {ws}/empty.onnx -o {ws}/o1"),
    ("compile-garbage", "compile {ws}/garbage.onnx -o {ws}/o1"),
    ("compile-model-is-dir", "compile {ws}/userdir -o {ws}/o1"),
    ("compile-missing-model", "compile {ws}/nope.onnx -o {ws}/o1"),
    ("compile-unknown-host-node", "compile {ws}/model.onnx -o {ws}/o1 --host nosuchnode"),
    ("compile-mesh-garbage", "compile {ws}/model.onnx -o {ws}/o1 --mesh 2by2"),
    ("compile-mesh-zero", "compile {ws}/model.onnx -o {ws}/o1 --mesh 0x2"),
    ("compile-mesh-too-many-cores", "compile {ws}/model.onnx -o {ws}/o1 --mesh 8x4"),
    ("compile-unusable-outside", "compile {ws}/model.onnx -o {ws}/o1 --mesh 2x2 --unusable 2,0"),
    ("compile-unusable-garbage", "compile {ws}/model.onnx -o {ws}/o1 --mesh 2x2 --unusable a"),
    ("compile-unusable-all", "compile {ws}/model.onnx -o {ws}/o1 --mesh 1x1 --unusable 0,0"),
    ("compile-split-bad", "compile {ws}/model.onnx -o {ws}/o1 --mesh 2x2 --split diagonal"),
    ("compile-unknown-keep-dense", "compile {ws}/model.onnx -o {ws}/o1 --keep-dense nosuch"),
    ("compile-calibration-f16", "compile {ws}/model.onnx -o {ws}/o1 --calibration {ws}/x16.npy"),
    ("compile-calibration-nan", "compile {ws}/model.onnx -o {ws}/o1 --calibration {ws}/xnan.npy"),
    ("compile-calibration-text", "compile {ws}/model.onnx -o {ws}/o1 --calibration {ws}/sentinel.txt"),
    ("compile-density-zero", "compile {ws}/model.onnx -o {ws}/o1 --density 0"),
    ("compile-core-not-json", "compile {ws}/model.onnx -o {ws}/o1 --core {ws}/core.json"),
    # run
    ("run-input-f16", "run {ws}/compiled --input {ws}/x16.npy"),
    ("run-input-nan", "run {ws}/compiled --input {ws}/xnan.npy"),
    ("run-input-shape", "run {ws}/compiled --input {ws}/xshape.npy"),
    ("run-input-name", "run {ws}/compiled --input {ws}/xname.npz"),
    ("run-input-text", "run {ws}/compiled --input {ws}/sentinel.txt"),
    ("run-labels-count", "run {ws}/compiled --input {ws}/x.npy --labels {ws}/labels.npy"),
    ("run-short-mem", "run {ws}/short_mem"),
    ("run-short-npz", "run {ws}/short_npz"),
    ("run-short-seg", "run {ws}/short_seg"),
    ("run-missing-mem", "run {ws}/no_mem"),
    ("run-bad-json", "run {ws}/bad_json"),
    ("run-edited-json", "run {ws}/edited_json"),
    ("run-edited-seg", "run {ws}/edited_seg"),
    ("run-edited-scale", "run {ws}/edited_scale"),
    ("run-not-compiled", "run {ws}/userdir"),
    ("run-out-user-file", "run {ws}/compiled --out {ws}/sentinel.txt"),
    ("run-out-dir", "run {ws}/compiled --out {ws}/userdir"),
    ("run-bad-sim", "run {ws}/compiled --sim fpga"),
    # topology and map
    ("topology-out-user-file", "topology generate layered --layers 2 --side 4 -o {ws}/sentinel.txt"),
    ("topology-out-dir", "topology generate layered --layers 2 --side 4 -o {ws}/userdir"),
    ("topology-import-bad-edges", "topology import {ws}/sentinel.txt -o {ws}/t.zip"),
    ("topology-import-onto-input", "topology import {ws}/model.onnx -o {ws}/model.onnx"),
    ("topology-info-not-store", "topology info {ws}/sentinel.txt"),
    ("topology-info-dir", "topology info {ws}/userdir"),
    ("map-out-user-file", "map {ws}/store.zip -o {ws}/sentinel.txt"),
    ("map-out-is-input", "map {ws}/store.zip -o {ws}/store.zip"),
    ("map-heatmap-user-file", "map {ws}/store.zip -o {ws}/m.npz --heatmap {ws}/sentinel.txt"),
    ("map-heatmap-user-png", "map {ws}/store.zip -o {ws}/m.npz --heatmap {ws}/user.png"),
    ("map-heatmap-not-png", "map {ws}/store.zip -o {ws}/m.npz --heatmap {ws}/h.jpg"),
    ("map-bad-mesh", "map {ws}/store.zip -o {ws}/m.npz --mesh 2by2"),
    ("map-bad-unusable", "map {ws}/store.zip -o {ws}/m.npz --unusable 1"),
    ("map-not-store", "map {ws}/sentinel.txt -o {ws}/m.npz"),
    # regress and sweep
    ("regress-bad-kind", "regress --kinds matmul -o {ws}/reg"),
    ("regress-mesh-kind", "regress --kinds fc --mesh 2x2 -o {ws}/reg"),
    ("regress-bad-mesh", "regress --mesh 2by2 -o {ws}/reg"),
    ("regress-out-user-file", "regress --programs 1 -o {ws}/sentinel.txt"),
    ("regress-out-userdir", "regress --programs 1 -o {ws}/userdir"),
    ("sweep-bad-field", "sweep --vary lane=1,2 -o {ws}/sw"),
    ("sweep-bad-value", "sweep --vary lanes=one -o {ws}/sw"),
    ("sweep-bad-density", "sweep --densities 0,2 -o {ws}/sw"),
    ("sweep-bad-format", "sweep --formats bitmap -o {ws}/sw"),
    ("sweep-bad-fc", "sweep --fc 64x8 -o {ws}/sw"),
]


def _snapshot(ws: Path) -> dict[str, bytes]:
    return {str(p.relative_to(ws)): p.read_bytes() for p in ws.rglob("*") if p.is_file()}


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input_is_one_line_and_loses_nothing(row, prepared, monkeypatch):
    ws = prepared
    before = _snapshot(ws)
    monkeypatch.chdir(ws / "work")
    monkeypatch.setenv("HOME", str(ws / "home"))
    args = [a.format(ws=ws) for a in row[1].split()]
    r = CliRunner().invoke(main, args)
    assert r.exit_code in (1, 2), (row, r.exit_code, r.output)
    assert "Traceback" not in r.output, r.output
    assert not isinstance(r.exception, Exception) or isinstance(r.exception, SystemExit), \
        repr(r.exception)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    after = _snapshot(ws)
    lost = sorted(k for k in before if k not in after or after[k] != before[k])
    assert not lost, f"{row[0]} changed or removed {lost}"
    # (onnxruntime keeps a telemetry cache under $HOME/.cache: not an output of ours)
    new = sorted(k for k in after if k not in before and not k.startswith("home/.cache/"))
    assert not new, f"{row[0]} left files behind: {new}"


def test_outputs_replace_only_previous_snpu_outputs(prepared, tmp_path, monkeypatch):
    """The other side of the rules: a previous snpu output is replaced (atomically), a
    non-empty user directory only with --force, and a new path is simply written."""
    ws = prepared
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    ok = lambda *a: runner.invoke(main, [str(x) for x in a])
    # ROM and Verilog outputs overwrite themselves
    for _ in range(2):
        r = ok("asm", ws / "prog.s", "-o", tmp_path / "p.hex")
        assert r.exit_code == 0, r.output
    # a compiled model directory replaces a previous compiled model
    for _ in range(2):
        r = ok("compile", ws / "model.onnx", "-o", tmp_path / "m")
        assert r.exit_code == 0, r.output
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporaries left"
    # a user directory needs --force, and then holds only the compiled model
    user = tmp_path / "user"
    user.mkdir()
    (user / "mine.txt").write_text(SENTINEL)
    assert ok("compile", ws / "model.onnx", "-o", user).exit_code == 1
    assert (user / "mine.txt").read_text() == SENTINEL
    assert ok("compile", ws / "model.onnx", "-o", user, "--force").exit_code == 0
    assert (user / "model.json").exists() and not (user / "mine.txt").exists()
    # run --out and sim --out write snpu outputs that a second run may replace
    for _ in range(2):
        r = ok("run", tmp_path / "m", "--input", ws / "x.npy", "--out", tmp_path / "y.npz",
               "--no-onnxruntime")
        assert r.exit_code == 0, r.output
    for _ in range(2):
        r = ok("sim", ws / "prog.hex", "--mem", ws / "mem.bin", "--out", tmp_path / "simout")
        assert r.exit_code == 0, r.output
    assert (tmp_path / "simout" / "y.npy").exists()


def test_failed_compile_keeps_the_previous_model(prepared, tmp_path):
    """A compile that fails part-way leaves the previous artifact as it was."""
    ws = prepared
    runner = CliRunner()
    out = tmp_path / "m"
    assert runner.invoke(main, ["compile", str(ws / "model.onnx"), "-o", str(out)]).exit_code == 0
    before = _snapshot(out)
    r = runner.invoke(main, ["compile", str(ws / "model.onnx"), "-o", str(out), "--lanes", "1",
                             "--wbuf-bytes", "64"])  # fails in code generation
    assert r.exit_code == 1
    assert _snapshot(out) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_input_is_one_line(prepared, tmp_path):
    src = tmp_path / "p.s"
    src.write_text("halt\n")
    src.chmod(0)
    r = CliRunner().invoke(main, ["asm", str(src), "-o", str(tmp_path / "p.hex")])
    assert r.exit_code in (1, 2) and len(r.stderr.strip().splitlines()) == 1
