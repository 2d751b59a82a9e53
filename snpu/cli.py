"""The ``snpu`` command line.

Every user error is printed as one line (``error: ...``) with exit status 1; usage errors
exit with status 2.  Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .config import CoreConfig
from .errors import SnpuError


def _load_config(path: str | None, **overrides) -> CoreConfig:
    cfg = CoreConfig.load(path) if path else CoreConfig()
    changes = {k: v for k, v in overrides.items() if v is not None}
    return CoreConfig.from_dict({**cfg.to_dict(), **changes}) if changes else cfg


def _config_options(f):
    """Options that override single core parameters (``--lanes 16`` ...)."""
    for name in reversed(("lanes", "nbuf_bytes", "nidx_bytes", "wbuf_bytes", "widx_bytes",
                          "acc_words", "obuf_bytes", "param_rows", "queue_depth", "token_depth")):
        f = click.option(f"--{name.replace('_', '-')}", name, type=int, default=None,
                         help=f"Core parameter {name} (overrides --core).")(f)
    return click.option("--core", "core", type=click.Path(exists=True, dir_okay=False),
                        help="Core configuration JSON (default: the standard core).")(f)


class _Group(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except SnpuError as e:
            click.echo(f"error: {e}", err=True)
            ctx.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="snpu")
def main() -> None:
    """snpu: sparse neural processing unit: assembler, golden model, RTL and compiler."""


# ------------------------------------------------------------------------------------------
@main.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="ROM image to write (.hex for $readmemh, .bin for raw little-endian).")
def asm(source: str, output: str) -> None:
    """Assemble SOURCE into a ROM image."""
    from .verif.asm import assemble
    from .verif.image import write_rom

    words = assemble(Path(source).read_text(), name=source)
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
@click.option("--mem", "mem", required=True, type=click.Path(exists=True, dir_okay=False),
              help="External-memory image (.bin); its manifest is the .json beside it.")
@click.option("--manifest", type=click.Path(exists=True, dir_okay=False),
              help="Manifest, if not beside the image.")
@_config_options
@click.option("--rtl", is_flag=True, help="Run on the RTL (Verilator via cocotb) instead of the "
              "golden model; the testbench also checks the result against the golden model.")
@click.option("--memory", type=click.Choice(["hdl", "axiram"]), default="hdl", show_default=True,
              help="RTL external memory: AXI RAM inside the simulation, or cocotbext-axi's AxiRam.")
@click.option("--stall", type=float, default=0.0, show_default=True,
              help="RTL: probability of pausing each AXI handshake per cycle.")
@click.option("--fst", "waves", type=click.Path(dir_okay=False), help="RTL: write waves (.fst).")
@click.option("--out", "out", type=click.Path(file_okay=False),
              help="Write every output region as .npy and the final memory image here.")
@click.option("--expect", type=click.Path(exists=True, dir_okay=False),
              help=".npz of expected arrays, keyed by region name; mismatches fail.")
@click.option("--json", "as_json", is_flag=True, help="Print the run statistics as JSON.")
@click.option("--no-race-check", is_flag=True, help="Skip the check that units are ordered.")
def sim(rom: str, mem: str, manifest: str | None, core: str | None, out: str | None,
        expect: str | None, as_json: bool, no_race_check: bool, rtl: bool, memory: str,
        stall: float, waves: str | None, **params) -> None:
    """Run ROM against the memory image MEM on the golden model (or, with --rtl, the RTL)."""
    import numpy as np

    from .verif import golden
    from .verif.image import MemoryImage, read_rom

    cfg = _load_config(core, **params)
    words = read_rom(rom)
    image = MemoryImage.load(mem, manifest)
    if rtl:
        from .verif import rtl_sim

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
        outdir = Path(out)
        outdir.mkdir(parents=True, exist_ok=True)
        for r in image.regions.values():
            if r.kind == "output":
                from .fileio import atomic_write
                import io

                buf = io.BytesIO()
                np.save(buf, image.read(r.name))
                atomic_write(outdir / f"{r.name}.npy", buf.getvalue())
        image.save(outdir / "final.bin")
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


@main.command()
@_config_options
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Verilog file to write.")
@click.option("--name", default="snpu_core", show_default=True, help="Top module name.")
def verilog(core: str | None, output: str, name: str, **params) -> None:
    """Write standalone Verilog of one core (AXI4 master, control/status ports)."""
    from amaranth.back import verilog as amaranth_verilog

    from .fileio import atomic_write
    from .rtl.core import Core

    cfg = _load_config(core, **params)
    with _progress("generating Verilog", 0):
        text = amaranth_verilog.convert(Core(cfg), name=name)
    atomic_write(output, text)
    click.echo(f"{output}: module {name}, {cfg.lanes} lanes, {len(text) // 1024} KiB")


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


class _progress:
    """A rich progress bar for long work, silent when stderr is not a terminal."""

    def __init__(self, what: str, total: int):
        self.what, self.total = what, total
        self._bar = None

    def __enter__(self):
        if sys.stderr.isatty() and self.total == 0:  # indeterminate: a spinner
            from rich.console import Console

            self._bar = Console(stderr=True).status(self.what + " ...")
            self._bar.start()
            return None
        if sys.stderr.isatty() and self.total > 2000:
            from rich.progress import Progress

            self._bar = Progress(transient=True)
            self._bar.start()
            task = self._bar.add_task(self.what, total=self.total)
            return lambda done: self._bar.update(task, completed=done)
        return None

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.stop()
        return False


if __name__ == "__main__":  # pragma: no cover
    main()
