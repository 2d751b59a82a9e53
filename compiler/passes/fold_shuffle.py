"""Pass: channel shuffles folded into the convolutions that read them.

ShuffleNet's channel shuffle is ``Reshape (N, C, H, W) -> (N, g, C/g, H, W)``, ``Transpose
perm = (0, 2, 1, 3, 4)``, ``Reshape -> (N, C, H, W)``: output channel ``j * g + i`` is input
channel ``i * C/g + j``.  It moves no value, it only renames channels, so a convolution
reading the shuffled map computes the same on the map before the shuffle with its weights'
input channels renamed back.  The core has no kernel for a 5-D transpose; without this pass
every shuffle is a host operator, and a network with 16 of them is 17 ROM segments with the
host copying maps between them.

Where every consumer of a shuffle is a ``Conv``, each consumer gets the weights
``W'[:, src(c)] = W[:, c]`` (``src``: the shuffle's input channel of its output channel
``c``) on the shuffle's input, and the three nodes go.  A grouped convolution (ShuffleNet's
depthwise one) becomes an ungrouped one whose weights are zero outside its groups, renamed:
exactly what :mod:`.quantize` makes of a grouped convolution anyway (the core runs every
convolution as one weight matrix, the zeros skipped by the weight index).  Its own weight
count is kept (``node.meta["own_weights"]``) so that magnitude pruning keeps the same share
of its weights (:mod:`.prune`).  Shuffles read by anything else stay as they are.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from ..ops import ungrouped_weights

#: the transpose of a channel shuffle (N, g, C/g, H, W) -> (N, C/g, g, H, W)
SHUFFLE_PERM = [0, 2, 1, 3, 4]


def fold_shuffle(graph: Graph) -> Graph:
    g = graph.copy()
    for x, convs, groups in _shuffles(g):
        c = g.tensor(x).shape[1]
        # output channel j * groups + i is input channel i * (c / groups) + j
        src = np.arange(c).reshape(groups, c // groups).T.reshape(-1)
        for conv in convs:
            w = g.const(conv.inputs[1])
            full = ungrouped_weights(w, int(conv.attrs.get("group", 1)))
            renamed = np.zeros_like(full)
            renamed[:, src] = full  # W'[:, src(c)] = W[:, c]
            conv.inputs = [x, g.add_const(conv.inputs[1] + "/unshuffled", renamed)] \
                + conv.inputs[2:]
            conv.attrs["group"] = 1
            conv.meta.setdefault("own_weights", int(w.size))
    g.remove_unused()  # the shuffle's three nodes
    return g


def _shuffles(g: Graph) -> list[tuple[str, list[Node], int]]:
    """Every channel shuffle whose consumers are all convolutions with constant weights:
    ``(the shuffle's input, the convolutions, groups)``."""
    producers, consumers = g.producers(), g.consumers()
    out = []
    for t in g.nodes:
        if t.op != "Transpose" or list(t.attrs.get("perm", ())) != SHUFFLE_PERM:
            continue
        first, readers = producers.get(t.inputs[0]), consumers.get(t.outputs[0], [])
        if first is None or first.op != "Reshape" or len(readers) != 1 or readers[0].op != "Reshape":
            continue
        last = readers[0]
        x, split, y = (g.tensor(first.inputs[0]).shape, g.tensor(first.outputs[0]).shape,
                       g.tensor(last.outputs[0]).shape)
        if (x is None or split is None or y is None or len(x) != 4 or len(split) != 5
                or tuple(y) != tuple(x) or split[0] != x[0] or split[1] * split[2] != x[1]
                or tuple(split[3:]) != tuple(x[2:])):
            continue
        if len(consumers.get(first.outputs[0], [])) != 1 or last.outputs[0] in g.outputs:
            continue
        convs = consumers.get(last.outputs[0], [])
        if not convs or any(n.op != "Conv" or n.inputs[0] != last.outputs[0]
                            or g.const(n.inputs[1]) is None for n in convs):
            continue
        out.append((first.inputs[0], convs, int(split[1])))
    return out
