"""Pass: partition the graph across devices (seed 004, ``docs/compiler.md``).

1. Nodes are topologically sorted; a node's *depth* is one more than its deepest
   predecessor.
2. Each node carries its *device support*: the devices it is to run on.  The core runs the
   ops of ``ops.CORE_OPS`` when their attributes are within its limits
   (:func:`core_support`), and that is then the node's device; every other node runs on
   the host (the float semantics of :mod:`..ops`).  (The host could run everything; making
   it the fallback only keeps core work on the core.)
3. Candidates are taken in topological order; a candidate that is not yet partitioned
   starts a subgraph on its preferred device (the core if it supports it).  Its
   predecessors and successors are targets; a target joins when it passes the *history*
   check (not yet partitioned), the *device* check (supports the subgraph's device) and the
   *continuity* check (with it, the subgraphs still form a DAG: no cycle through other
   subgraphs).  Growth repeats until nothing changes; a candidate that cannot grow is a
   subgraph on its own.
4. Each finished subgraph is contracted into one node, depths are recomputed and the loop
   continues until every node is partitioned.
5. The result (``graph.meta["subgraphs"]``) lists the subgraphs in dependency order with
   their device: what the runtime dispatches.
"""

from __future__ import annotations

from dataclasses import dataclass, field


from ..ir import Graph, Node
from .. import ops

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
    if x.shape is not None and x.shape[0] != 1:
        return "batch size must be 1"
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
    if n.op == "GlobalAveragePool" and (rank != 4 or max(x.shape[2:]) > 255):
        return "global pooling over at most 255 x 255"
    if n.op in ("Add", "Sum"):
        shapes = {g.tensor(i).shape for i in n.inputs}
        if len(shapes) != 1 or any(g.tensor(i).is_const for i in n.inputs):
            return "element-wise add of equal shapes only"
    if n.op == "Concat":
        if int(n.attrs.get("axis", 0)) % max(rank, 1) != 1:
            return "concatenation along channels only"
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


def _acyclic(assign: dict[str, int], preds: dict[str, set[str]]) -> bool:
    """Is the quotient graph (nodes contracted by ``assign``) a DAG?"""
    qpreds: dict[int, set[int]] = {}
    for v, ps in preds.items():
        a = assign[v]
        qpreds.setdefault(a, set())
        for p in ps:
            if assign[p] != a:
                qpreds[a].add(assign[p])
    state: dict[int, int] = {}
    for start in qpreds:
        if start in state:
            continue
        stack = [(start, iter(qpreds[start]))]
        state[start] = 1
        while stack:
            v, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[v] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return False
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(qpreds.get(nxt, ()))))
    return True


def partition(graph: Graph, *, force_host: set[str] = frozenset()) -> Graph:
    g = graph.copy()
    preds, succs = _edges(g)
    order = [n.name for n in g.nodes]
    node_by = {n.name: n for n in g.nodes}
    support = {}
    for n in g.nodes:
        why = None if n.name not in force_host else "forced to the host"
        why = why or core_support(g, n)
        support[n.name] = {"host"} if why else {"core"}
        n.meta["core_reason"] = why
    assign = {v: -(k + 1) for k, v in enumerate(order)}  # unassigned: singleton groups
    subgraphs: list[Subgraph] = []
    for cand in order:  # candidates in topological order (depth order)
        if assign[cand] >= 0:
            continue
        dev = "core" if "core" in support[cand] else "host"
        s = Subgraph(len(subgraphs), dev, [cand])
        assign[cand] = s.id
        grown = True
        while grown:
            grown = False
            members = set(s.nodes)
            targets = set().union(*(preds[m] | succs[m] for m in members)) - members
            for t in sorted(targets, key=order.index):
                if assign[t] >= 0 or dev not in support[t]:  # history, device
                    continue
                old = assign[t]
                assign[t] = s.id
                if _acyclic(assign, preds):  # continuity
                    s.nodes.append(t)
                    grown = True
                else:
                    assign[t] = old
        subgraphs.append(s)
        for v in s.nodes:
            node_by[v].device = dev
    # dependency order of the contracted graph
    qpreds = {s.id: {assign[p] for v in s.nodes for p in preds[v]} - {s.id} for s in subgraphs}
    done, ordered = set(), []
    while len(ordered) < len(subgraphs):
        for s in subgraphs:
            if s.id not in done and qpreds[s.id] <= done:
                ordered.append(s)
                done.add(s.id)
    rank = {v: k for k, v in enumerate(order)}
    for s in ordered:
        s.nodes.sort(key=rank.get)
    g.meta["subgraphs"] = [{"id": s.id, "device": s.device, "nodes": s.nodes} for s in ordered]
    g.meta["depth"] = depths(order, preds)
    return g
