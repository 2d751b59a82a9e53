"""Pass: weight pruning of the core's matrix layers (magnitude and group pruning).

* **Magnitude pruning**: in each Conv / Gemm / MatMul that runs on the core, the smallest
  weights (by ``|w|``) are zeroed until ``density`` of them remain (per layer).
* **Group pruning** (seed 000 claim 16): each weight row is split into groups of
  ``group_size`` consecutive weights (in the core's patch order); a group is deleted when
  more than ``t6`` of its weights have ``|w| <= t5``.  ``t5`` is given relative to the
  layer's largest weight.

Layers listed in ``keep_dense`` (by node name), and layers with fewer than ``min_weights``
weights, are left alone.  The per-layer result is recorded in ``node.meta["prune"]`` and in
the compile report.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from snpu.errors import CompileError
from snpu.verif import index as ix

from ..ir import Graph

MATRIX_OPS = ("Conv", "Gemm", "MatMul")


@dataclass(frozen=True)
class PruneOptions:
    density: float = 1.0
    group_size: int = 0          #: 0: no group pruning
    t5: float = 0.05             #: small if |w| <= t5 * max|w|
    t6: int = 0                  #: delete a group when more than t6 of its weights are small
    keep_dense: frozenset[str] = field(default_factory=frozenset)
    min_weights: int = 0


def prune(graph: Graph, options: PruneOptions = PruneOptions()) -> Graph:
    if not 0.0 < options.density <= 1.0:
        raise CompileError(f"weight density must be in (0, 1], got {options.density}")
    g = graph.copy()
    for n in g.nodes:
        if n.op not in MATRIX_OPS or n.device != "core":
            continue
        w = g.const(n.inputs[1])
        if w is None:
            continue
        # a convolution that took a channel shuffle in (fold_shuffle) counts its own weights,
        # not the zeros outside its groups
        size = n.meta.get("own_weights", w.size)
        before = float(np.count_nonzero(w)) / max(size, 1)
        if n.name in options.keep_dense or size < options.min_weights or \
                (options.density >= 1.0 and not options.group_size):  # nothing to remove
            n.meta["prune"] = {"density": before, "pruned": False}
            continue
        rows = _rows(n, w)  # [out, in] view in the core's order
        keep = rows != 0
        if options.density < 1.0:
            k = int(round(options.density * size))
            if k < np.count_nonzero(rows):
                thresh = np.partition(np.abs(rows).reshape(-1), rows.size - max(k, 1))[rows.size - max(k, 1)]
                keep &= np.abs(rows) >= thresh
                # ties at the threshold: keep exactly k
                excess = int(keep.sum()) - max(k, 1)
                if excess > 0:
                    tie = np.flatnonzero((np.abs(rows) == thresh).reshape(-1) & keep.reshape(-1))
                    flat = keep.reshape(-1)
                    flat[tie[:excess]] = False
        if options.group_size:
            t5 = options.t5 * float(np.abs(rows).max() or 1.0)
            keep &= ix.group_prune(np.where(keep, rows, 0), options.group_size, t5, options.t6)
        pruned = np.where(keep, rows, 0).astype(w.dtype)
        g.tensors[n.inputs[1]] = g.tensor(n.inputs[1])
        new = _unrows(n, w, pruned)
        name = g.add_const(n.inputs[1] + "/pruned", new)
        n.inputs = [n.inputs[0], name] + n.inputs[2:]
        n.meta["prune"] = {"density": float(np.count_nonzero(pruned)) / max(size, 1),
                           "density_before": before, "pruned": True}
    g.remove_unused()
    return g


def _rows(n, w: np.ndarray) -> np.ndarray:
    """The weights as [out, in] rows, in the order the core reads them."""
    if n.op == "Conv":
        return w.transpose(0, 2, 3, 1).reshape(w.shape[0], -1)  # (ky, kx, c) patches
    if n.op == "Gemm" and n.attrs.get("transB", 0):
        return w
    return w.T  # Gemm without transB, MatMul: [in, out]


def _unrows(n, w: np.ndarray, rows: np.ndarray) -> np.ndarray:
    if n.op == "Conv":
        co, ci, kh, kw = w.shape
        return rows.reshape(co, kh, kw, ci).transpose(0, 3, 1, 2).copy()
    if n.op == "Gemm" and n.attrs.get("transB", 0):
        return rows
    return rows.T.copy()
