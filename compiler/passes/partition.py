"""Pass: partition the graph across devices (seed 004, ``docs/compiler.md``).

1. Nodes are topologically sorted; a node's *depth* is one more than its deepest
   predecessor.
2. Each node carries its *device support information*: the set of devices that can run it.
   The host (the float semantics of :mod:`..ops`) runs every operator; the core runs the
   ops of ``ops.CORE_OPS`` when their attributes are within its limits
   (:func:`core_support`).  A node both can run is *preferred* on the core (that is where
   the work belongs); the set, the choice and, for a host node, why the core cannot run it
   are recorded in ``node.meta`` (``device_support``, ``device``, ``core_reason``).
3. Partition loop: the candidate is the unpartitioned node of least depth (ties: the
   topological order).  It starts a subgraph on its preferred device; its predecessors and
   successors are targets; a target joins when it passes the *history* check (not yet
   partitioned), the *device* check (the subgraph's device is in its support set) and the
   *continuity* check (with it, the contracted graph still has no cycle).  Growth repeats
   until nothing changes; a candidate that cannot grow is a subgraph on its own.
4. The finished subgraph is contracted into one node and the depths of the contracted
   graph are recomputed before the next candidate is taken, until every node is
   partitioned.
5. The result (``graph.meta["subgraphs"]``) lists the subgraphs in dependency order with
   their device and final depth: what the runtime dispatches.
"""

from __future__ import annotations

from dataclasses import dataclass, field


from snpu.config import CoreConfig

from ..ir import Graph, Node
from .. import ops
from .split import pooling_misfit

DEVICES = ("core", "host")


@dataclass
class Subgraph:
    id: int
    device: str
    nodes: list[str] = field(default_factory=list)


def core_support(g: Graph, n: Node) -> str | None:
    """``None`` if the core can run ``n``, else the reason it cannot."""
    if n.op not in ops.CORE_OPS:
        return f"{n.op} has no core kernel"
    x = g.tensor(n.inputs[0])
    rank = len(x.shape) if x.shape is not None else 0
    odd = [t for t in list(n.inputs) + list(n.outputs)
           if t and not g.tensor(t).is_const and g.tensor(t).dtype != "float32"]
    if odd:
        return f"tensor {odd[0]!r} is {g.tensor(odd[0]).dtype} (the core computes float32 models in int8)"
    if n.op == "Conv":
        if rank != 4 or g.const(n.inputs[1]) is None:
            return "needs a 4-D input and constant weights"
        if any(d != 1 for d in n.attrs.get("dilations", [1, 1])):
            return "dilated convolution"
    if n.op in ("Gemm", "MatMul"):
        w = g.const(n.inputs[1])
        if w is None or rank != 2 or w.ndim != 2 or n.attrs.get("transA", 0):
            return "needs a 2-D input and a constant 2-D weight"
        if n.op == "Gemm" and (float(n.attrs.get("alpha", 1)) != 1 or float(n.attrs.get("beta", 1)) != 1):
            return "alpha / beta other than 1"
        if len(n.inputs) > 2 and n.inputs[2] and g.const(n.inputs[2]) is None:
            return "bias must be constant"
    if n.op in ("MaxPool", "AveragePool"):
        ks = n.attrs.get("kernel_shape", [])
        if rank != 4 or len(ks) != 2 or max(ks) > 255:
            return "2-D pooling windows up to 255"
    if n.op == "GlobalAveragePool" and rank != 4:
        return "global pooling of a 4-D input only"
    if n.op in ("Add", "Sum"):
        shapes = {g.tensor(i).shape for i in n.inputs}
        if len(shapes) != 1 or any(g.tensor(i).is_const for i in n.inputs):
            return "element-wise add of equal shapes only"
    if n.op == "Concat":
        if int(n.attrs.get("axis", 0)) % max(rank, 1) != 1:
            return "concatenation along channels only"
        if any(g.tensor(i).is_const for i in n.inputs):
            return "concatenation of a constant"
        if len(set(n.inputs)) != len(n.inputs) or any(
                c is not n and c.op == "Concat" for i in n.inputs for c in g.consumers().get(i, [])):
            return ("an input is concatenated twice (the core writes each input into its slice "
                    "of the output; it would need a copy)")
    if n.op in ("Flatten", "Reshape"):
        y = g.tensor(n.outputs[0])
        if rank not in (2, 4) or y.shape is None or len(y.shape) != 2 or y.shape[0] != x.shape[0]:
            return "only flattening to [N, features]"
    if n.op == "Affine" and rank not in (2, 4):
        return "per-channel affine on 2-D or 4-D tensors"
    return None


def _edges(g: Graph) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    prod = g.producers()
    preds = {n.name: set() for n in g.nodes}
    succs = {n.name: set() for n in g.nodes}
    for n in g.nodes:
        for i in n.inputs:
            p = prod.get(i)
            if p is not None:
                preds[n.name].add(p.name)
                succs[p.name].add(n.name)
    return preds, succs


def depths(order: list[str], preds: dict[str, set[str]]) -> dict[str, int]:
    d: dict[str, int] = {}
    for v in order:
        d[v] = 1 + max((d[p] for p in preds[v]), default=0)
    return d


def _quotient(assign: dict[str, int], preds: dict[str, set[str]]) -> dict[int, set[int]]:
    """Predecessors of every group of the contracted graph (nodes grouped by ``assign``)."""
    qpreds: dict[int, set[int]] = {}
    for v, ps in preds.items():
        a = assign[v]
        qpreds.setdefault(a, set()).update(assign[p] for p in ps if assign[p] != a)
    return qpreds


def _quotient_order(qpreds: dict[int, set[int]]) -> list[int] | None:
    """A topological order of the contracted graph, or ``None`` if it has a cycle."""
    indeg = {a: len(ps) for a, ps in qpreds.items()}
    succs: dict[int, list[int]] = {a: [] for a in qpreds}
    for a, ps in qpreds.items():
        for p in ps:
            succs[p].append(a)
    ready = [a for a, k in indeg.items() if k == 0]
    order = []
    while ready:
        a = ready.pop()
        order.append(a)
        for s in succs[a]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return order if len(order) == len(qpreds) else None


def _acyclic(assign: dict[str, int], preds: dict[str, set[str]]) -> bool:
    """The continuity check: is the contracted graph still a DAG?"""
    return _quotient_order(_quotient(assign, preds)) is not None


def _group_depths(assign: dict[str, int], preds: dict[str, set[str]]) -> dict[int, int]:
    """Depth of every group of the contracted graph (steps 1 and 4)."""
    qpreds = _quotient(assign, preds)
    d: dict[int, int] = {}
    for a in _quotient_order(qpreds):
        d[a] = 1 + max((d[p] for p in qpreds[a]), default=0)
    return d


def choose_device(support: set[str]) -> str:
    """The device a node runs on: the first of :data:`DEVICES` (the core before the host)
    that supports it."""
    return next(d for d in DEVICES if d in support)


def partition_nodes(order: list[str], preds: dict[str, set[str]], succs: dict[str, set[str]],
                    support: dict[str, set[str]]) -> tuple[list[Subgraph], dict[int, int]]:
    """Seed 004 steps 1-4 on a bare DAG: ``order`` topological, ``support`` the devices of
    each node.  Returns the subgraphs in dependency order and each one's depth.

    The device check admits a node into a subgraph when the subgraph's device is the one
    :func:`choose_device` picks from the node's support set: a node the core can run is
    never pulled onto the host just because the host could run it too."""
    rank = {v: k for k, v in enumerate(order)}
    chosen = {v: choose_device(support[v]) for v in order}
    assign = {v: -(k + 1) for k, v in enumerate(order)}  # unpartitioned: singleton groups
    subgraphs: list[Subgraph] = []
    while True:
        # step 4: depths of the contracted graph, then the shallowest unpartitioned node
        depth = _group_depths(assign, preds)
        free = [v for v in order if assign[v] < 0]
        if not free:
            break
        cand = min(free, key=lambda v: (depth[assign[v]], rank[v]))
        dev = chosen[cand]
        s = Subgraph(len(subgraphs), dev, [cand])
        assign[cand] = s.id
        grown = True
        while grown:
            grown = False
            members = set(s.nodes)
            targets = set().union(*(preds[m] | succs[m] for m in members)) - members
            for t in sorted(targets, key=rank.get):
                if assign[t] >= 0 or chosen[t] != dev:  # history, device
                    continue
                old = assign[t]
                assign[t] = s.id
                if _acyclic(assign, preds):  # continuity
                    s.nodes.append(t)
                    grown = True
                else:
                    assign[t] = old
        subgraphs.append(s)
    depth = _group_depths(assign, preds)
    ordered = sorted(subgraphs, key=lambda s: (depth[s.id], s.id))
    for s in ordered:
        s.nodes.sort(key=rank.get)
    return ordered, depth


def partition(graph: Graph, *, force_host: set[str] = frozenset(),
              config: CoreConfig | None = None) -> Graph:
    """``config``: the core's buffers decide what fits (:func:`.split.pooling_misfit`)."""
    g = graph.copy()
    preds, succs = _edges(g)
    order = [n.name for n in g.nodes]
    node_by = {n.name: n for n in g.nodes}
    support: dict[str, set[str]] = {}
    for n in g.nodes:
        why = "forced to the host (--host)" if n.name in force_host else core_support(g, n)
        if not why and config is not None:
            why = pooling_misfit(g, n, config)
        support[n.name] = {"host"} if why else {"core", "host"}
        n.meta["core_reason"] = why
        n.meta["device_support"] = sorted(support[n.name])
    subgraphs, depth = partition_nodes(order, preds, succs, support)
    for s in subgraphs:
        for v in s.nodes:
            node_by[v].device = s.device
    # step 5: the association network -> subgraphs -> device, in dependency order
    g.meta["subgraphs"] = [{"id": s.id, "device": s.device, "depth": depth[s.id], "nodes": s.nodes}
                           for s in subgraphs]
    g.meta["depth"] = depths(order, preds)
    return g
