"""Neuron-level mapping onto a many-core mesh (seed 003): the whole flow in one place.

    topology (store or in memory)
      -> coarsen        levels of heavy-edge matching (coarsen.py), each level written to a
                        store in the work directory with its projection, the finer level
                        dropped from memory
      -> partition      recursive greedy graph-growing bisection of the coarsest level until
                        every part fits a core (bisect.py)
      -> uncoarsen      refine (refine.py: greedy moves, then fm.py: FM hill climbing with
                        rollback), project to the finer level (read back from its store),
                        refine again ... down to the neurons
      -> groups         every final part is a neuron group
      -> place          groups onto the mesh by recursive bisection of the core rectangle
                        (place.py)
      -> force          force-directed swap refinement (force.py)
      -> result         neuron -> group -> core (x, y), metrics (metrics.py)
"""

from __future__ import annotations

import resource
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from . import store
from .bisect import recursive_partition
from .coarsen import coarsen_once, quotient
from .fm import fm_refine
from .force import force_refine
from .metrics import evaluate, placement_metrics, row_major_positions
from .refine import edge_cut, rebalance, refine
from .topology import Topology, TopologyError


@dataclass(frozen=True)
class MapOptions:
    capacity: int = 1024              #: neurons (vertex size) per core
    fill: float = 0.98                #: plan cores ~this full (slack for coarse packing)
    mesh: tuple[int, int] = (32, 32)  #: cores (width, height)
    unusable: tuple[tuple[int, int], ...] = ()  #: (x, y) of broken cores
    merge_fraction: float = 1 / 15    #: coarsening: merged size <= capacity * this
    min_reduction: float = 0.2        #: stop coarsening when a level removes less
    tries: int = 4                    #: random tries for matching and bisection (4-8)
    refine_passes: int = 8            #: k-way refinement passes per level
    fm_passes: int = 8                #: FM hill-climbing passes per level after them (0: off)
    fm_patience: int = 5000           #: FM: moves without a new best cut before a pass stops
    force_top: float = 0.05           #: force refinement: fraction of groups moved per round
    force_reach: int = 2              #: cores searched in the force direction
    force_rounds: int = 200
    literal_matching: bool = False    #: see coarsen.py
    seed: int = 0
    store_levels: bool = True         #: keep coarse levels in stores, not in memory

    def check(self) -> None:
        if self.capacity < 1:
            raise TopologyError(f"capacity must be >= 1, got {self.capacity}")
        if min(self.mesh) < 1:
            raise TopologyError(f"mesh must be at least 1x1, got {self.mesh}")
        if not 0.5 <= self.fill <= 1.0:
            raise TopologyError(f"fill must be in 0.5..1, got {self.fill}")
        if not 4 <= self.tries <= 8:
            raise TopologyError(f"tries must be 4..8 (the document's range), got {self.tries}")
        for x, y in self.unusable:
            if not (0 <= x < self.mesh[0] and 0 <= y < self.mesh[1]):
                raise TopologyError(f"unusable core ({x}, {y}) is outside the {self.mesh[0]}x{self.mesh[1]} mesh")


@dataclass
class Mapping:
    group: np.ndarray            #: [V] neuron -> group
    position: np.ndarray         #: [G, 2] group -> core (x, y)
    metrics: dict
    quotient: Topology           #: the group graph (connections between groups)
    timings: dict = field(default_factory=dict)
    levels: list[dict] = field(default_factory=list)

    @property
    def core(self) -> np.ndarray:
        """[V, 2] neuron -> core (x, y)."""
        return self.position[self.group]


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def map_topology(source: Topology | str | Path, options: MapOptions = MapOptions(), *,
                 progress: Callable[[str, int, int], None] | None = None,
                 workdir: str | Path | None = None) -> Mapping:
    options.check()
    tick = progress or (lambda phase, done, total: None)
    rng = np.random.default_rng(options.seed)
    timings: dict[str, float] = {}
    t_all = time.time()

    t0 = time.time()
    if isinstance(source, Topology):
        g = source
        src_path = None
    else:
        src_path = Path(source)
        g = store.read(src_path, flags=False, progress=lambda d, n: tick("read", d, n))
    timings["read"] = round(time.time() - t0, 3)
    V, cap = g.n_vertices, options.capacity
    if V == 0:
        raise TopologyError(f"{g.name}: the topology has no vertices")
    if int(g.sizes.max()) > cap:
        raise TopologyError(f"{g.name}: vertex {int(np.argmax(g.sizes))} has size "
                            f"{int(g.sizes.max())}, more than a core's capacity {cap}")
    usable = np.ones((options.mesh[1], options.mesh[0]), bool)
    for x, y in options.unusable:
        usable[y, x] = False
    cores_needed = -(-g.total_size // cap)
    if cores_needed > usable.sum():
        raise TopologyError(f"{g.name}: {g.total_size} neurons need at least {cores_needed} cores of "
                            f"{cap}; the mesh has {int(usable.sum())} usable")

    tmp = Path(tempfile.mkdtemp(prefix="snpu-map-", dir=workdir))
    try:
        # ---- coarsen
        t0 = time.time()
        max_size = max(2, int(cap * options.merge_fraction))
        levels: list[dict] = [{"vertices": V, "connections": g.n_edges}]
        # how to get level k back: the source store, a level store, or the graph itself
        level_src: list[Topology | Path] = [src_path if src_path is not None else g]
        cmaps: list[np.ndarray | Path] = []   # cmaps[k]: level k vertex -> level k + 1 vertex
        while True:
            lv = coarsen_once(g, max_size, options.tries, rng, options.literal_matching)
            reduction = 1 - lv.graph.n_vertices / g.n_vertices
            if reduction <= 0:
                break
            k = len(levels)
            lv.graph.name = f"{g.name}@{k}"
            levels.append({"vertices": lv.graph.n_vertices, "connections": lv.graph.n_edges,
                           "removed_weight": lv.removed_weight, "reduction": round(reduction, 3)})
            if options.store_levels:
                p = tmp / f"level{k}.zip"
                store.write(p, lv.graph, level=k, projection=lv.cmap)
                level_src.append(p)
                cmaps.append(p)
            else:
                level_src.append(lv.graph)
                cmaps.append(lv.cmap)
            g = lv.graph  # the finer level is no longer referenced here
            tick("coarsen", k, k)
            if reduction < options.min_reduction:
                break
        timings["coarsen"] = round(time.time() - t0, 3)

        # ---- initial partition of the coarsest level
        t0 = time.time()
        parts = min(int(usable.sum()), max(cores_needed, int(np.ceil(g.total_size / (cap * options.fill)))))
        part = recursive_partition(g, cap, options.tries, rng, parts, strict=False)
        timings["partition"] = round(time.time() - t0, 3)
        cut = int(edge_cut(g.indptr, g.indices, g.weights, part))
        levels[-1]["initial_cut"] = cut

        # ---- uncoarsen with refinement
        t0 = time.time()
        nparts = int(part.max()) + 1
        last = len(level_src) - 1
        for k in range(last, -1, -1):
            gk = g if k == last else level_src[k]
            if isinstance(gk, Path):
                gk = store.read(gk, flags=False)
            if k < last:
                cm = cmaps[k]
                cm = store.read_projection(cm) if isinstance(cm, Path) else cm
                part = part[cm]
            load = np.bincount(part, weights=gk.sizes, minlength=nparts).astype(np.int64)
            over = 0
            if load.max() > cap:  # the coarse packing left a part over capacity
                over = int(rebalance(gk.indptr, gk.indices, gk.weights, gk.sizes, part, load, cap,
                                     rng.permutation(gk.n_vertices)))
                levels[k]["rebalanced"] = True
                cut = int(edge_cut(gk.indptr, gk.indices, gk.weights, part))
            if k == 0 and over:
                raise TopologyError(f"{g.name}: could not bring every core within capacity {cap} "
                                    f"({over} over); use a larger mesh or capacity, or a lower "
                                    f"fill (now {options.fill}) for coarse vertices")
            # projection keeps the cut: a finer level starts where the coarser one ended
            moves, gain = refine(gk.indptr, gk.indices, gk.weights, gk.sizes, part, load, cap,
                                 rng.permutation(gk.n_vertices), options.refine_passes)
            fm_gain = fm_moves = 0
            if options.fm_passes:
                fm_gain, fm_moves = fm_refine(gk.indptr, gk.indices, gk.weights, gk.sizes, part,
                                              load, cap, rng, options.fm_passes,
                                              options.fm_patience)
            levels[k].update({"cut_before_refinement": cut, "moves": int(moves),
                              "fm_moves": fm_moves, "fm_gain": fm_gain,
                              "cut_after_refinement": cut - int(gain) - fm_gain})
            cut -= int(gain) + fm_gain
            g = gk
            tick("uncoarsen", last + 1 - k, last + 1)
        timings["uncoarsen"] = round(time.time() - t0, 3)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    # ---- groups: drop parts refinement emptied
    used, group = np.unique(part, return_inverse=True)
    group = group.astype(np.int32)
    q = quotient(g, group, used.size, name=f"{g.name} groups")

    t0 = time.time()
    pos = place(q, usable, options.tries, rng)
    timings["place"] = round(time.time() - t0, 3)
    naive = row_major_positions(q.n_vertices, options.mesh[0])
    t0 = time.time()
    force = force_refine(q, pos, usable, top=options.force_top, reach=options.force_reach,
                         max_rounds=options.force_rounds)
    timings["force"] = round(time.time() - t0, 3)
    tick("force", 1, 1)
    metrics = evaluate(g, q, group, pos, cap, options.mesh)
    metrics["seconds_per_phase"] = timings
    naive_m = placement_metrics(q, naive, options.mesh)
    metrics.update({
        "hop_traffic_after_placement": force["hop_traffic_before"],
        "force_rounds": force["rounds"], "force_swaps": force["swaps"],
        "hop_traffic_row_major": naive_m["hop_traffic"],
        "busiest_link_load_row_major": naive_m["busiest_link_load"],
        "levels": len(levels), "seconds": round(time.time() - t_all, 3),
        "peak_rss_mb": round(_rss_mb(), 1)})
    return Mapping(group, pos, metrics, q, timings, levels)


from .place import place  # noqa: E402  (kept last: place imports bisect)
