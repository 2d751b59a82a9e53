"""Pass: operator splitting by memory (seed 002, ``docs/compiler.md``).

Every core operator whose operand data -- its input(s), its parameters (the encoded
weights) and its output, per piece -- exceeds a threshold derived from the on-chip memory
is replaced by operators of the same type on pieces of the data, until every piece fits:

* the dimension follows the seed's rules: convolutions and fully connected layers split the
  batch (N) first, then output channels (C); pooling, global pooling, element-wise sums and
  affine layers split N, then C.  A reduction dimension is never split (pooling reduces
  over H and W; a convolution over its input channels and window).  Convolutions may also
  split output rows (H: each piece reads its rows plus the window's halo), as may the
  element-wise layers; among the dimensions that remain after N, the one that moves the
  fewest extra bytes is taken (an output-channel piece re-reads the whole input, a row
  piece re-reads the weights), repeatedly, until the pieces fit or nothing is left to
  split;
* channel pieces are multiples of the core's lanes, so every piece keeps every lane busy.

A piece is recorded on the node (``node.meta["pieces"]``: a list of :class:`Piece`); the
graph's values do not change (each piece computes its slice of the output exactly as the
whole operator does, with the same quantisation), code generation emits one kernel per piece
(:func:`.codegen.emit_nodes`; channel pieces of a convolution or fully connected layer that
follow each other in the program are one loop over their weight tiles) and the order search
(:mod:`.schedule`) orders the pieces of independent operators among each other.

Whatever the threshold, a piece's smallest unit must fit the core's buffers (a pooling
window in half the accumulators, a convolution patch of one channel group in half the
neuron buffer).  An operator whose unit does not fit is an error naming the node, the
operand and the smallest buffer that would fit -- never a wrong answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from snpu.config import CoreConfig
from snpu.errors import CompileError

from ..ir import Graph, Node
from ..memory import batch_size, hwc
from ..ops import pool_geometry

#: the split dimensions each operator may use, in the seed's order of preference (N first;
#: the rest by the fewest extra bytes)
DIMENSIONS = {
    "Conv": ("images", "channels", "rows"),
    "Gemm": ("images", "channels"), "MatMul": ("images", "channels"),
    "MaxPool": ("images", "channels"), "AveragePool": ("images", "channels"),
    "GlobalAveragePool": ("images", "channels"),
    "Add": ("images", "channels", "rows"), "Sum": ("images", "channels", "rows"),
    "Affine": ("images", "channels", "rows"),
}


@dataclass(frozen=True)
class Piece:
    """A piece of an operator: images [i0, i1), output channels [c0, c1), output rows
    [r0, r1) (``None``: all of that dimension)."""

    images: tuple[int, int] | None = None
    channels: tuple[int, int] | None = None
    rows: tuple[int, int] | None = None

    @property
    def cols(self) -> None:
        """Pieces are whole rows (an array's :class:`~.parallelize.Part` may start mid-row)."""
        return None

    def to_dict(self) -> dict:
        return {k: list(v) for k, v in (("images", self.images), ("channels", self.channels),
                                        ("rows", self.rows)) if v is not None}

    @classmethod
    def from_dict(cls, d: dict) -> "Piece":
        return cls(**{k: tuple(v) for k, v in d.items()})


def onchip_bytes(config: CoreConfig) -> int:
    """The default threshold: every on-chip buffer of the core, in bytes."""
    c = config
    return (c.nbuf_bytes + c.nidx_bytes + c.lanes * (c.wbuf_bytes + c.widx_bytes)
            + 4 * c.acc_elems + c.obuf_bytes + c.param_rows * c.param_row_bytes)


class _Operands:
    """Operand bytes of a piece of one node (per the module docstring)."""

    def __init__(self, g: Graph, n: Node):
        self.op = n.op
        x = g.tensor(n.inputs[0]).shape
        y = g.tensor(n.outputs[0]).shape
        self.images = batch_size(y)
        self.ih, self.iw, self.ic = hwc(x)
        self.oh, self.ow, self.oc = hwc(y)
        self.inputs = len([i for i in n.inputs if i and not g.tensor(i).is_const]) \
            if n.op in ("Add", "Sum") else 1
        if n.op in ("Conv", "Gemm", "MatMul"):
            w = n.meta["q"]["w"]
            # encoded weights: the kept values and a direct index (1 bit per column)
            self.w_row = np.count_nonzero(w, axis=1) + w.shape[1] / 8
        if n.op == "Conv":
            kh, _, sh, _, pads, *_ = n.meta["geometry"]
            self.kh, self.sh = kh, sh
            self.iw_padded = self.iw + pads[1] + pads[3]

    def bytes(self, p: Piece) -> float:
        i0, i1 = p.images or (0, self.images)
        return (i1 - i0) * self._per_image(p)

    def _per_image(self, p: Piece) -> float:
        c0, c1 = p.channels or (0, self.oc)
        r0, r1 = p.rows or (0, self.oh)
        c, r = c1 - c0, r1 - r0
        if self.op == "Conv":
            in_rows = min(self.ih, (r - 1) * self.sh + self.kh)
            return (in_rows * self.iw_padded * self.ic + float(self.w_row[c0:c1].sum())
                    + r * self.ow * c)
        if self.op in ("Gemm", "MatMul"):
            return self.ih * self.iw * self.ic + float(self.w_row[c0:c1].sum()) + c
        if self.op in ("MaxPool", "AveragePool", "GlobalAveragePool"):
            return self.ih * self.iw * c + self.oh * self.ow * c
        return (self.inputs + 1) * r * self.ow * c  # element-wise

    def extent(self, dim: str) -> int:
        return {"images": self.images, "channels": self.oc, "rows": self.oh}[dim]


def _cut(lo: int, hi: int, k: int, unit: int) -> list[tuple[int, int]]:
    """[lo, hi) in ``k`` nearly equal ranges on multiples of ``unit`` (fewer if too small)."""
    n = hi - lo
    units = -(-n // unit)
    k = max(1, min(k, units))
    out, start = [], lo
    for i in range(k):
        size = (units // k + (1 if i < units % k else 0)) * unit
        end = min(hi, start + size)
        if end > start:
            out.append((start, end))
        start = end
    return out


def _split(p: Piece, dim: str, k: int, whole: int, unit: int) -> list[Piece]:
    lo, hi = getattr(p, dim) or (0, whole)
    return [Piece(**{**{"images": p.images, "channels": p.channels, "rows": p.rows},
                     dim: r}) for r in _cut(lo, hi, k, unit)]


def _extra_bytes(ops: _Operands, dim: str, k: int) -> float:
    """Bytes the pieces move beyond the whole operator's (the cost of a split)."""
    if dim == "images":
        return 0.0
    return sum(ops.bytes(p) for p in _split(Piece(), dim, k, ops.extent(dim), 1)) - \
        ops.bytes(Piece())


def split_node(ops: _Operands, config: CoreConfig, threshold: float) -> list[Piece]:
    """The pieces of the node whose operands ``ops`` measures, each fitting ``threshold``
    bytes (``[Piece()]`` when the whole operator does, or as close as the dimensions
    allow)."""
    dims = DIMENSIONS.get(ops.op, ())
    units = {"images": 1, "channels": config.lanes, "rows": 1}
    pieces = [Piece()]
    if "images" in dims and ops.images > 1 and ops.bytes(Piece()) > threshold:
        per_image = ops.bytes(Piece(images=(0, 1)))
        k = min(ops.images, -(-ops.images // max(1, int(threshold // per_image))))
        pieces = _split(Piece(), "images", k, ops.images, 1)
    left = [d for d in dims if d != "images"]
    while left and max(ops.bytes(p) for p in pieces) > threshold:
        best = None
        for dim in left:
            ext = ops.extent(dim)
            most = -(-ext // units[dim])
            for k in range(2, most + 1):
                trial = [q for p in pieces for q in _split(p, dim, k, ext, units[dim])]
                fits = max(ops.bytes(q) for q in trial) <= threshold
                if fits or k == most:
                    cost = _extra_bytes(ops, dim, k)
                    if best is None or (fits, -cost) > (best[0], -best[1]):
                        best = (fits, cost, dim, trial)
                    break
        if best is None:
            break
        pieces = best[3]
        left.remove(best[2])
    return pieces


def pooling_misfit(g: Graph, n: Node, config: CoreConfig) -> str | None:
    """Why a pooling node's window cannot fit the core's accumulators at all (pooling is
    never split across its window), naming the operand and the smallest core that fits;
    ``None`` if it fits.  The partitioner sends such a node to the host with this reason."""
    if n.op not in ("MaxPool", "AveragePool"):
        return None
    P = config.lanes
    acc_half = config.acc_elems // 2
    x = g.tensor(n.inputs[0]).shape
    kh, kw, *_, oh, ow = pool_geometry(n, x)
    whole_map = (kh, kw) == tuple(x[2:]) and (oh, ow) == (1, 1) and n.op == "AveragePool"
    need = kh * kw * P + P
    if need <= acc_half or whole_map:
        return None
    words = 1 << (-(-2 * need // P) - 1).bit_length()
    return (f"operand 'input window' ({kh}x{kw} pixels of {P} channels and their result, "
            f"{need} accumulators) does not fit half the accumulators ({acc_half}); pooling "
            f"is never split across its window: the smallest core that fits has acc_words "
            f">= {words}")


def check_fits(g: Graph, n: Node, config: CoreConfig) -> None:
    """The smallest unit of ``n`` must fit the core's buffers (module docstring)."""
    why = pooling_misfit(g, n, config)
    if why:
        raise CompileError(f"{n.where()}: {why}")
    if n.op == "Conv":
        kh, kw = n.meta["geometry"][:2]
        group = (n.meta.get("neurons") or {}).get("group")
        unit = int(group[0]) if group else 1
        need = -(-(kh * kw * unit) // 64) * 64
        if need > config.nbuf_bytes // 2:
            size = 1 << (2 * need - 1).bit_length()
            raise CompileError(
                f"{n.where()}: operand 'input patch' ({kh}x{kw} pixels x {unit} channel"
                f"{'s' if unit > 1 else ''}, {need} bytes) does not fit half the neuron buffer "
                f"({config.nbuf_bytes // 2} bytes); a convolution is never split across its "
                f"window: the smallest core that fits has nbuf_bytes >= {size}")


def split(graph: Graph, config: CoreConfig, threshold: int | None = None) -> Graph:
    """See the module docstring.  ``threshold``: bytes per piece (``None``: the core's
    on-chip memory, :func:`onchip_bytes`; 0: check only, split nothing)."""
    g = graph.copy()
    limit = onchip_bytes(config) if threshold is None else threshold
    report = []
    for n in g.nodes:
        if n.device != "core" or n.op not in DIMENSIONS:
            continue
        check_fits(g, n, config)
        if not limit:
            continue
        ops = _Operands(g, n)
        pieces = split_node(ops, config, limit)
        if len(pieces) > 1:
            n.meta["pieces"] = pieces
            report.append({"node": n.name, "pieces": len(pieces),
                           "dimensions": sorted({d for p in pieces for d, v in
                                                 p.to_dict().items()}),
                           "largest_bytes": int(max(ops.bytes(p) for p in pieces)),
                           "whole_bytes": int(ops.bytes(Piece()))})
    g.meta["split"] = {"threshold": limit, "nodes": report}
    return g
