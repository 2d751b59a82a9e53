"""The array cost model: estimated cycles of a layer split across the cores of an array.

:mod:`.passes.parallelize` asks it, for every convolution and fully connected layer, what
each way of splitting costs (output rows or output channels, over 1..N cores) and keeps the
cheapest.  A part's time is the larger of its matrix-unit time and its share of the shared
external-memory port; the layer's time is the slowest part, or the busiest port's traffic
when that is larger (the cores of a group of columns share one AXI port; a split's traffic
is spread evenly over the ports its cores reach), plus the network time of
the all-gather that a channel split needs and of the halo rows (sent by every core at once).
A map is read from or written to local memory, not the port, when a core's share of it
(its row block in a rows split, all of it otherwise) fits ``local_budget``: each core keeps
only its window of a local map (:func:`..memory.allocate`).  The per-row matrix-unit cost is the golden
model's own estimate (:func:`snpu.verif.timing.fc_row_cycles_estimate`) at the layer's
weight and neuron densities; the constants come from :mod:`snpu.verif.timing`, the golden
model's calibration table.

What it does not model: overlap between layers, instruction fetch, the token protocol's
stalls, contention on individual network links.  ``bench/scaling.py`` reports how close its
estimates come to the golden model's cycles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from snpu.config import CoreConfig
from snpu.verif import timing

from .kernels import _r, conv_channel_chunk

#: payload bytes a core's network port takes per cycle (one 64-bit flit)
LINK_BYTES = 8


@dataclass(frozen=True)
class LayerShape:
    """What the model needs to know about a matrix layer."""

    rows: int            #: output channels (weight rows)
    k: int               #: inputs per output (kh * kw * cin, or n_in)
    oh: int
    ow: int
    kh: int
    kw: int
    cin: int
    kept: np.ndarray     #: [rows] weights kept per row
    neuron_density: float
    in_bytes: int        #: the input map's bytes
    out_bytes: int       #: the output map's bytes
    local_budget: int    #: bytes of a core's local memory one map may take
    #: the input map is in shared memory whatever the split (its producer's channel or
    #: tile split stored it there)
    in_shared: bool = False


def matrix_shape(g, n, local_budget: int) -> LayerShape:
    """The :class:`LayerShape` of a Conv / Gemm / MatMul node (after quantisation)."""
    w = n.meta["q"]["w"]
    kept = np.count_nonzero(w, axis=1)
    dens = float((n.meta.get("neurons") or {}).get("density", 1.0))
    x = g.tensor(n.inputs[0]).shape
    y = g.tensor(n.outputs[0]).shape
    if n.op == "Conv":
        kh, kw, *_, oh, ow = n.meta["geometry"]
        cin = x[1]
    else:
        kh = kw = oh = ow = 1
        cin = w.shape[1]
    return LayerShape(w.shape[0], w.shape[1], oh, ow, kh, kw, cin, kept, dens,
                      int(np.prod(x)), int(np.prod(y)), local_budget)


def part_cycles(s: LayerShape, cfg: CoreConfig, rows: tuple[int, int],
                channels: tuple[int, int], in_shared: bool,
                out_shared: bool) -> tuple[float, float]:
    """(matrix-unit cycles, shared-memory bytes) of the part computing output rows ``rows``
    and output channels ``channels``; ``in_shared`` / ``out_shared``: its input / output
    map is in shared memory (not in local memory)."""
    P = cfg.lanes
    c0, c1 = channels
    R = c1 - c0
    pix = (rows[1] - rows[0]) * s.ow
    if R <= 0 or pix <= 0:
        return 0.0, 0.0
    kept = float(s.kept[c0:c1].mean())
    row = min(timing.fc_row_cycles_estimate(s.k, kept, s.neuron_density, cfg.chunk_bits, m,
                                            expand=False) for m in (False, True))
    # rows are spread over the lanes; one fc instruction per pixel group per weight tile
    tile = min(_r(R, P), cfg.param_rows // 2 * P, 4095 // P * P)
    tiles = -(-R // tile)
    nb_half = cfg.nbuf_bytes // 2
    kmax = _r(s.k, 64)
    group = max(1, min(s.ow, nb_half // max(1, kmax), (cfg.acc_words // 2) // _r(tile, P),
                       (cfg.obuf_bytes // 2) // _r(tile, P)))
    groups = (rows[1] - rows[0]) * -(-s.ow // group)
    mx = pix * -(-R // P) * row + tiles * groups * timing.FC_PIPELINE / 4
    weight_bytes = float(s.kept[c0:c1].sum() + R * (_r(s.k, 64) // 8) + R * 8)
    chunks = 1 if s.oh == 1 and s.ow == 1 else -(-s.cin // conv_channel_chunk(
        s.cin, s.kh, s.kw, nb_half))
    reloads = 1 if chunks == 1 else groups
    shared = weight_bytes * reloads
    if in_shared:
        shared += pix * s.k
    if out_shared:
        shared += pix * R
    return mx, shared


def split_cycles(s: LayerShape, cfg: CoreConfig, kind: str,
                 ranges: list[tuple[int, int]], ports: int = 1) -> float:
    """Estimated cycles of the layer split into ``ranges`` of ``kind`` (rows / pixels in
    raster order / channels; ``tiles``: ``(r0, r1, c0, c1)`` blocks of rows and channels)
    when its cores reach ``ports`` external-memory ports (their traffic spread evenly)."""
    bus = cfg.axi_data_bits // 8
    k = len(ranges)
    if kind == "tiles":
        return _tile_cycles(s, cfg, ranges, ports)
    # a block of pixels costs its share of rows; its input window spans one row more
    extra = 0
    if kind == "pixels":
        kind, ranges = "rows", [(a / s.ow, b / s.ow) for a, b in ranges]
        extra = 1
    # a core keeps its window of a map in local memory (a row block of it when split by
    # rows) when that fits; a channel slice of a feature map is not contiguous: it goes to
    # shared memory
    share = k if kind == "rows" else 1
    in_shared = s.in_shared or s.in_bytes / share > s.local_budget
    out_shared = (s.out_bytes / share > s.local_budget) or (kind == "channels" and s.oh * s.ow > 1)
    parts = [part_cycles(s, cfg, r, (0, s.rows), in_shared, out_shared) if kind == "rows"
             else part_cycles(s, cfg, (0, s.oh), r, in_shared, out_shared) for r in ranges]
    slowest = max(max(mx, b / bus) for mx, b in parts)
    # the busiest port carries its share of the cores' traffic
    port = sum(b for _, b in parts) / bus * -(-k // max(1, min(ports, k))) / k
    out_bytes = s.oh * s.ow * s.rows
    if kind == "channels" and k > 1:
        # all-gather of the output: over the network when it stays local (fc outputs), else
        # through shared memory (a channel-split convolution's output is shared)
        if s.oh * s.ow == 1:
            gather = out_bytes * (k - 1) / k / LINK_BYTES + k * timing.NET_SEND_OVERHEAD
        else:
            gather = 2 * out_bytes / bus
        return max(slowest, port) + gather
    # halo rows: every core sends its neighbours theirs at once, over different links
    halo = (s.kh - 1 + extra) * s.ow * s.rows / LINK_BYTES if k > 1 else 0.0
    return max(slowest, port) + halo


def _tile_cycles(s: LayerShape, cfg: CoreConfig, tiles: list[tuple[int, int, int, int]],
                 ports: int) -> float:
    """Estimated cycles of a convolution split into blocks of rows x channels: each core
    reads its rows' input window and its channels' weights; the output goes to shared
    memory (a tile is not contiguous) and the next layer reads it back from there."""
    bus = cfg.axi_data_bits // 8
    k = len(tiles)
    row_blocks = len({(a, b) for a, b, _, _ in tiles})
    in_shared = s.in_shared or s.in_bytes / row_blocks > s.local_budget
    parts = [part_cycles(s, cfg, (a, b), (c0, c1), in_shared, True) for a, b, c0, c1 in tiles]
    slowest = max(max(mx, b / bus) for mx, b in parts)
    reach = max(1, min(ports, k))
    port = sum(b for _, b in parts) / bus * -(-k // reach) / k
    # the next layer reads the output back from shared memory, over the ports
    return max(slowest, port) + s.oh * s.ow * s.rows / bus / reach
