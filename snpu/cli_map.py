"""``snpu topology`` and ``snpu map``: neuron-level mapping onto a many-core mesh (seed 003)."""

from __future__ import annotations

import io
import json
import sys

import click

from .cli_base import _force_option, _output, main
from .errors import SnpuError


class _phases:
    """One rich progress bar per phase; silent when stderr is not a terminal."""

    def __enter__(self):
        self.tasks = {}
        self.bar = None
        if sys.stderr.isatty():
            from rich.progress import Progress

            self.bar = Progress(transient=False)
            self.bar.start()
        return self.tick

    def tick(self, phase: str, done: int, total: int) -> None:
        if self.bar is None:
            return
        if phase not in self.tasks:
            self.tasks[phase] = self.bar.add_task(phase, total=total)
        self.bar.update(self.tasks[phase], completed=done, total=total)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False


def _mesh(value: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in value.lower().split("x"))
    except ValueError:
        raise SnpuError(f"--mesh {value!r}: expected WIDTHxHEIGHT, e.g. 32x32") from None
    return w, h


def _core(value: str) -> tuple[int, int]:
    try:
        x, y = (int(v) for v in value.split(","))
    except ValueError:
        raise SnpuError(f"--unusable {value!r}: expected X,Y") from None
    return x, y


@main.group()
def topology() -> None:
    """Make, import and inspect neuron topology stores (varint zip files)."""


@topology.command("generate")
@click.argument("kind", type=click.Choice(["layered", "dense", "small-world"]))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
@click.option("--layers", type=int, default=16, show_default=True, help="layered: layers")
@click.option("--side", type=int, default=250, show_default=True, help="layered: neurons per layer side")
@click.option("--radius", type=int, default=1, show_default=True, help="layered: window radius")
@click.option("--sizes", default="784,512,512,10", show_default=True, help="dense: layer sizes")
@click.option("--n", "n", type=int, default=100000, show_default=True, help="small-world: vertices")
@click.option("--k", "k", type=int, default=8, show_default=True, help="small-world: ring neighbours")
@click.option("--p", "p", type=float, default=0.1, show_default=True, help="small-world: rewiring probability")
@click.option("--max-weight", type=int, default=1, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@_force_option
def generate_(kind, output, layers, side, radius, sizes, n, k, p, max_weight, seed, force) -> None:
    """Generate a topology and write it as a store."""
    from .compiler.mapping import generate, store

    _output(output, "topology store", force=force)
    if kind == "layered":
        t = generate.layered(layers, side, radius, max_weight=max_weight, seed=seed)
    elif kind == "dense":
        t = generate.dense([int(v) for v in sizes.split(",")], max_weight=max_weight, seed=seed)
    else:
        t = generate.small_world(n, k, p, max_weight=max_weight, seed=seed)
    with _phases() as tick:
        store.write(output, t, progress=lambda d, total: tick("write", d, total))
    click.echo(f"{output}: {t.name}, {t.n_vertices} vertices, {t.n_edges} connections")


@topology.command("import")
@click.argument("source", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
@click.option("--max-connections", type=int, default=50_000_000, show_default=True,
              help="ONNX, neuron granularity: refuse models with more synapses than this.")
@click.option("--granularity", type=click.Choice(["neuron", "channel-block"]), default="neuron",
              show_default=True, help="ONNX: a vertex per neuron, or per block of channels x "
              "rows (the synapses between blocks summed): for networks too large for neurons.")
@click.option("--channel-block", type=click.IntRange(1), default=8, show_default=True,
              help="channel-block granularity: channels per block.")
@click.option("--vertex-limit", type=click.IntRange(1), default=1024, show_default=True,
              help="channel-block granularity: most neurons in one block (at most the cores' "
                   "capacity).")
@_force_option
def import_(source: str, output: str, max_connections: int, granularity: str,
            channel_block: int, vertex_limit: int, force: bool) -> None:
    """An ONNX model (neuron level or channel blocks) or an edge list (src dst [weight] per
    line) -> store."""
    from .compiler.mapping import importers, store

    _output(output, "topology store", inputs=[source], force=force)
    if source.endswith(".onnx") and granularity == "channel-block":
        t = importers.from_onnx_blocks(source, channel_block=channel_block,
                                       vertex_limit=vertex_limit)
    elif source.endswith(".onnx"):
        t = importers.from_onnx(source, max_connections=max_connections)
    else:
        t = importers.from_edge_list(source)
    store.write(output, t)
    click.echo(f"{output}: {t.name}, {t.n_vertices} vertices, {t.n_edges} connections")


@topology.command("info")
@click.argument("store_path", type=click.Path(dir_okay=False))
def info(store_path: str) -> None:
    """Print a store's header (and check that every member reads)."""
    from .compiler.mapping import store

    t = store.read(store_path)
    t.check()
    meta = store.read_meta(store_path)
    meta.update({"total_size": t.total_size, "total_weight": t.total_weight})
    click.echo(json.dumps(meta, indent=1))


@main.command("map")
@click.argument("store_path", type=click.Path(dir_okay=False))
@click.option("--mesh", default="32x32", show_default=True, help="Cores, WIDTHxHEIGHT.")
@click.option("--capacity", type=click.IntRange(1), default=1024, show_default=True,
              help="Neurons per core.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Mapping .npz: group [V], core [V, 2], position [G, 2], metrics.")
@click.option("--unusable", multiple=True, metavar="X,Y", help="A broken core (repeatable).")
@click.option("--tries", type=click.IntRange(4, 8), default=4, show_default=True,
              help="Random tries for matching and bisection.")
@click.option("--merge-fraction", type=float, default=1 / 15, show_default=True,
              help="Coarsening: merged size <= capacity * this.")
@click.option("--min-reduction", type=float, default=0.2, show_default=True,
              help="Stop coarsening when a level removes fewer vertices than this fraction.")
@click.option("--force-top", type=float, default=0.05, show_default=True,
              help="Force refinement: fraction of groups considered per round.")
@click.option("--force-rounds", type=int, default=200, show_default=True)
@click.option("--fill", type=click.FloatRange(0.5, 1.0), default=0.98, show_default=True,
              help="Plan cores about this full (lower it for coarse vertices, e.g. channel "
                   "blocks: more slack to pack them).")
@click.option("--fm-passes", type=click.IntRange(0), default=8, show_default=True,
              help="FM hill-climbing refinement passes per level (0: greedy refinement only).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--heatmap", type=click.Path(dir_okay=False),
              help="Write a core-load / link-traffic image (.png).")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
@_force_option
def map_(store_path, mesh, capacity, output, unusable, tries, merge_fraction, min_reduction,
         force_top, force_rounds, fill, fm_passes, seed, heatmap, as_json, force) -> None:
    """Map the neurons of a topology store onto the cores of a 2-D mesh."""
    import numpy as np

    from .compiler.mapping import store
    from .compiler.mapping.mapper import MapOptions, map_topology
    from .fileio import atomic_write

    _output(output, "results .npz", inputs=[store_path], force=force)
    if heatmap:
        if not heatmap.lower().endswith(".png"):
            raise SnpuError(f"--heatmap {heatmap}: the heatmap is a PNG image; name it .png")
        _output(heatmap, "heatmap", "--heatmap", inputs=[store_path, output], force=force)
    opts = MapOptions(capacity=capacity, mesh=_mesh(mesh), unusable=tuple(_core(u) for u in unusable),
                      tries=tries, merge_fraction=merge_fraction, min_reduction=min_reduction,
                      force_top=force_top, force_rounds=force_rounds, fill=fill,
                      fm_passes=fm_passes, seed=seed)
    with _phases() as tick:
        m = map_topology(store_path, opts, progress=tick)
    buf = io.BytesIO()
    np.savez_compressed(buf, __snpu_format__=np.array("snpu-mapping/1"),
                        group=m.group, core=m.core.astype(np.int32),
                        position=m.position.astype(np.int32), metrics=json.dumps(m.metrics))
    atomic_write(output, buf.getvalue())
    if heatmap:
        from .compiler.mapping.heatmap import heatmap as draw

        t = store.read(store_path)
        draw(heatmap, t, m.quotient, m.group, m.position, capacity, opts.mesh, title=t.name)
    if as_json:
        click.echo(json.dumps(m.metrics, indent=1))
        return
    x = m.metrics
    click.echo(f"{output}: {x['vertices']} neurons, {x['connections']} connections -> "
               f"{x['groups']} groups on a {opts.mesh[0]}x{opts.mesh[1]} mesh in {x['seconds']} s")
    click.echo(f"  edge cut {x['edge_cut']} ({100 * x['edge_cut_fraction']:.1f} % of the weight), "
               f"max core load {x['max_core_load']} / {capacity}")
    click.echo(f"  hop traffic {x['hop_traffic']} (row-major placement {x['hop_traffic_row_major']}, "
               f"before force refinement {x['hop_traffic_after_placement']}), busiest link "
               f"{x['busiest_link_load']} (row-major {x['busiest_link_load_row_major']})")
    click.echo(f"  peak RSS {x['peak_rss_mb']} MB")
