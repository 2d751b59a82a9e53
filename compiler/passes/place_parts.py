"""Pass: place the parts of an array program onto the physical cores (seed 003's mapper).

:mod:`.parallelize` gives each layer's parts to the usable cores in row-major order; those
are *virtual* cores here.  The communication graph has one vertex per virtual core and an
edge weighted by the activation bytes the two exchange over the network in the whole
program (:class:`.codegen_mesh.TransferPlan`: halo rows, row blocks, channel blocks; flags
for shared-memory tensors carry no payload).  The seed-003 placement places it: recursive
bisection of the core rectangle with greedy graph-growing bisection of the graph
(:func:`..mapping.place.place`), then force-directed swap refinement
(:func:`..mapping.force.force_refine`).  The placement is kept when its hop traffic
(bytes x Manhattan hops) is below row-major's, and the parts are renamed to the physical
cores.  ``graph.meta["mesh"]["placement"]`` records both hop traffics.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from snpu.errors import CompileError

from ..ir import Graph
from ..mapping.force import force_refine, hop_traffic
from ..mapping.place import place
from ..mapping.topology import from_edges
from .codegen_mesh import TransferPlan
from .parallelize import VIEW_OPS


def traffic(g: Graph) -> dict[tuple[tuple[int, int], tuple[int, int]], int]:
    """(source core, destination core) -> activation bytes sent over the network."""
    root = g.meta["storage_root"]
    local = set(g.meta["local"])
    out: dict = {}
    nodes = {n.name: n for n in g.nodes}
    for sg in g.meta["subgraphs"]:
        if sg["device"] != "core":
            continue
        plan = TransferPlan(g, set(sg["nodes"]), g.meta["layouts"], local, root)
        for name in sg["nodes"]:
            n = nodes[name]
            if n.op in VIEW_OPS:
                continue
            for part in n.meta["parts"]:
                for tr in plan.sends(n, part):
                    size = sum(b for _, b in tr.runs)
                    if size:
                        out[(tr.src, tr.dst)] = out.get((tr.src, tr.dst), 0) + size
    return out


def place_parts(graph: Graph, seed: int = 0, method: str = "mapper") -> Graph:
    """``method``: ``mapper`` (keep the mapper's placement when it beats row-major) or
    ``row-major`` (the naive baseline)."""
    if method not in ("mapper", "row-major"):
        raise CompileError(f"placement {method!r}: mapper or row-major")
    g = graph.copy()
    w, h = g.meta["mesh"]["shape"]
    cores = [tuple(c) for c in g.meta["mesh"]["cores"]]
    index = {c: i for i, c in enumerate(cores)}
    flows = traffic(g)
    src = np.array([index[a] for a, _ in flows], np.int64)
    dst = np.array([index[b] for _, b in flows], np.int64)
    t = from_edges(len(cores), src, dst, np.array(list(flows.values()), np.int64),
                   name="array traffic")
    usable = np.zeros((h, w), bool)
    for x, y in cores:
        usable[y, x] = True
    row_major = np.array(cores, np.int64).reshape(-1, 2)
    qw = t.weights.astype(np.int64)
    before = int(hop_traffic(t.indptr, t.indices, qw, row_major))
    pos = place(t, usable, 4, np.random.default_rng(seed))
    force = force_refine(t, pos, usable)
    after = int(hop_traffic(t.indptr, t.indices, qw, pos))
    keep = after < before and method == "mapper"
    physical = {c: (tuple(int(v) for v in pos[i]) if keep else c) for i, c in enumerate(cores)}
    for n in g.nodes:
        if "parts" in n.meta:
            n.meta["parts"] = [dataclasses.replace(p, core=physical[p.core]) for p in n.meta["parts"]]
    g.meta["mesh"] = {**g.meta["mesh"], "placement": {
        "method": "seed-003 mapper: recursive bisection + force-directed swaps" if keep
        else "row-major" + (" (the mapper found no lower hop traffic)" if method == "mapper" else ""),
        "hop_bytes_row_major": before, "hop_bytes": min(before, after),
        "force_swaps": force["swaps"],
        "virtual_to_physical": {f"{a[0]},{a[1]}": list(b) for a, b in physical.items()}}}
    return g
