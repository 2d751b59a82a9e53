"""The snpu command line: round trips, one-line errors, exit codes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from snpu.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(main, [str(a) for a in args], catch_exceptions=False)

    return invoke


def test_asm_disasm_round_trip(cli, tmp_path):
    src = tmp_path / "prog.s"
    src.write_text("cfg reg=mx.nvec value=2\n"
                   "ld buf=nbuf ext=0x40 dst=0 cols=64 signal=mx\n"
                   "fc nbuf=0 nidx=0 wbuf=0 widx=0 acc=0 n_in=64 rows=16 wait=ld\n"
                   "halt\n")
    r = cli("asm", src, "-o", tmp_path / "prog.hex")
    assert r.exit_code == 0, r.output
    r = cli("disasm", tmp_path / "prog.hex", "--no-addresses")
    assert r.exit_code == 0
    (tmp_path / "again.s").write_text(r.output)
    cli("asm", tmp_path / "again.s", "-o", tmp_path / "again.bin")
    r2 = cli("disasm", tmp_path / "again.bin", "--no-addresses")
    assert r2.output == r.output
    assert r.output.splitlines()[1].startswith("ld buf=nbuf lane=0 ext=0x00000040")


def test_illegal_word_is_one_line_error(cli, tmp_path):
    (tmp_path / "bad.hex").write_text("0" * 31 + "1\n" + "f" * 32 + "\n")
    r = CliRunner().invoke(main, ["disasm", str(tmp_path / "bad.hex")])
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: illegal instruction at ROM word 1 0xffff")


def test_asm_error_names_file_and_line(tmp_path):
    (tmp_path / "p.s").write_text("halt\nfc nbuf=0\n")
    r = CliRunner().invoke(main, ["asm", str(tmp_path / "p.s"), "-o", str(tmp_path / "p.hex")])
    assert r.exit_code == 1
    assert r.output.strip() == f"error: {tmp_path / 'p.s'}:2: fc: missing operand nidx"
    assert not (tmp_path / "p.hex").exists(), "no output file on error"


def test_sim_runs_the_example_and_checks_it(tmp_path):
    out = tmp_path / "demo"
    subprocess.run([sys.executable, str(ROOT / "examples" / "sparse_fc.py"), str(out)], check=True,
                   capture_output=True)
    runner = CliRunner()
    r = runner.invoke(main, ["asm", str(out / "sparse_fc.s"), "-o", str(out / "p.hex")])
    assert r.exit_code == 0
    r = runner.invoke(main, ["sim", str(out / "p.hex"), "--mem", str(out / "mem.bin"),
                             "--expect", str(out / "expected.npz"), "--out", str(out / "res")])
    assert r.exit_code == 0, r.output
    assert "match: y equal the expected arrays bit for bit" in r.output
    assert (out / "res" / "y.npy").exists()


def test_sim_reports_mismatch_with_nonzero_exit(tmp_path):
    import numpy as np

    out = tmp_path / "demo"
    subprocess.run([sys.executable, str(ROOT / "examples" / "sparse_fc.py"), str(out)], check=True,
                   capture_output=True)
    runner = CliRunner()
    runner.invoke(main, ["asm", str(out / "sparse_fc.s"), "-o", str(out / "p.hex")])
    np.savez(out / "wrong.npz", y=np.zeros(64, np.int8))
    r = runner.invoke(main, ["sim", str(out / "p.hex"), "--mem", str(out / "mem.bin"),
                             "--expect", str(out / "wrong.npz")])
    assert r.exit_code == 1
    assert "MISMATCH: y:" in r.output


def test_bad_core_config_is_one_line(tmp_path):
    (tmp_path / "c.json").write_text('{"lanes": 3}')
    (tmp_path / "p.hex").write_text("")
    (tmp_path / "m.bin").write_bytes(bytes(64))
    r = CliRunner().invoke(main, ["sim", str(tmp_path / "p.hex"), "--mem", str(tmp_path / "m.bin"),
                                  "--core", str(tmp_path / "c.json")])
    assert r.exit_code == 1
    assert r.output.strip() == "error: core config: lanes=3 must be a power of two in 1..64"


def _commands(group, path=()):
    """Every command of the CLI, groups included, as argument prefixes."""
    import click

    yield list(path)
    if isinstance(group, click.Group):
        for name, cmd in group.commands.items():
            yield from _commands(cmd, (*path, name))


def test_help_everywhere(cli):
    commands = list(_commands(main))
    assert len(commands) >= 12  # the group, 7 commands, topology and its 3, map
    for cmd in commands:
        r = cli(*cmd, "--help")
        assert r.exit_code == 0 and "Usage:" in r.output, cmd
        assert cmd == [] or f"snpu {' '.join(cmd)}" in r.output.replace("main", "snpu")


def test_verilog_writes_a_standalone_core(tmp_path):
    out = tmp_path / "core.v"
    r = CliRunner().invoke(main, ["verilog", "--lanes", "1", "--nbuf-bytes", "256",
                                  "--nidx-bytes", "32", "--wbuf-bytes", "256", "--widx-bytes", "256",
                                  "--acc-words", "16", "--obuf-bytes", "64", "--param-rows", "4",
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "module snpu_core(" in text and "axi__arvalid" in text and "axi__wstrb" in text


def test_verilog_for_synthesis_leaves_out_the_collision_check(tmp_path):
    small = ["--lanes", "1", "--nbuf-bytes", "256", "--nidx-bytes", "32", "--wbuf-bytes", "256",
             "--widx-bytes", "256", "--acc-words", "16", "--obuf-bytes", "64", "--param-rows", "4"]
    texts = {}
    for flags in ([], ["--for-synthesis"]):
        out = tmp_path / f"core{len(flags)}.v"
        r = CliRunner().invoke(main, ["verilog", *small, *flags, "-o", str(out)])
        assert r.exit_code == 0, r.output
        texts[bool(flags)] = out.read_text()
    # simulation: reads that meet a write are poisoned (snpu/rtl/target.py); synthesis: not,
    # and the memories say so to the tool
    assert "_collided" in texts[False] and "_collided" not in texts[True]
    assert "no_rw_check" in texts[True]


def test_verilog_rejects_a_bad_parameter(tmp_path):
    r = CliRunner().invoke(main, ["verilog", "--lanes", "6", "-o", str(tmp_path / "c.v")])
    assert r.exit_code == 1
    assert r.output.strip() == "error: core config: lanes=6 must be a power of two in 1..64"
    assert not (tmp_path / "c.v").exists()


@pytest.mark.rtl
def test_sim_rtl(tmp_path):
    """`snpu sim --rtl` on the test core (its simulator is cached by tests/rtl/test_core.py)."""
    import json

    from snpu.verif import progen

    from .rtl.test_core import TEST_CORE

    p = progen.fc_program(__import__("numpy").random.default_rng(3), TEST_CORE)
    words = p.place_rom()
    from snpu.verif.image import write_rom

    write_rom(tmp_path / "p.hex", words)
    p.image.save(tmp_path / "mem.bin")
    (tmp_path / "core.json").write_text(json.dumps(TEST_CORE.to_dict()))
    r = CliRunner().invoke(main, ["sim", str(tmp_path / "p.hex"), "--mem", str(tmp_path / "mem.bin"),
                                  "--core", str(tmp_path / "core.json"), "--rtl"])
    assert r.exit_code == 0, r.output
    assert "golden model: match" in r.output and "error NONE" in r.output


@pytest.mark.rtl
def test_sim_writes_a_readable_waveform(tmp_path):
    """`snpu sim --rtl --waves w.vcd`: the waveform parses, holds the core's signals and
    spans the whole run.  (The tests' core, whose waveform build the regression farm's
    test shares: each waveform build is a Verilator build of its own.)"""
    import json

    import numpy as np

    from snpu.config import SMALL_CORE as core
    from snpu.verif import progen
    from snpu.verif.image import write_rom
    from snpu.verif.tb.vcd import read_vcd

    p = progen.eltwise_program(np.random.default_rng(5), core, c=3, n=4)
    write_rom(tmp_path / "p.hex", p.place_rom())
    p.image.save(tmp_path / "mem.bin")
    (tmp_path / "core.json").write_text(json.dumps(core.to_dict()))
    args = ["sim", str(tmp_path / "p.hex"), "--mem", str(tmp_path / "mem.bin"), "--core",
            str(tmp_path / "core.json"), "--rtl", "--json", "--waves", str(tmp_path / "w.vcd")]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    cycles = json.loads(r.stdout)["cycles"]
    info = read_vcd(tmp_path / "w.vcd")
    assert {"clk", "start", "done", "busy"} <= info.names() and len(info.variables) > 100
    assert info.changes > 1000
    assert info.timescale == "1ps" and info.end_time >= cycles * 10_000  # 10 ns clock
    # a second run may replace its own waveform
    assert CliRunner().invoke(main, args).exit_code == 0


@pytest.fixture
def tiny_model(tmp_path):
    import onnx

    from tests.compiler.models import TEST_CORE, tiny_cnn

    onnx.save(tiny_cnn(), str(tmp_path / "tiny.onnx"))
    (tmp_path / "core.json").write_text(json.dumps(TEST_CORE.to_dict()))
    return tmp_path


def test_compile_then_run_on_the_golden_model(cli, tiny_model):
    import json

    import numpy as np

    d = tiny_model
    r = cli("compile", d / "tiny.onnx", "-o", d / "build", "--core", d / "core.json",
            "--density", "0.5", "--group-size", "4", "--group-small", "0.1")
    assert r.exit_code == 0, r.output
    assert "softmax" in r.output and (d / "build" / "source.onnx").exists()
    x = np.random.default_rng(0).standard_normal((3, 1, 3, 12, 12)).astype(np.float32)
    np.save(d / "x.npy", x)
    np.save(d / "labels.npy", np.array([1, 2, 3]))
    r = cli("run", d / "build", "--input", d / "x.npy", "--labels", d / "labels.npy",
            "--out", d / "y.npz", "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["inputs"] == 3 and res["bit_exact_vs_int8_reference"] == 3
    assert 0 <= res["top1_agreement_vs_onnxruntime"] <= 1 and "accuracy" in res
    assert np.load(d / "y.npz")["prob"].shape == (3, 1, 10)


def test_compile_and_run_on_a_2x2_array(cli, tiny_model):
    """`snpu compile --mesh 2x2` then `snpu run`: one ROM per core, the report's split per
    layer and placement, the run's array figures, bit-exact."""
    d = tiny_model
    r = cli("compile", d / "tiny.onnx", "-o", d / "arr", "--core", d / "core.json",
            "--density", "0.5", "--mesh", "2x2", "--unusable", "1,1")
    assert r.exit_code == 0, r.output
    assert "array 2x2 (3 cores used, 2 memory ports" in r.output
    assert "conv1: rows over 3 core(s)" in r.output
    assert sorted(p.name for p in (d / "arr").glob("seg0_*.hex")) == [
        "seg0_0_0.hex", "seg0_0_1.hex", "seg0_1_0.hex", "seg0_1_1.hex"]
    r = cli("run", d / "arr", "--count", "2", "--no-onnxruntime")
    assert r.exit_code == 0, r.output
    assert "int8 reference: 2 of 2 bit-exact" in r.output
    assert "array segment 0 (first input)" in r.output and "MX utilisation per core" in r.output


@pytest.mark.parametrize("split", ["auto", "images", "pipeline"])
def test_a_small_batch_on_an_array(cli, tmp_path, split):
    """`--batch 2 --mesh 2x2`: each image on its own two cores (the default), or on one core
    each (`--split images`, two idle), or through a pipeline of stages (`--split pipeline`);
    `snpu run` bit-exact every way."""
    import onnx

    from tests.compiler.every_model import build

    onnx.save(build("dynamic_batch"), str(tmp_path / "m.onnx"))
    r = cli("compile", tmp_path / "m.onnx", "-o", tmp_path / "b", "--batch", "2",
            "--mesh", "2x2", "--split", split)
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "b" / "report.json").read_text())
    conv = next(layer for layer in report["layers"] if layer.get("node") == "c1")
    if split == "pipeline":
        assert "c1: pipeline over" in r.output and "a stream of 2 images: pipeline" in r.output
        assert conv["split"]["stage"] == 0 and report["mesh"]["pipeline"]["images"] == 2
    else:
        assert "c1: " + ("rows over 4 core(s)" if split == "auto" else "batch over 2 core(s)") in r.output
        assert conv["split"].get("images") == (2 if split == "auto" else None), conv["split"]
    r = cli("run", tmp_path / "b", "--count", "2", "--no-onnxruntime")
    assert r.exit_code == 0, r.output
    assert "int8 reference: 2 of 2 bit-exact" in r.output


def test_verilog_of_an_array_with_a_memory_port_per_column(tmp_path):
    """`snpu verilog --mesh 2x1 --memory-ports 2`: the array module with ports axi__0__* and
    axi__1__* (one interconnect each), the core's module once."""
    out = tmp_path / "a.v"
    r = CliRunner().invoke(main, ["verilog", "--mesh", "2x1", "--lanes", "1", "--nbuf-bytes", "256",
                                  "--memory-ports", "2", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "2 memory port(s)" in r.output
    text = out.read_text()
    assert text.count("module snpu_array_core(") == 1
    header = text[text.index("module snpu_array("):].split(";", 1)[0]
    assert "axi__0__araddr" in header and "axi__1__araddr" in header and "axi__2__" not in header


def test_memory_ports_out_of_range_is_one_line(tiny_model, tmp_path):
    d = tiny_model
    r = CliRunner().invoke(main, ["compile", str(d / "tiny.onnx"), "-o", str(d / "b"),
                                  "--mesh", "2x2", "--memory-ports", "3"])
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
    assert "--memory-ports 3" in r.output and "1..2" in r.output
    assert not (d / "b").exists()
    r = CliRunner().invoke(main, ["verilog", "--memory-ports", "2", "-o", str(tmp_path / "a.v")])
    assert r.exit_code == 1 and "only with --mesh" in r.output


def test_compile_errors_are_one_line(tiny_model):
    d = tiny_model
    r = CliRunner().invoke(main, ["compile", str(d / "missing.onnx"), "-o", str(d / "b")])
    assert r.exit_code == 1
    assert r.output.strip().splitlines() == [f"error: {d / 'missing.onnx'}: no such model file"]
    (d / "bad.onnx").write_bytes(b"garbage" * 20)
    r = CliRunner().invoke(main, ["compile", str(d / "bad.onnx"), "-o", str(d / "b")])
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
    assert "not an ONNX model" in r.output
    assert not (d / "b").exists(), "no output directory on error"


def test_run_rejects_inputs_of_the_wrong_shape(cli, tiny_model):
    import numpy as np

    d = tiny_model
    assert cli("compile", d / "tiny.onnx", "-o", d / "build", "--core", d / "core.json").exit_code == 0
    np.save(d / "x.npy", np.zeros((2, 5), np.float32))
    r = CliRunner().invoke(main, ["run", str(d / "build"), "--input", str(d / "x.npy")])
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
    assert "x.npy" in r.output and "shape" in r.output


def test_compile_a_dynamic_batch_model_with_batch_and_run_it(cli, tmp_path):
    """A model exported with a symbolic batch: `--batch 3` compiles it for 3 images, which
    the core runs image by image; `snpu run` reports per-image top-1 and time per device."""
    import json

    import onnx

    from tests.compiler.every_model import build

    onnx.save(build("dynamic_batch"), str(tmp_path / "dyn.onnx"))
    r = cli("compile", tmp_path / "dyn.onnx", "-o", tmp_path / "out", "--batch", "3")
    assert r.exit_code == 0, r.output
    r = cli("run", tmp_path / "out", "--count", "2", "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["bit_exact_vs_int8_reference"] == 2
    assert set(res["device_seconds_per_input"]) == {"core", "host"}
    r = CliRunner().invoke(main, ["compile", str(tmp_path / "dyn.onnx"), "-o", str(tmp_path / "b"),
                                  "--batch", "0"])
    assert r.exit_code == 2 and not (tmp_path / "b").exists()


def test_regress_and_sweep_on_a_local_cluster(cli, tmp_path):
    """`snpu regress` / `snpu sweep` end to end on 2 local workers; a rerun comes from the
    result cache."""
    import json

    r = cli("regress", "--programs", "6", "--workers", "2", "--chunk", "2", "-o", tmp_path / "reg")
    assert r.exit_code == 0, r.output
    assert "6 passed, 0 failed (0 from the cache)" in r.output
    res = json.loads((tmp_path / "reg" / "results.json").read_text())
    assert res["programs"] == 6 and (tmp_path / "reg" / "junit.xml").exists()
    r = cli("regress", "--programs", "6", "--workers", "2", "--chunk", "2", "-o", tmp_path / "reg")
    assert "(6 from the cache)" in r.output
    r = cli("sweep", "--vary", "lanes=1,4", "--densities", "0.2,1", "--formats", "direct",
            "--fc", "64x8x2", "--workers", "2", "-o", tmp_path / "sw")
    assert r.exit_code == 0, r.output
    assert "4 points over 2 configuration(s)" in r.output
    for f in ("results.csv", "results.json", "speedup.png", "report.html"):
        assert (tmp_path / "sw" / f).stat().st_size > 0


def test_synth_refuses_bad_combinations_in_one_line():
    r = CliRunner().invoke(main, ["synth", "--router", "--mesh", "2x2"])
    assert r.exit_code == 1 and r.output.count("\n") == 1 and "leave out --mesh" in r.output
    r = CliRunner().invoke(main, ["synth", "--device", "12k"])
    assert r.exit_code == 2 and "12k" in r.output
    r = CliRunner().invoke(main, ["synth", "--mesh", "2by2"])
    assert r.exit_code == 1 and "2by2" in r.output


@pytest.mark.skipif(not __import__("os").environ.get("SNPU_SYNTH"),
                    reason="set SNPU_SYNTH=1 to place and route (about a minute)")
def test_synth_a_router_reports_area_fmax_and_the_critical_path_with_sources(cli):
    r = cli("synth", "--router", "--seeds", "2", "--json")
    out = json.loads(r.output)
    assert out["luts"] > 100 and out["ffs"] > 100 and out["fmax_mhz"] > 0
    assert set(out["fmax_per_seed"]) == {"1", "2"}
    assert out["fmax_mhz"] == min(out["fmax_per_seed"].values())
    steps = out["critical_path"]["through"]
    assert steps and any((s["source"] or "").startswith("rtl/") for s in steps)
    # every seed's critical path, the worst first, with where its delay goes
    paths = out["critical_paths"]
    assert [p["seed"] for p in paths] == sorted(
        (1, 2), key=lambda s: out["fmax_per_seed"][str(s)])
    assert paths[0]["fmax_mhz"] == out["fmax_mhz"] and paths[0]["through"] == steps
    for p in paths:
        ns = p["delay_ns"]
        assert ns["logic"] > 0 and ns["routing"] > 0
        assert abs(sum(ns.values()) - 1000 / p["fmax_mhz"]) < 0.05 * 1000 / p["fmax_mhz"]
    # a small netlist places with nextpnr's own timing weight, unless told otherwise
    assert out["placer_timing_weight"] == 10
    r = cli("synth", "--router", "--seeds", "2", "--timing-weight", "40")
    assert r.output.count("critical path, seed") == 2 and "routing" in r.output
    assert "placer timing weight 40" in r.output


def test_compile_for_speed(cli, tiny_model):
    """`snpu compile --optimize speed`: the report records it and `snpu run` is bit-exact;
    on a mesh it is a one-line error and nothing is written."""
    d = tiny_model
    r = cli("compile", d / "tiny.onnx", "-o", d / "fast", "--core", d / "core.json",
            "--density", "0.5", "--optimize", "speed")
    assert r.exit_code == 0, r.output
    assert json.loads((d / "fast" / "report.json").read_text())["options"]["optimize"] == "speed"
    r = cli("run", d / "fast", "--count", "2", "--no-onnxruntime")
    assert r.exit_code == 0, r.output
    assert "int8 reference: 2 of 2 bit-exact" in r.output
    r = CliRunner().invoke(main, ["compile", str(d / "tiny.onnx"), "-o", str(d / "arr"),
                                  "--optimize", "speed", "--mesh", "2x2"])
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
    assert "on a mesh use --optimize size" in r.output
    assert not (d / "arr").exists()
