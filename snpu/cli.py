"""The ``snpu`` command line.

Every user error is printed as one line (``error: ...``) with exit status 1; usage errors
exit with status 2.  Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .cli_base import _config_options, _force_option, _load_config, _output, _progress, main
from .errors import SnpuError


_VERILOG_KEYWORDS = frozenset("""always and assign automatic begin buf bufif0 bufif1 case casex
casez cell cmos config deassign default defparam design disable edge else end endcase endconfig
endfunction endgenerate endmodule endprimitive endspecify endtable endtask event for force forever
fork function generate genvar highz0 highz1 if ifnone incdir include initial inout input instance
integer join large liblist library localparam macromodule medium module nand negedge nmos nor
noshowcancelled not notif0 notif1 or output parameter pmos posedge primitive pull0 pull1 pulldown
pullup pulsestyle_onevent pulsestyle_ondetect rcmos real realtime reg release repeat rnmos rpmos
rtran rtranif0 rtranif1 scalared showcancelled signed small specify specparam strong0 strong1
supply0 supply1 table task time tran tranif0 tranif1 tri tri0 tri1 triand trior trireg unsigned
use uwire vectored wait wand weak0 weak1 while wire wor xnor xor logic bit byte int""".split())


def _verilog_name(name: str) -> str:
    import re

    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$]*", name) or name in _VERILOG_KEYWORDS:
        raise SnpuError(f"--name {name!r}: not a legal Verilog module name (a letter or _, "
                        "then letters, digits, _ or $; not a keyword)")
    return name


@main.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="ROM image to write (.hex for $readmemh, .bin for raw little-endian).")
@_force_option
def asm(source: str, output: str, force: bool) -> None:
    """Assemble SOURCE into a ROM image."""
    from .verif.asm import assemble
    from .verif.image import write_rom

    _output(output, "ROM image", inputs=[source], force=force)
    try:
        text = Path(source).read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise SnpuError(f"{source}: not UTF-8 text (byte {e.start}: "
                        f"0x{e.object[e.start]:02x}); is it an assembly file?") from None
    words = assemble(text, name=source)
    write_rom(output, words)
    click.echo(f"{source}: {len(words)} instructions -> {output}")


@main.command()
@click.argument("rom", type=click.Path(exists=True, dir_okay=False))
@click.option("--addresses/--no-addresses", default=True, show_default=True,
              help="Append each word's ROM address as a comment.")
def disasm(rom: str, addresses: bool) -> None:
    """Disassemble a ROM image (.hex or .bin) to assembly text."""
    from .verif.asm import disassemble
    from .verif.image import read_rom

    click.echo(disassemble(read_rom(rom), addresses=addresses), nl=False)


@main.command()
@click.argument("rom", type=click.Path(exists=True, dir_okay=False))
@click.option("--mem", "mem", type=click.Path(exists=True, dir_okay=False),
              help="External-memory image (.bin); its manifest is the .json beside it.")
@click.option("--mesh", default=None, metavar="WxH",
              help="ROM is a tiled-array program's manifest.json (one ROM per core, shared "
                   "memory image) for a WxH array.")
@click.option("--manifest", type=click.Path(exists=True, dir_okay=False),
              help="Manifest, if not beside the image.")
@_config_options
@click.option("--rtl", is_flag=True, help="Run on the RTL (Verilator via cocotb) instead of the "
              "golden model; the testbench also checks the result against the golden model.")
@click.option("--memory", type=click.Choice(["hdl", "axiram"]), default="hdl", show_default=True,
              help="RTL external memory: AXI RAM inside the simulation, or cocotbext-axi's AxiRam.")
@click.option("--stall", type=float, default=0.0, show_default=True,
              help="RTL: probability of pausing each AXI handshake per cycle.")
@click.option("--waves", "waves", type=click.Path(dir_okay=False),
              help="RTL: write a waveform, .vcd (or .fst where liblz4/zlib headers exist).")
@click.option("--out", "out", type=click.Path(file_okay=False),
              help="Write every output region as .npy and the final memory image here.")
@_force_option
@click.option("--expect", type=click.Path(exists=True, dir_okay=False),
              help=".npz of expected arrays, keyed by region name; mismatches fail.")
@click.option("--json", "as_json", is_flag=True, help="Print the run statistics as JSON.")
@click.option("--no-race-check", is_flag=True, help="Skip the check that units are ordered.")
def sim(rom: str, mem: str | None, mesh: str | None, manifest: str | None, core: str | None,
        out: str | None, expect: str | None, as_json: bool, no_race_check: bool, rtl: bool,
        memory: str, stall: float, waves: str | None, force: bool, **params) -> None:
    """Run ROM against the memory image MEM on the golden model (or, with --rtl, the RTL).

    With --mesh WxH, ROM is the manifest.json of a tiled-array program and every core runs
    its own ROM against the shared memory image."""
    import numpy as np

    from .verif import golden
    from .verif.image import MemoryImage, read_rom

    if mesh is not None:
        given = [f"--{k.replace('_', '-')}" for k, v in params.items() if v is not None]
        given += ["--core"] * bool(core) + ["--mem"] * bool(mem) + ["--manifest"] * bool(manifest)
        if given:
            raise SnpuError(f"{', '.join(given)}: a mesh program carries its own memory image "
                            "and core configuration (see its manifest.json)")
        return _sim_mesh(rom, mesh, out=out, expect=expect, as_json=as_json,
                         no_race_check=no_race_check, rtl=rtl, memory=memory, stall=stall,
                         waves=waves, force=force)
    if mem is None:
        raise SnpuError("--mem: the external-memory image is required (or give --mesh WxH "
                        "and a mesh program's manifest.json)")
    inputs = [rom, mem, manifest, core, expect, Path(mem).with_suffix(".json")]
    _check_sim_outputs(waves, out, rtl, inputs, force)
    cfg = _load_config(core, **params)
    words = read_rom(rom)
    image = MemoryImage.load(mem, manifest)
    if rtl:
        from .verif.tb import rtl_sim

        with _progress("RTL simulation", 0):
            r = rtl_sim.run(words, image, cfg, memory=memory, stall=stall, waves=waves)
        if not r.finished:
            raise rtl_sim.RtlError("the core did not finish within its cycle budget (hang)")
        image.data[:] = r.ext
        stats = {"cycles": r.cycles, "error": r.error, "error_pc": r.error_pc,
                 "counters": r.counters, "simulated_cycles_per_s": r.cycles_per_s,
                 "golden_check": r.problems or "match"}
    else:
        with _progress("golden model", len(words)) as tick:
            result = golden.run_image(words, image, cfg, check_races=not no_race_check,
                                      progress=tick)
        image.data[:] = result.ext
        stats = result.stats.to_dict()
    if out:
        _save_sim_outputs(Path(out), image)
    failures = []
    if expect:
        ref = np.load(expect)
        for name in ref.files:
            got = image.read(name)
            want = ref[name]
            if got.shape != want.shape or not np.array_equal(got, want):
                diff = int(np.count_nonzero(got.reshape(-1) != want.reshape(-1))) \
                    if got.size == want.size else got.size
                failures.append(f"{name}: {diff} of {want.size} elements differ")
        stats["expect"] = {"checked": list(ref.files), "failures": failures}
    if as_json:
        click.echo(json.dumps(stats, indent=1))
    elif rtl:
        _print_rtl(stats)
    else:
        _print_stats(stats)
        for r in image.regions.values():
            if r.kind == "output":
                arr = image.read(r.name)
                click.echo(f"output {r.name} {arr.dtype}{list(arr.shape)}: "
                           f"{np.array2string(arr.reshape(-1)[:16], separator=' ')}"
                           f"{' ...' if arr.size > 16 else ''}")
        if expect:
            if failures:
                click.echo("MISMATCH: " + "; ".join(failures))
            else:
                click.echo(f"match: {', '.join(ref.files)} equal the expected arrays bit for bit")
    if failures or (rtl and (stats["error"] != "NONE" or stats["golden_check"] != "match")):
        sys.exit(1)


def _check_sim_outputs(waves, out, rtl: bool, inputs: list, force: bool) -> None:
    """``--waves`` (RTL only, a known waveform format) and ``--out`` may be written."""
    if waves:
        if not rtl:
            raise SnpuError("--waves: waveforms come from the RTL; add --rtl")
        from .verif.tb.rtl_sim import waves_format

        waves_format(waves)
        _output(waves, "waveform", "--waves", inputs=inputs, force=force)
    if out:
        _output(out, "simulation output", "--out", inputs=inputs, force=force)


def _sim_mesh(manifest: str, mesh: str, *, out, expect, as_json, no_race_check, rtl, memory,
              stall, waves, force) -> None:
    """``snpu sim --mesh``: a tiled-array program on the golden model or the RTL array."""
    import numpy as np

    from .verif.mesh_program import MeshProgram, parse_mesh

    size = parse_mesh(mesh)
    inputs = [manifest, expect, Path(manifest).parent]
    _check_sim_outputs(waves, out, rtl, inputs, force)
    prog = MeshProgram.load(manifest)
    if prog.mesh != size:
        raise SnpuError(f"--mesh {mesh}: {manifest} is a program for a "
                        f"{prog.mesh[0]}x{prog.mesh[1]} array")
    image = prog.placed()
    if rtl:
        from .verif.tb import rtl_sim

        with _progress(f"RTL simulation of the {mesh} array", 0):
            r = rtl_sim.run_mesh(prog, memory=memory, stall=stall, waves=waves)
        if not r.finished:
            raise rtl_sim.RtlError("the array did not finish within its cycle budget (hang)")
        image.data[:] = r.ext
        stats = {"cycles": r.cycles, "golden_cycles": r.golden_cycles, "cores": r.cores,
                 "network": r.network, "simulated_cycles_per_s": r.cycles_per_s,
                 "golden_check": r.problems or "match"}
        errors = [f"core ({k}): {c['error']} at ROM word {c['error_pc']}"
                  for k, c in r.cores.items() if c["error"] != "NONE"]
    else:
        with _progress("golden model", 0):
            res = prog.run_golden(check_races=not no_race_check)
        image.data[:] = res.ext
        stats = {"cycles": res.cycles, "network": res.network,
                 "cores": {f"{x},{y}": c.stats.to_dict() for (x, y), c in res.cores.items()}}
        errors = []
    if out:
        _save_sim_outputs(Path(out), image)
    failures = []
    if expect:
        ref = np.load(expect)
        for name in ref.files:
            got, want = image.read(name), ref[name]
            if got.shape != want.shape or not np.array_equal(got, want):
                failures.append(f"{name} differs")
        stats["expect"] = {"checked": list(ref.files), "failures": failures}
    if as_json:
        click.echo(json.dumps(stats, indent=1))
    else:
        net = stats["network"] or {}
        click.echo(f"{'RTL' if rtl else 'golden model'}: {size[0]}x{size[1]} array, "
                   f"{stats['cycles']} cycles"
                   + (f" (golden estimate {stats['golden_cycles']})" if rtl else "")
                   + f"; network: {net.get('packets', 0)} packets, {net.get('flits', 0)} flits, "
                   f"busiest link {net.get('busiest_link_flits', 0)} flits")
        for k, c in stats["cores"].items():
            cnt = c["counters"] if rtl else c
            click.echo(f"  core ({k}): {cnt['cycles']} cycles, "
                       f"{cnt['net_bytes_sent']} B sent, {cnt['net_bytes_received']} B received"
                       + (f", {c['error']} at ROM word {c['error_pc']}"
                          if rtl and c["error"] != "NONE" else ""))
        if rtl:
            click.echo("golden model check: " + ("match" if stats["golden_check"] == "match"
                                                 else "; ".join(stats["golden_check"])))
        if expect:
            click.echo("MISMATCH: " + "; ".join(failures) if failures else
                       f"match: {', '.join(ref.files)} equal the expected arrays bit for bit")
    if failures or errors or (rtl and stats["golden_check"] != "match"):
        sys.exit(1)


@main.command("mesh-gen")
@click.argument("pattern", type=click.Choice(["neighbour", "ring", "all_to_all", "gather",
                                              "hotspot"]))
@click.option("--mesh", required=True, metavar="WxH", help="Array size.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False),
              help="Directory to write the program to (manifest.json, one ROM per core, "
                   "memory image).")
@_config_options
@_force_option
def mesh_gen(pattern: str, mesh: str, seed: int, output: str, core: str | None, force: bool,
             **params) -> None:
    """Write a random tiled-array program with traffic PATTERN (and the expected outputs,
    expected.npz, for ``snpu sim --mesh ... --expect``)."""
    import io

    import numpy as np

    from .fileio import atomic_write
    from .verif import meshgen
    from .verif.mesh_program import parse_mesh

    size = parse_mesh(mesh)
    _output(output, "mesh program", inputs=[core], force=force)
    cfg = _load_config(core, **params)
    try:
        prog = meshgen.mesh_program(np.random.default_rng(seed), cfg, size, pattern)
    except ValueError as e:
        raise SnpuError(f"mesh-gen: {e} (core configuration too small?)") from None
    path = prog.save(output)
    buf = io.BytesIO()
    np.savez(buf, **prog.meta["expected"])
    atomic_write(Path(output) / "expected.npz", buf.getvalue())
    click.echo(f"{path}: {pattern} on a {size[0]}x{size[1]} array, "
               f"{sum(len(w) for w in prog.roms.values())} instruction words; run it with "
               f"snpu sim --mesh {mesh} {path} [--rtl] --expect {Path(output) / 'expected.npz'}")


def _save_sim_outputs(outdir: Path, image) -> None:
    """Every output region as ``<name>.npy`` and the final memory image, in one directory
    replaced atomically; ``outputs.json`` marks it as an snpu output."""
    import io
    import shutil

    import numpy as np

    from .fileio import replace_dir, temp_dir_beside

    tmp = temp_dir_beside(outdir)
    try:
        names = []
        for r in image.regions.values():
            if r.kind == "output":
                buf = io.BytesIO()
                np.save(buf, image.read(r.name))
                (tmp / f"{r.name}.npy").write_bytes(buf.getvalue())
                names.append(r.name)
        image.save(tmp / "final.bin")
        (tmp / "outputs.json").write_text(json.dumps({"format": "snpu-sim-out/1",
                                                      "outputs": names}, indent=1) + "\n")
        replace_dir(tmp, outdir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _memory_ports(size: tuple[int, int], value: int | None) -> int:
    """``--memory-ports`` of a mesh checked (default: one per column)."""
    from .config import memory_ports

    try:
        return memory_ports(size, value)
    except SnpuError as e:
        raise SnpuError(f"--memory-ports {value}: {e}") from None


@main.command()
@_config_options
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Verilog file to write.")
@click.option("--name", default=None,
              help="Top module name (default snpu_core, or snpu_array with --mesh).")
@click.option("--mesh", default=None, metavar="WxH",
              help="A tiled array of WxH cores with routers and the AXI4 interconnects "
                   "(the core's module is emitted once, as <name>_core).")
@click.option("--memory-ports", type=int, default=None, metavar="N",
              help="With --mesh: external-memory AXI4 ports axi__<p>__*, 1..width (default: "
                   "one per column).")
@click.option("--for-synthesis", is_flag=True,
              help="Leave out the simulation's check that no block reads a block RAM word "
                   "as it is written (snpu/rtl/target.py); the memories keep their "
                   "no_rw_check attribute.  Without it the Verilog is the simulated design.")
@_force_option
def verilog(core: str | None, output: str, name: str | None, mesh: str | None,
            memory_ports: int | None, for_synthesis: bool, force: bool, **params) -> None:
    """Write standalone Verilog of one core (AXI4 master, control/status ports), or with
    --mesh of a tiled array of cores (AXI4 master ports to the shared memory, one per
    group of columns)."""
    from .fileio import atomic_write
    from .rtl.target import SynthesisTarget

    platform = SynthesisTarget("generic") if for_synthesis else None
    size = None
    if mesh is not None:
        from .verif.mesh_program import parse_mesh

        size = parse_mesh(mesh)
        memory_ports = _memory_ports(size, memory_ports)
    elif memory_ports is not None:
        raise SnpuError("--memory-ports: only with --mesh (one core has one AXI4 port)")
    name = _verilog_name(name or ("snpu_array" if size else "snpu_core"))
    _output(output, "Verilog file", inputs=[core], force=force)
    cfg = _load_config(core, **params)
    with _progress("generating Verilog", 0):
        if size:
            from .rtl.array import array_verilog

            text = array_verilog(cfg, *size, name=name, memory_ports=memory_ports,
                                 platform=platform)
        else:
            from amaranth.back import verilog as amaranth_verilog

            from .rtl.core import Core

            text = amaranth_verilog.convert(Core(cfg), name=name, platform=platform)
    atomic_write(output, text)
    what = (f"{size[0]}x{size[1]} array of cores ({name}_core), {memory_ports} memory port(s)"
            if size else "one core")
    click.echo(f"{output}: module {name}, {what}, {cfg.lanes} lanes, {len(text) // 1024} KiB")


@main.command("compile")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False),
              help="Directory to write the compiled model to (a new or empty directory, or a "
                   "previous compiled model, replaced atomically).")
@_config_options
@click.option("--density", type=click.FloatRange(0.0, 1.0, min_open=True), default=1.0,
              show_default=True, help="Target weight density of pruned core layers.")
@click.option("--group-size", type=click.IntRange(0), default=0, show_default=True,
              help="Group pruning (seed 000 claims 11/16): group length, 0 = off.")
@click.option("--group-small", type=click.FloatRange(0.0, 1.0), default=0.05, show_default=True,
              help="Group pruning t5: a weight is small if |w| <= this * the layer's max |w|.")
@click.option("--group-max-small", type=click.IntRange(0), default=0, show_default=True,
              help="Group pruning t6: delete a group with more than this many small weights.")
@click.option("--keep-dense", multiple=True, metavar="NODE", help="Do not prune this node.")
@click.option("--host", "force_host", multiple=True, metavar="NODE",
              help="Run this node on the host even if the core could.")
@click.option("--random-weights", type=int, default=None, metavar="SEED",
              help="Substitute seeded Kaiming-normal weights (for placeholder-weight models).")
@click.option("--calibration", type=click.Path(exists=True, dir_okay=False),
              help="Calibration inputs (.npy / .npz, batch on axis 0); default: seeded normal.")
@click.option("--calibration-count", type=click.IntRange(1), default=4, show_default=True,
              help="How many seeded normal calibration inputs when --calibration is not given.")
@click.option("--dense", is_flag=True, help="Dense mode: no weight index, no activation "
              "threshold (the same computation without sparse skipping; a speedup baseline).")
@click.option("--optimize", type=click.Choice(["size", "speed"]), default="size",
              show_default=True,
              help="size: precise dependency tokens carried from loop to loop (few ROM "
                   "words, loads overlapping the compute); speed: the same tokens decided "
                   "from what each unit took itself only (no faster on the zoo and "
                   "larger, see bench/results/compiler.json; one core).")
@click.option("--neuron-threshold", type=int, default=0, show_default=True,
              help="Sparse processing unit (claim 5): keep input neurons with |x| > this "
                   "(int8 units) in core layers.")
@click.option("--neuron-groups", type=int, default=0, show_default=True,
              help="Neuron group pruning (claim 11): groups of this many channels (2, 4 or 8; "
                   "0 = off).")
@click.option("--t3", type=int, default=0, show_default=True,
              help="Neuron group pruning: a neuron is small if |x| <= t3.")
@click.option("--t4", type=int, default=0, show_default=True,
              help="Neuron group pruning: delete a group with more than t4 small neurons.")
@click.option("--mixed-path", type=click.Choice(["auto", "expand", "merge"]), default="auto",
              show_default=True, help="Direct neurons x stride weights: the cost model's choice "
              "per layer, or always expand strides to a bitmap (claim 9) / merge strides (claim 10).")
@click.option("--mesh", default="1x1", show_default=True, metavar="WxH",
              help="Compile for a tiled array of WxH cores (layers split across them, data "
                   "moved core to core with send/recv); 1x1 is the single core.")
@click.option("--unusable", multiple=True, metavar="X,Y",
              help="A core of the mesh not to use (repeatable); the layers go to the others.")
@click.option("--memory-ports", type=int, default=None, metavar="N",
              help="Array: external-memory (AXI4) ports, 1..width; the cores of a group of "
                   "columns share one.  Default: one per mesh column.")
@click.option("--split", type=click.Choice(["auto", "rows", "channels", "tiles", "images",
                                           "pipeline"]),
              default="auto", show_default=True,
              help="Array: how matrix layers split across cores: the cost model's choice, or "
              "always output rows / output channels / tiles of rows x channels (convolutions "
              "that have at least 2 rows and 2 channel blocks); 'images': a batch smaller "
              "than the array by images only (one core per image); 'pipeline': a batch "
              "(--batch N) as a stream of inputs through one stage of layers per core "
              "(throughput mode).")
@click.option("--placement", type=click.Choice(["mapper", "row-major"]), default="mapper",
              show_default=True, help="Array: place the parts with the seed-003 mapper, or "
              "row-major.")
@click.option("--batch", type=click.IntRange(1, 4096), default=1, show_default=True,
              help="The batch size that symbolic (dynamic) input dimensions take; the core "
                   "runs a batch image by image.")
@click.option("--schedule", "schedule_mode", type=click.Choice(["file", "greedy", "search"]),
              default="file", show_default=True,
              help="Program order of each core subgraph: the ONNX file's, a list scheduler's "
                   "balancing the units, or the fastest topological order found on the cost "
                   "model (seed 002; one core).")
@click.option("--split-threshold", type=click.IntRange(0), default=None, metavar="BYTES",
              help="Split operators whose operands (inputs, weights, outputs) exceed BYTES "
                   "into pieces (seed 002); default: the core's on-chip memory; 0: never.")
@click.option("--memory-budget", type=click.IntRange(1), default=None, metavar="BYTES",
              help="Bound the fast memory the activations occupy at any moment (seed 001): "
                   "activations share an arena by lifetime, and long-lived ones are swapped to "
                   "far memory until the plan fits (one core).")
@click.option("--swap-slack", type=float, default=0.0, show_default=True, metavar="CYCLES",
              help="Memory plan: swap only tensors whose timing slack exceeds this (th_tts).")
@click.option("--swap-min-bytes", type=click.IntRange(0), default=0, show_default=True,
              help="Memory plan: swap only tensors larger than this (th_s).")
@click.option("--swap-max", type=click.IntRange(0), default=0, show_default=True,
              help="Memory plan: swap at most this many tensors (N; 0: as many as needed).")
@click.option("--far-latency", type=click.IntRange(0, 65535), default=40, show_default=True,
              metavar="CYCLES", help="Memory plan: cycles a read burst waits in far memory "
              "(the golden model and the RTL testbench's RAM run the artifact with it).")
@click.option("--far-beat-cycles", type=click.IntRange(1, 15), default=2, show_default=True,
              help="Memory plan: cycles per 8-byte beat in far memory.")
@click.option("--swap-compression", type=click.Choice(["auto", "all", "off"]), default="auto",
              show_default=True,
              help="Memory plan: which swapped tensors are stored compressed in far memory "
                   "(stc / ldc: non-zero values and a mask per 64 values): auto: maps a ReLU "
                   "wrote whose measured density makes the stream smaller; all; or none.")
@click.option("--fast-memory", type=click.Choice(["external", "local"]), default="external",
              show_default=True,
              help="Memory plan: the fast memory is an arena of external memory, or the core's "
                   "local memory (the graph's inputs and outputs and maps crossing to the host "
                   "then live in far memory; --memory-budget defaults to its size).")
@click.option("--far-resident/--no-far-resident", default=True, show_default=True,
              help="Memory plan: when no set of swaps fits the budget, keep whole maps in far "
                   "memory (written and read there) until it fits.")
@click.option("--far-reads", type=click.Choice(["auto", "direct", "staged"]), default="auto",
              show_default=True,
              help="Memory plan: how kernels read a map kept in far memory: the way the cost "
                   "model finds cheapest, directly, or a band of rows at a time through a "
                   "staging buffer in fast memory.")
@click.option("--memory-profile", type=click.Path(dir_okay=False), default=None,
              help="Plot the memory profile (bytes live before and after the plan) to this "
                   ".png (with --memory-budget).")
@click.option("--json", "as_json", is_flag=True, help="Print the compile report as JSON.")
@_force_option
def compile_(model: str, output: str, core: str | None, density: float, group_size: int,
             group_small: float, group_max_small: int,
             keep_dense: tuple, force_host: tuple, random_weights: int | None,
             calibration: str | None, calibration_count: int, dense: bool, optimize: str,
             neuron_threshold: int, neuron_groups: int, t3: int, t4: int, mixed_path: str,
             mesh: str, unusable: tuple, memory_ports: int | None, split: str,
             placement: str, batch: int, schedule_mode: str, split_threshold: int | None,
             memory_budget: int | None,
             swap_slack: float, swap_min_bytes: int, swap_max: int, far_latency: int,
             far_beat_cycles: int, swap_compression: str, fast_memory: str,
             far_resident: bool, far_reads: str,
             memory_profile: str | None,
             as_json: bool, force: bool, **params) -> None:
    """Compile an ONNX MODEL to ROM images and a memory image in OUTPUT.

    OUTPUT may be a new or empty directory or a previous compiled model (replaced
    atomically); anything else needs --force."""
    from .compiler.frontend import load_onnx
    from .compiler.passes.neurons import NeuronOptions
    from .compiler.passes.memory_budget import MemoryOptions
    from .verif.timing import FarMemory
    from .compiler.passes.schedule import ScheduleOptions
    from .compiler.pipeline import CompileOptions, compile_model

    from .verif.mesh_program import parse_mesh

    size = parse_mesh(mesh)
    broken = tuple(_parse_core(u, size) for u in unusable)
    if memory_ports is not None:
        _memory_ports(size, memory_ports)  # a bad value fails before any output is made
    _output(output, "compiled model", inputs=[model, core, calibration], force=force)
    if memory_profile:
        if memory_budget is None and fast_memory != "local":
            raise SnpuError("--memory-profile plots the memory plan: give --memory-budget too")
        _output(memory_profile, "memory profile", "--memory-profile",
                inputs=[model, core, calibration], force=force)
    cfg = _load_config(core, **params)
    if fast_memory == "local" and memory_budget is None:
        memory_budget = cfg.local_bytes
    calib = None
    if calibration:
        calib = _read_inputs(calibration, load_onnx(model, batch=batch))
    opts = CompileOptions(config=cfg, density=density, group_size=group_size,
                          group_small=group_small, group_max_small=group_max_small,
                          keep_dense=keep_dense, random_weights=random_weights,
                          calibration=calib, calibration_count=calibration_count,
                          force_host=force_host, dense=dense, optimize=optimize,
                          neurons=NeuronOptions(neuron_threshold, neuron_groups, t3, t4, mixed_path),
                          mesh=size, unusable=broken, memory_ports=memory_ports,
                          split=split, placement=placement,
                          batch=batch, schedule=ScheduleOptions(mode=schedule_mode),
                          split_threshold=split_threshold,
                          memory=MemoryOptions(budget=memory_budget, th_tts=swap_slack,
                                               th_s=swap_min_bytes, n=swap_max,
                                               compress=swap_compression,
                                               far_resident=far_resident, far_reads=far_reads,
                                               fast=fast_memory,
                                               far=FarMemory(latency=far_latency,
                                                             beat_cycles=far_beat_cycles)))
    with _progress("compiling", -1) as tick:
        compiled = compile_model(model, opts, progress=tick)
    compiled.save(output)
    if memory_profile:
        from .compiler.memory_plot import plot_profile

        plot_profile(memory_profile, compiled.report["memory"], compiled.report["model"])
    if as_json:
        click.echo(json.dumps(compiled.report, indent=1))
        return
    _print_compile(compiled.report, output)


@main.command("run")
@click.argument("compiled", type=click.Path(exists=True, file_okay=False))
@click.option("--sim", type=click.Choice(["golden", "rtl"]), default="golden", show_default=True,
              help="Run the core segments on the golden model or on the RTL.")
@click.option("--input", "inputs", type=click.Path(exists=True, dir_okay=False),
              help="Input(s): .npy for a single-input model or .npz keyed by input name; "
                   "a leading axis of N runs N inputs.  Default: seeded normal inputs.")
@click.option("--count", type=click.IntRange(1), default=1, show_default=True,
              help="How many seeded normal inputs when --input is not given.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the default inputs.")
@click.option("--labels", type=click.Path(exists=True, dir_okay=False),
              help=".npy of integer class labels: report accuracy.")
@click.option("--memory", type=click.Choice(["hdl", "axiram"]), default="hdl", show_default=True,
              help="RTL external memory model.")
@click.option("--stall", type=float, default=0.0, show_default=True,
              help="RTL: probability of pausing each AXI handshake per cycle.")
@click.option("--no-onnxruntime", is_flag=True, help="Skip the onnxruntime comparison.")
@click.option("--out", type=click.Path(dir_okay=False), help="Write the outputs to this .npz.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@_force_option
def run_(compiled: str, sim: str, inputs: str | None, count: int, seed: int, labels: str | None,
         memory: str, stall: float, no_onnxruntime: bool, out: str | None, as_json: bool,
         force: bool) -> None:
    """Run a compiled model on the golden model or the RTL and check it: bit-exact against
    the int8 reference, and against onnxruntime's float output."""
    import numpy as np

    from .compiler import check, runtime
    from .compiler.artifact import Compiled

    if out:
        _output(out, "results .npz", "--out", inputs=[compiled, inputs, labels], force=force)
    model = Compiled.load(compiled)
    g = model.graph
    if inputs:
        xs = _read_inputs(inputs, g)
    else:
        rng = np.random.default_rng(seed)
        xs = [{i: rng.standard_normal(g.tensor(i).shape).astype(np.float32) for i in g.inputs}
              for _ in range(count)]
    if labels:
        try:
            y = np.load(labels, allow_pickle=False).reshape(-1)
        except (OSError, ValueError) as e:
            raise SnpuError(f"{labels}: cannot read labels ({e})") from None
        if y.size != len(xs) or y.dtype.kind not in "iu":
            raise SnpuError(f"{labels}: {y.size} labels of {y.dtype} for {len(xs)} inputs; "
                            "want one integer class per input")
    rtl_options = {"memory": memory, "stall": stall, "seed": seed} if sim == "rtl" else None
    with _progress(f"running {len(xs)} input(s) on the {sim}", len(xs) * len(model.segments)) as tick:
        reports = runtime.run_batch(model, xs, sim=sim, rtl_options=rtl_options, progress=tick)
    agreement = check.compare(model, xs, reports, onnxruntime=not no_onnxruntime)
    result = {"model": g.name, "sim": sim, **agreement.to_dict(),
              "core_cycles_per_input": [r.core_cycles for r in reports],
              **({"array_segments": [s for s in reports[0].segments if s["device"] == "array"]}
                 if any(s["device"] == "array" for s in reports[0].segments) else {}),
              "mac_pairs": sum(r.mac_pairs for r in reports),
              "dense_pairs": sum(r.dense_pairs for r in reports),
              "device_seconds_per_input": reports[0].device_seconds,
              "dispatch": reports[0].dispatch}
    if labels:
        result["accuracy"] = float(np.mean(np.array(agreement.run_top1) == y))
        if agreement.onnxruntime:
            result["accuracy_onnxruntime"] = float(np.mean(np.array(agreement.reference_top1) == y))
    if out:
        import io

        from .fileio import atomic_write

        buf = io.BytesIO()
        arrays = {o: np.stack([r.outputs[o] for r in reports]) for o in g.outputs}
        np.savez(buf, __snpu_format__=np.array("snpu-run-out/1"), **arrays)
        atomic_write(out, buf.getvalue())
    if as_json:
        click.echo(json.dumps(result, indent=1))
    else:
        _print_run(result)
    if agreement.bit_exact != len(xs):
        sys.exit(1)


def _read_inputs(path: str, graph) -> list[dict]:
    """Inputs from .npy / .npz: one run, or N runs along a leading batch axis."""
    import numpy as np

    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        why = "not a .npy or .npz array file" if "pickle" in str(e) else str(e)
        raise SnpuError(f"{path}: cannot read inputs ({why})") from None
    if isinstance(data, np.ndarray):
        if len(graph.inputs) != 1:
            raise SnpuError(f"{path}: the model has {len(graph.inputs)} inputs; give an .npz "
                            f"keyed by {', '.join(graph.inputs)}")
        arrays = {graph.inputs[0]: data}
    else:
        arrays = {k: data[k] for k in data.files}
        missing = [i for i in graph.inputs if i not in arrays]
        if missing:
            raise SnpuError(f"{path}: no array for model input(s) {', '.join(missing)}")
    from .compiler.frontend import check_input_array

    unknown = sorted(set(arrays) - set(graph.inputs))
    if unknown:
        raise SnpuError(f"{path}: array {unknown[0]!r} names no model input (inputs: "
                        f"{', '.join(graph.inputs)})")
    counts = set()
    for name in graph.inputs:
        want = graph.tensor(name).shape
        a = arrays[name]
        check_input_array(name, a, want, where=path)
        if a.shape == tuple(want):
            counts.add(1)
            arrays[name] = a[None]
        elif a.ndim == len(want) and a.shape[1:] == tuple(want[1:]) and want[0] == 1:
            counts.add(a.shape[0])
        elif a.ndim == len(want) + 1 and a.shape[1:] == tuple(want):
            counts.add(a.shape[0])
            arrays[name] = a.reshape(a.shape[0], *want[1:]) if want[0] == 1 else a
        else:
            raise SnpuError(f"{path}: input {name!r} has shape {a.shape}; the model wants "
                            f"{tuple(want)} (optionally with a leading batch axis)")
    if len(counts) != 1:
        raise SnpuError(f"{path}: inputs have different batch sizes {sorted(counts)}")
    n = counts.pop()
    return [{name: arrays[name][k].reshape(graph.tensor(name).shape) for name in graph.inputs}
            for k in range(n)]


def _parse_core(text: str, mesh: tuple[int, int]) -> tuple[int, int]:
    try:
        x, y = (int(v) for v in text.split(","))
    except ValueError:
        raise SnpuError(f"--unusable {text!r} is not X,Y (e.g. 1,0)") from None
    if not (0 <= x < mesh[0] and 0 <= y < mesh[1]):
        raise SnpuError(f"--unusable {text!r}: no core ({x}, {y}) in a {mesh[0]}x{mesh[1]} mesh")
    return x, y


def _print_compile(r: dict, output: str) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{r['model']}: {r['ops_on_core']} ops on the core, {r['ops_on_host']} on "
              f"the host, compiled in {r['compile_seconds']:.1f} s", show_header=True)
    for col in ("node", "op", "device", "weight density", "index", "tiles"):
        t.add_column(col)
    for layer in r["layers"]:
        dens = layer.get("density")
        t.add_row(layer["node"], layer["op"], layer["device"] + (
            f" ({layer['why_host']})" if layer.get("why_host") else ""),
            f"{dens:.3f}" if isinstance(dens, (int, float)) else "",
            str(layer.get("format", "")), str(layer.get("weight_tiles", "")))
    Console().print(t)
    segs = ", ".join(f"{s['kind']} ({s['instructions']} instructions)" if s["kind"] == "core"
                     else f"host ({s['nodes']} nodes)" for s in r["segments"])
    click.echo(f"segments: {segs}")
    split = r.get("split", {}).get("nodes", [])
    if split:
        click.echo(f"split by memory (pieces of <= {r['split']['threshold']} operand bytes): "
                   + ", ".join(f"{s['node']} x{s['pieces']} ({'/'.join(s['dimensions'])})"
                               for s in split))
    for s in r.get("schedule", {}).get("subgraphs", []):
        gain = 1 - s["chosen_cycles"] / s["file_cycles"] if s["file_cycles"] else 0.0
        click.echo(f"schedule: subgraph {s['subgraph']}: {len(s['blocks'])} blocks searched, "
                   f"estimated {s['file_cycles']} -> {s['chosen_cycles']} cycles "
                   f"({100 * gain:.1f} % faster{'' if s['changed'] else ', file order kept'})")
    if "memory" in r:
        m = r["memory"]
        swapped = ", ".join(s["tensor"] for s in m["swapped"]) or "none"
        resident = m.get("far_resident", [])
        click.echo(f"memory plan: {m['fast_bytes']} bytes of fast memory"
                   f"{' in the core local memory' if m.get('fast_memory') == 'local' else ''} (budget "
                   f"{m['budget']}; {m['fast_bytes_before']} without swapping), peak live "
                   f"{m['peak_before']} -> {m['peak_after']} bytes; swapped to far memory: "
                   f"{swapped} ({sum(s['bytes'] for s in m['swapped'])} bytes)"
                   + (f"; kept in far memory: {len(resident)} maps "
                      f"({sum(f['bytes'] for f in resident)} bytes, estimated "
                      f"+{sum(f['estimated_cycles'] for f in resident)} cycles)"
                      if resident else ""))
    if "mesh" in r:
        w, h = r["mesh"]["shape"]
        noc = [s["noc"] for s in r["segments"] if "noc" in s]
        pl = r["mesh"]["placement"]
        ports = r["mesh"].get("memory_ports", w)
        click.echo(f"array {w}x{h} ({len(r['mesh']['cores'])} cores used, {ports} memory "
                   f"port{'s' if ports > 1 else ''}, placement: "
                   f"{pl['method']}; byte-hops {pl['hop_bytes']} vs {pl['hop_bytes_row_major']} "
                   f"row-major): {sum(n['data_bytes'] for n in noc)} activation "
                   f"bytes over the NoC, "
                   f"{sum(n['flags'] for n in noc)} flags; {len(r['mesh']['local_tensors'])} "
                   "tensors in local memory")
        tp = r["mesh"].get("throughput")
        if tp:
            click.echo(f"a stream of {tp['images']} images: {tp['chosen']} (estimates: pipeline "
                       f"of {tp['stages']} stages x {tp['cores_per_stage']} core(s) "
                       f"~{tp['cycles_estimate']} cycles, data parallel "
                       f"~{tp['data_parallel_estimate']})")
        for layer in r["layers"]:
            if layer.get("split"):
                sp = layer["split"]
                click.echo(f"  {layer['node']}: {sp['kind']} over {sp['cores']} core(s) - {sp['why']}")
    click.echo(f"wrote {output}/ (model.json, mem.bin, seg*.hex, report.json)")


def _print_run(r: dict) -> None:
    n = r["inputs"]
    click.echo(f"{r['model']} on the {r['sim']}: {n} input(s), core cycles per input "
               f"{min(r['core_cycles_per_input'])}..{max(r['core_cycles_per_input'])}")
    dense = r["dense_pairs"]
    if dense:
        click.echo(f"MAC pairs {r['mac_pairs']} of {dense} dense "
                   f"({100 * r['mac_pairs'] / dense:.1f} %): sparse skipping removed "
                   f"{100 * (1 - r['mac_pairs'] / dense):.1f} % of the multiplies")
    for s in r.get("array_segments", []):
        cyc = s["cycles"]
        util = ", ".join(f"({k}) {100 * v.get('mx_busy', 0) / max(1, cyc):.0f} %"
                         for k, v in s["cores"].items())
        net = s.get("network") or {}
        click.echo(f"array segment {s['segment']} (first input): {cyc} cycles to the last core's "
                   f"halt; MX utilisation per core {util}; NoC {net.get('flits', 0)} flits "
                   f"({net.get('hop_flits', 0)} flit-hops); loads, stores and fetches "
                   f"{sum(v.get('dram_bytes', 0) for v in s['cores'].values())} bytes"
                   + (f" ({sum(s['port_bytes'])} through the memory ports)"
                      if s.get("port_bytes") else ""))
    dev = r.get("device_seconds_per_input") or {}
    if dev:
        mode = "pipelined across core and host" if r["dispatch"].get("pipelined") else "segment by segment"
        click.echo(f"time per input: core ({r['sim']}) {dev.get('core', 0):.3g} s, host (onnxruntime) "
                   f"{dev.get('host', 0):.3g} s; dispatched {mode}")
    exact = r["bit_exact_vs_int8_reference"]
    click.echo(f"int8 reference: {exact} of {n} bit-exact" + ("" if exact == n else
               " -- MISMATCH: " + "; ".join(r["mismatches"][:3])))
    if "top1_agreement_vs_onnxruntime" in r:
        click.echo(f"onnxruntime (float): top-1 agreement {100 * r['top1_agreement_vs_onnxruntime']:.1f} %, "
                   f"max abs error {r['max_abs_err_vs_onnxruntime']:.4g} "
                   f"({100 * r['max_rel_err_vs_onnxruntime']:.2f} % of the largest |output|)")
    elif r.get("note"):
        click.echo(r["note"])
    if "accuracy" in r:
        extra = (f" (float model on onnxruntime: {100 * r['accuracy_onnxruntime']:.1f} %)"
                 if "accuracy_onnxruntime" in r else "")
        click.echo(f"accuracy {100 * r['accuracy']:.1f} %{extra}")


def _print_rtl(s: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    c = s["counters"]
    t = Table(title=f"RTL: {s['cycles']} cycles, error {s['error']}", show_header=True)
    for col in ("unit", "instructions", "busy cycles", "token stall cycles"):
        t.add_column(col, justify="right" if col != "unit" else "left")
    for u in ("ld", "mx", "vx", "st"):
        t.add_row(u.upper(), str(c[f"{u}_instructions"]), str(c[f"{u}_busy"]), str(c[f"{u}_stall"]))
    Console().print(t)
    dense = c["dense_pairs"]
    click.echo(f"MAC pairs {c['pairs']} of {dense} dense, skipped {dense - c['pairs']}; "
               f"MX busy {c['mac_cycles']} cycles; DMA read {c['dma_read_bytes']} B, write "
               f"{c['dma_write_bytes']} B; {s['simulated_cycles_per_s'] or 0:.0f} cycles/s simulated")
    check = s["golden_check"]
    click.echo("golden model: match" if check == "match" else "golden model: MISMATCH: " + "; ".join(check))


def _print_stats(s: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"golden model: {s['cycles']} cycles (estimated)", show_header=True)
    t.add_column("unit")
    t.add_column("instructions", justify="right")
    t.add_column("busy cycles", justify="right")
    t.add_column("busy %", justify="right")
    for u, busy in s["busy"].items():
        pct = 100.0 * busy / s["cycles"] if s["cycles"] else 0.0
        t.add_row(u, str(s["instructions"][u]), str(busy), f"{pct:.1f}")
    Console().print(t)
    dense = s["dense_pairs"]
    frac = s["mac_pairs"] / dense if dense else 0.0
    click.echo(f"MAC pairs {s['mac_pairs']} of {dense} dense ({100 * frac:.1f} %), "
               f"skipped {s['pairs_skipped']}; DMA read {s['dma_read_bytes']} B, "
               f"write {s['dma_write_bytes']} B")


from . import cli_map  # noqa: E402,F401  (registers snpu topology / snpu map)
from . import cli_farm  # noqa: E402,F401  (registers snpu regress / snpu sweep)
from . import cli_synth  # noqa: E402,F401  (registers snpu synth)

if __name__ == "__main__":  # pragma: no cover
    main()
