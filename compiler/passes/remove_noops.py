"""Pass: drop operators that do nothing at inference (Dropout, Identity)."""

from __future__ import annotations

from ..ir import Graph


def remove_noops(graph: Graph) -> Graph:
    g = graph.copy()
    rename: dict[str, str] = {}
    keep = []
    for n in g.nodes:
        if n.op in ("Dropout", "Identity"):
            src = rename.get(n.inputs[0], n.inputs[0])
            rename[n.outputs[0]] = src
            continue
        n.inputs = [rename.get(i, i) for i in n.inputs]
        keep.append(n)
    g.nodes = keep
    for k, o in enumerate(g.outputs):
        if o in rename:
            # keep the model's output name: give the surviving producer that name
            src = rename[o]
            for n in g.nodes:
                n.outputs = [o if x == src else x for x in n.outputs]
                n.inputs = [o if x == src else x for x in n.inputs]
            g.tensors[o].shape = g.tensors[src].shape
    g.remove_unused()
    return g
