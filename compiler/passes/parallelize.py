"""Pass: split every core layer across the cores of a tiled array.

Each core node gets ``node.meta["parts"]``: a list of :class:`Part`, one per core that
computes a share of it, and ``node.meta["split"]`` (what the report says: the kind, the
number of cores and why).  The split follows seed 002's rules (``docs/compiler.md``):

* **rows** - convolutions, pooling, element-wise sums and affine layers: each core computes
  a block of output rows (the spatial H split) for every channel.  The slices of a
  concatenation split alike (the first slice chooses for all of them, by their summed
  cost), so each core holds whole rows of it.  Its input rows (the block
  plus the kernel's halo) come from the cores that produced them; the weights are read by
  every core from shared memory.  A block of whole rows is one contiguous range of the
  channels-last layout, so it moves as one remote write.
* **pixels** - a convolution whose rows do not share out evenly over every core: each core
  computes a block of output pixels in raster order (:func:`pixel_part`: whole rows but
  the first and last, which it shares with its neighbours), so the blocks differ by one
  pixel at most.  Maps whose channels are not a multiple of 8 do not split this way (a
  shared row's pixels move as remote writes, which start 8-aligned).  Element-wise layers
  take their input's blocks.
* **channels** - fully connected layers: each core computes a block of output channels and
  holds only that slice of the weights; the outputs are exchanged.  Blocks are multiples of
  ``max(8, lanes)`` channels (remote writes start 8-aligned).
* **batch** - any layer of a batch at least as large as the array: each core runs the
  whole layer on its block of images; every layer uses the same blocks, so activations
  stay where they are made.  A smaller batch gives each image its own group of cores (the
  same groups in every layer; :attr:`Part.image`) and splits each layer over a group as it
  would split one image over the array, so no core idles; each core then keeps only its
  image's windows of the maps in local memory.
* **tiles** - a convolution whose weights load the ports (small maps, many channels): a
  block of output rows x a block of output channels per core (:attr:`Part.ch`); each core
  loads only its channels' weights; the output goes to shared memory.
* **pipeline** (``--split pipeline``, or ``auto`` when the cost model expects it faster
  than the data-parallel split; throughput mode) - a batch is a stream of inputs: the
  layers form contiguous stages, each on its own group of cores that splits every layer
  of the stage, and each stage runs every image in turn (:func:`pipeline_stages`); code
  generation emits image by image so that the stages overlap.
* **whole** - a layer that reduces over H and W (global pooling) or is too small to split
  runs on one core; the cores take such layers in turn.

A layer smaller than the array uses fewer cores (a row block or a channel block per core at
least) and the report says so.  Cores are numbered row-major over the usable cores (virtual
cores): :mod:`.place_parts` then places them onto the physical cores.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from snpu.config import CoreConfig, memory_port
from snpu.config import memory_ports as ports_of
from snpu.errors import CompileError
from snpu.verif import isa, timing

from ..array_cost import matrix_shape, part_cycles, split_cycles
from ..ir import Graph, Node
from ..memory import FLAG_BYTES
from ..windows import SHARED_OUTPUT_SPLITS, VIEW_OPS, input_rows  # noqa: F401  (re-exported)

Coord = tuple[int, int]

MATRIX_OPS = ("Conv", "Gemm", "MatMul")
#: a split other than the aligned default must be estimated this much faster
ALIGN_GAIN = 0.95
#: a map counts as local (cost model) when a core's part of it fits this share of local memory
LOCAL_SHARE = 4
#: a batch runs as a pipeline of stages (auto) when that is estimated this much faster than
#: the data-parallel split
PIPELINE_GAIN = 0.9
#: throughput mode: the latency a layer adds per image beyond its throughput (its first
#: load, matrix and requantisation pipelines and last store, each once at its start and
#: its end), and a stage's hand-over of an image to the next (the last store, the flag
#: over the network, its receipt, the next stage's first load)
LAYER_LATENCY = 2 * (timing.DMA_LATENCY + timing.FC_PIPELINE + timing.REQ_PIPELINE
                     + timing.ST_LATENCY)
HANDOVER = (timing.ST_LATENCY + timing.NET_SEND_OVERHEAD + timing.INJECT_CYCLES
            + 2 * timing.HOP_CYCLES + timing.RECV_CYCLES + timing.DMA_LATENCY)
ROW_SPLIT_OPS = ("Conv", "MaxPool", "AveragePool", "Add", "Sum", "Affine")


@dataclass(frozen=True)
class Part:
    """A core's share of a layer: output rows (``kind == "rows"``), output channels
    (``"channels"``), images of a batch (``"batch"``) or all of it (``"whole"``,
    ``lo``/``hi`` the rows) in [lo, hi).

    A rows part may be a block of *pixels* in raster order: ``cols = (x0, x1)`` says its
    first row starts at column ``x0`` and its last row ends before column ``x1`` (rows
    ``lo`` and ``hi - 1`` are then shared with the neighbouring parts).  ``None``: whole
    rows.  A rows part may also compute only output channels ``ch = (c0, c1)``: a *tile*
    of a convolution split both ways (its output goes to shared memory)."""

    core: Coord
    kind: str
    lo: int
    hi: int
    cols: tuple[int, int] | None = None
    #: the image of a batch this part works on (a batch smaller than the array: each image
    #: on its own group of cores); ``None``: a single image, or a ``batch`` part's images
    image: int | None = None
    #: output channels [c0, c1) of a tile (a rows part of a rows x channels split)
    ch: tuple[int, int] | None = None

    @property
    def rows(self) -> tuple[int, int] | None:
        """Output rows [lo, hi) of a ``rows`` part (as :class:`~.split.Piece`)."""
        return (self.lo, self.hi) if self.kind == "rows" else None

    @property
    def channels(self) -> tuple[int, int] | None:
        """Output channels [lo, hi) of a ``channels`` part (or of a tile)."""
        return (self.lo, self.hi) if self.kind == "channels" else self.ch

    def pixels(self, width: int) -> tuple[int, int]:
        """The output pixels [p0, p1) of a rows part, in raster order of a map ``width``
        pixels wide."""
        x0, x1 = self.cols or (0, width)
        return self.lo * width + x0, (self.hi - 1) * width + x1

    def to_dict(self) -> dict:
        d = {"core": list(self.core), "kind": self.kind, "range": [self.lo, self.hi]}
        if self.cols is not None:
            d["cols"] = list(self.cols)
        if self.image is not None:
            d["image"] = self.image
        if self.ch is not None:
            d["channels"] = list(self.ch)
        return d


def pixel_part(core: Coord, p0: int, p1: int, width: int) -> Part:
    """The rows part computing output pixels [p0, p1) (raster order) of a map ``width``
    pixels wide; whole rows when both ends fall on a row boundary."""
    lo, hi = p0 // width, -(-p1 // width)
    cols = (p0 - lo * width, p1 - (hi - 1) * width)
    return Part(core, "rows", lo, hi, None if cols == (0, width) else cols)


def blocks(n: int, k: int, unit: int = 1) -> list[tuple[int, int]]:
    """[0, n) in ``k`` contiguous blocks as equal as possible, boundaries on multiples of
    ``unit`` (fewer blocks when ``n`` has fewer units)."""
    units = -(-n // unit)
    k = max(1, min(k, units))
    out, start = [], 0
    for i in range(k):
        end = min(n, (units * (i + 1) // k) * unit)
        out.append((start, end))
        start = end
    return out


SPLITS = ("auto", "rows", "channels", "tiles", "images", "pipeline")


def parallelize(graph: Graph, mesh: Coord, config: CoreConfig,
                unusable: tuple[Coord, ...] = (), split: str = "auto",
                memory_ports: int | None = None) -> Graph:
    """Give every core node its parts on the usable cores of a ``mesh = (width, height)``
    whose external memory has ``memory_ports`` ports (default one per column).
    ``split``: how matrix layers split: ``auto`` (the cost model), or always by output
    ``rows`` (convolutions; fc layers by channels) or always by output ``channels`` (every
    core on every layer: the naive baseline) or ``tiles`` (convolutions in blocks of rows x
    channels, the cost model's best tiling; the rest as ``auto``); ``images``: as ``auto``, but a batch smaller
    than the array is split by images only (one core per image, the rest idle: the
    data-parallel baseline); ``pipeline``: a batch is a stream of inputs through a pipeline
    of layers (throughput mode): the layers in program order form contiguous *stages*, each
    on its own group of cores, balanced by the cost model; each stage runs every image in
    turn, and image ``b`` of stage ``s`` overlaps image ``b + 1`` of stage ``s - 1``
    (:func:`pipeline_stages`)."""
    if split not in SPLITS:
        raise CompileError(f"split {split!r}: one of {', '.join(SPLITS)}")
    g = graph.copy()
    w, h = mesh
    if w * h > isa.NET_TAGS:
        raise CompileError(f"a {w}x{h} mesh has {w * h} cores; the compiler's synchronisation "
                           f"uses one arrival counter per source core, so at most "
                           f"{isa.NET_TAGS} cores")
    cores = [(x, y) for y in range(h) for x in range(w) if (x, y) not in set(unusable)]
    if not cores:
        raise CompileError(f"--unusable leaves no core of the {w}x{h} mesh")
    ports = ports_of(mesh, memory_ports)
    unit = max(8, config.lanes)
    # a map's row blocks (for the next layer to line up with): keyed by the concatenation a
    # tensor is a slice of, or the tensor (through views)
    concat_of = {i: n.outputs[0] for n in g.nodes if n.op == "Concat" for i in n.inputs}
    slices = {n.outputs[0]: n.inputs for n in g.nodes if n.op == "Concat"}
    prod = g.producers()

    def key(t: str) -> str:
        while True:
            p = prod.get(t)
            if t in concat_of:
                t = concat_of[t]
            elif p is not None and p.op in ("Flatten", "Reshape"):
                t = p.inputs[0]
            else:
                return t

    # the pixel blocks (raster order) a map was made in, whole rows or not, per group of
    # cores (the array, or one image's cores in a small batch)
    row_blocks: dict[tuple[str, int], list[tuple[int, int]]] = {}
    turns: dict[tuple[Coord, ...], int] = {}  # per group: the core that takes the next whole layer
    reaches: dict[tuple[Coord, ...], list[int]] = {}  # per group: the ports its first j cores reach

    def shared_map(t: str) -> bool:
        """Is map ``t`` in shared memory whatever its readers do: is it (or a slice of the
        concatenation it is) made by a channel or tile split?"""
        r = key(t)
        made = [prod.get(i) for i in slices.get(r, [r])]
        return any(m is not None and (m.meta.get("split") or {}).get("kind") in SHARED_OUTPUT_SPLITS
                   and _out_pixels(g, m) > 1 for m in made)

    def split_on(n: Node, group: list[Coord]) -> tuple[str, list[Part], str]:
        """``n``'s split over the cores of ``group`` (one image's worth of work)."""
        k = len(group)
        reach = reaches.get(tuple(group))
        if reach is None:
            reach = reaches[tuple(group)] = [len({memory_port(x, w, ports) for x, _ in group[:j]})
                                             for j in range(k + 1)]
        blocks_of = lambda t: row_blocks.get((key(t), k))  # noqa: E731
        if n.op in MATRIX_OPS and "q" in n.meta and split in ("auto", "images", "tiles", "pipeline"):
            sibling = blocks_of(n.outputs[0]) if n.outputs[0] in concat_of else None
            tiles = split == "tiles" and n.op == "Conv"
            if tiles and _tilings(_out_rows(g, n), n.meta["q"]["w"].shape[0], k, unit):
                kind, ranges, why = _cheapest(g, n, config, k, unit, reach, only="tiles")
            elif sibling is not None and n.op == "Conv" and sibling[-1][1] == _out_pixels(g, n):
                # a concatenation's slices split alike: each core then holds whole rows
                kind, ranges = "pixels", sibling
                why = f"spatial blocks x{len(ranges)}, like the other slices of its concatenation"
            else:
                # the first slice of a concatenation chooses for its siblings too (they
                # take its row blocks): the split that is cheapest for all of them
                siblings = [m for m in (prod.get(i) for i in slices.get(concat_of.get(n.outputs[0]), ()))
                            if m is not None and m is not n and m.op == "Conv" and "q" in m.meta
                            and _out_pixels(g, m) == _out_pixels(g, n)]
                kind, ranges, why = _cheapest(g, n, config, k, unit, reach,
                                              blocks_of(n.inputs[0]), siblings,
                                              _pixel_aligned(g, key(n.outputs[0])),
                                              input_shared=shared_map(n.inputs[0]))
        elif n.op in MATRIX_OPS and (split == "channels" or n.op != "Conv"):
            f = n.meta["q"]["w"].shape[0] if "q" in n.meta else g.tensor(n.outputs[0]).shape[1]
            ranges = blocks(f, k, unit)
            kind, why = "channels", f"output channels in blocks of {unit} (--split {split})"
            if len(ranges) < k:
                why += f"; {f} outputs use {len(ranges)} of {k} cores"
        elif n.op in ROW_SPLIT_OPS:
            oh = _out_rows(g, n)
            same = blocks_of(n.inputs[0])
            if (n.op in ("Add", "Sum", "Affine") and same is not None
                    and same[-1][1] == _out_pixels(g, n)):
                # element-wise: the blocks its input was made in (nothing moves)
                kind, ranges = "pixels", same
                why = f"spatial blocks x{len(ranges)}, like its input"
            else:
                ranges = blocks(oh, k)
                kind = "rows"
                why = "spatial rows (H)" + (": every core reads the weights" if n.op == "Conv" else "")
                if len(ranges) < k:
                    why += f"; {oh} output rows use {len(ranges)} of {k} cores"
        else:
            kind, ranges = "whole", [(0, _out_rows(g, n))]
            why = f"{n.op} reduces over H and W: one core"
        ow = _out_pixels(g, n) // _out_rows(g, n)
        if kind == "rows":  # row blocks as pixel blocks
            kind, ranges = "pixels", _as_pixels("rows", ranges, ow)
        if len(ranges) == 1:
            at = turns.get(tuple(group), 0)
            turns[tuple(group)] = (at + 1) % k
            return "whole", [Part(group[at], "whole", 0, _out_rows(g, n))], why
        if kind == "tiles":
            return kind, [Part(group[i], "rows", r0, r1, ch=(c0, c1))
                          for i, (r0, r1, c0, c1) in enumerate(ranges)], why
        if kind == "pixels":
            row_blocks.setdefault((key(n.outputs[0]), k), ranges)
            parts = [pixel_part(group[i], p0, p1, ow) for i, (p0, p1) in enumerate(ranges)]
            return ("pixels" if any(p.cols for p in parts) else "rows"), parts, why
        return kind, [Part(group[i], kind, lo, hi) for i, (lo, hi) in enumerate(ranges)], why

    pipeline, throughput = None, {}
    layers = [n for n in g.nodes if n.device == "core" and n.op not in VIEW_OPS]
    images = max([_images(g, n) for n in layers], default=0)
    if split == "pipeline" and layers and images < 2:
        raise CompileError(f"{layers[0].where()}: --split pipeline runs a stream of inputs "
                           f"through the layers: give it a batch of at least 2 (--batch N), "
                           f"not {images}")
    if split in ("pipeline", "auto") and layers and images > 1 and len(cores) > 1:
        # throughput mode: a pipeline of stages, or (auto) whichever the cost model expects
        # to be faster, a pipeline or the data-parallel split
        stage_of, stage_cores, info = pipeline_stages(g, layers, cores, config, images, w, ports)
        chosen = split == "pipeline" or (info["cycles_estimate"]
                                         < PIPELINE_GAIN * info["data_parallel_estimate"])
        throughput = {"chosen": "pipeline" if chosen else "data parallel", **info}
        if chosen:
            pipeline = info
    for n in g.nodes:
        if n.device != "core" or n.op in VIEW_OPS:
            continue
        images = _images(g, n)
        extra = {}
        if pipeline is not None:
            # throughput mode: the layer's stage's cores split it as one image, and run
            # the images in turn (codegen emits image by image)
            s = stage_of[n.name]
            within, parts, why = split_on(n, stage_cores[s])
            kind = "pipeline"
            why = (f"pipeline stage {s + 1} of {pipeline['stages']} "
                   f"({len(stage_cores[s])} cores), {images} images in turn: {why}")
            extra = {"stage": s, "within": within}
        elif images >= len(cores) or (images > 1 and split == "images"):
            # a batch: data parallel, each core whole layers on its block of images (the
            # same blocks in every layer, so no activation moves between cores)
            ranges = blocks(images, len(cores))
            kind, parts = "batch", [Part(cores[i], "batch", lo, hi) for i, (lo, hi) in enumerate(ranges)]
            why = f"batch (N) of {images} images in blocks"
        elif images > 1:
            # a batch smaller than the array: each image gets a group of cores (the same
            # groups in every layer) and is split across them as one image would be
            groups = [cores[a:b] for a, b in blocks(len(cores), images)]
            parts = []
            for b, group in enumerate(groups):  # the last group is the largest
                kind, ps, why = split_on(n, group)
                parts += [dataclasses.replace(p, image=b) for p in ps]
            sizes = sorted({len(group) for group in groups})
            why = (f"batch (N) of {images} images, each on its own "
                   f"{'-'.join(map(str, sizes))} cores: {why}")
            extra = {"images": images}
        else:
            kind, parts, why = split_on(n, cores)
        n.meta["parts"] = parts
        n.meta["split"] = {"kind": kind, "cores": len(parts), "why": why, **extra}
        if kind in SHARED_OUTPUT_SPLITS and n.op == "Conv":
            n.meta["split"]["output"] = "shared memory (a channel slice of a map is not contiguous)"
    g.meta["mesh"] = {"shape": [w, h], "cores": [list(c) for c in cores],
                      "memory_ports": ports, **({"pipeline": pipeline} if pipeline else {}),
                      **({"throughput": throughput} if throughput else {})}
    return g


def _images(g: Graph, n: Node) -> int:
    """The batch ``n``'s output has (1 unless it is a map or a matrix)."""
    y = g.tensor(n.outputs[0]).shape
    return y[0] if y is not None and len(y) in (2, 4) else 1


def _cheapest(g: Graph, n: Node, config: CoreConfig, ncores: int, unit: int,
              reach: list[int], input_blocks: list[tuple[int, int]] | None = None,
              siblings: list[Node] = (), pixels: bool = False, only: str | None = None,
              input_shared: bool = False) -> tuple[str, list[tuple[int, int]], str]:
    """The split of a Conv / Gemm / MatMul the cost model (:mod:`..array_cost`) finds
    fastest: output rows or blocks of output pixels (convolutions) or output channels over
    1..``ncores`` cores.  ``input_blocks``: the pixel blocks its input map was made in (the
    split that lines up with them is the default, which another split must clearly beat).
    ``reach[k]``: the external-memory ports that k cores share.  ``siblings``: the other
    slices of a concatenation ``n``'s output is the first slice of, which will take ``n``'s
    blocks: a spatial split is estimated for all of them together.  ``pixels``: blocks
    that start or end mid-row are allowed (their pixels move as 8-aligned runs).  ``only``:
    the cheapest split of this kind (``--split tiles``).  ``input_shared``: the input map
    is in shared memory whatever the split (and so are the siblings')."""
    s = matrix_shape(g, n, config.local_bytes // LOCAL_SHARE)
    others = [matrix_shape(g, m, config.local_bytes // LOCAL_SHARE) for m in siblings]
    if input_shared:
        s = dataclasses.replace(s, in_shared=True)
        others = [dataclasses.replace(o, in_shared=True) for o in others]
    spatial = ("rows", "pixels") if pixels else ("rows",)
    # split other than by rows, the siblings choose for themselves
    alone = sum(min(split_cycles(o, config, kind, r, reach[len(r)])
                    for kind, r in _candidates(o, ncores, unit, (*spatial, "channels", "tiles")))
                for o in others)
    tried = {}
    kinds = (*spatial, "channels", "tiles") if n.op == "Conv" and s.oh > 1 else ("channels",)
    if only is not None:
        kinds = (only,)
    for kind, ranges in _candidates(s, ncores, unit, kinds):
        ports = reach[len(ranges)]
        est = split_cycles(s, config, kind, ranges, ports)
        est += (sum(split_cycles(o, config, kind, ranges, ports) for o in others)
                if kind in ("rows", "pixels") else alone)
        if est < tried.get((kind, len(ranges)), (float("inf"),))[0]:
            tried[(kind, len(ranges))] = (est, ranges)
    # the default keeps layers aligned (rows over every core: only halos move between
    # layers); another split must be clearly faster to pay for the data it moves
    default = max(tried, key=lambda key: (key[0] == ("rows" if n.op == "Conv" else "channels"), key[1]))
    x = g.tensor(n.inputs[0]).shape
    if input_blocks and len(x) == 4 and x[2] * x[3] == s.oh * s.ow:
        for key, (_, ranges) in tried.items():  # the same blocks as its input
            if _as_pixels(key[0], ranges, s.ow) == input_blocks:
                default = key
    choice = min(tried, key=lambda key: tried[key][0])
    if only is None and tried[choice][0] > ALIGN_GAIN * tried[default][0]:
        choice = default
    (kind, _), (est, ranges) = choice, tried[choice]
    others = sorted((v[0], _name(key[0], v[1])) for key, v in tried.items() if key != choice)[:2]
    why = (f"cost model: {_name(kind, ranges)} ~{round(est)} cycles"
           + "".join(f"; {name} ~{round(v)}" for v, name in others))
    return kind, ranges, why


def _candidates(s, ncores: int, unit: int, kinds: tuple[str, ...]
                ) -> list[tuple[str, list[tuple[int, int]]]]:
    """The splits of ``kinds`` (output rows, output pixels in raster order, output channels
    in blocks of ``unit``) of a layer of shape ``s`` over 1..``ncores`` cores.  A pixels
    split is tried only where whole rows cannot share the map out evenly."""
    out = []
    for kind in kinds:
        if kind == "tiles":
            out += _tilings(s.oh, s.rows, ncores, unit)
            continue
        for k in range(1, ncores + 1):
            if kind == "pixels":
                if s.oh % k == 0 or k < ncores:
                    continue
                ranges = blocks(s.oh * s.ow, k)
            else:
                ranges = blocks(s.oh, k) if kind == "rows" else blocks(s.rows, k, unit)
            if len(ranges) < k:
                break
            out.append((kind, ranges))
    return out


def _tilings(oh: int, channels: int, ncores: int, unit: int
             ) -> list[tuple[str, list[tuple[int, int, int, int]]]]:
    """Splits of a convolution with ``oh`` output rows and ``channels`` output channels
    into ``a`` blocks of rows x ``b`` blocks of channels (multiples of ``unit``; ``a, b >=
    2``, ``a * b <= ncores``): each core computes one tile ``(r0, r1, c0, c1)``, row
    block by row block."""
    out = []
    for a in range(2, min(oh, ncores // 2) + 1):
        rows = blocks(oh, a)
        for b in range(2, ncores // a + 1):
            chans = blocks(channels, b, unit)
            if len(chans) < b:
                break
            out.append(("tiles", [(r0, r1, c0, c1) for r0, r1 in rows for c0, c1 in chans]))
    return out


def _name(kind: str, ranges: list) -> str:
    """How the report names a split: ``rows x13``, ``tiles 4x4`` (row x channel blocks)."""
    if kind == "tiles":
        b = len({r[2:] for r in ranges})
        return f"tiles {len(ranges) // b}x{b}"
    return f"{kind} x{len(ranges)}"


def _as_pixels(kind: str, ranges: list[tuple[int, int]], width: int) -> list[tuple[int, int]] | None:
    """A spatial split's blocks as pixel ranges (``None`` for a channels split)."""
    if kind == "rows":
        return [(lo * width, hi * width) for lo, hi in ranges]
    return ranges if kind == "pixels" else None


def _pixel_aligned(g: Graph, root: str) -> bool:
    """Can a map stored in ``root`` be split into blocks of pixels?  Each pixel of it must
    start 8-aligned (remote writes do), so its channels are a multiple of 8."""
    shape = g.tensor(root).shape
    return len(shape) == 4 and shape[1] % 8 == 0


def _out_pixels(g: Graph, n: Node) -> int:
    shape = g.tensor(n.outputs[0]).shape
    return shape[2] * shape[3] if len(shape) == 4 else 1


def _out_rows(g: Graph, n: Node) -> int:
    shape = g.tensor(n.outputs[0]).shape
    return shape[2] if len(shape) == 4 else 1


@dataclass(frozen=True)
class LayerEstimate:
    """The cost model's view of one image of a layer on ``k`` cores, its maps in shared
    memory (throughput mode)."""

    cycles: float             #: weights loaded from shared memory
    cycles_resident: float    #: weights in the cores' local memories
    weights: float            #: weight bytes (indices, parameters) one core keeps
    traffic: float            #: shared-memory bytes, weights loaded from there
    traffic_resident: float   #: shared-memory bytes, weights resident


def layer_estimate(g: Graph, n: Node, config: CoreConfig, k: int = 1,
                   ports: int = 1) -> LayerEstimate:
    """One image of layer ``n`` on ``k`` cores that reach ``ports`` memory ports: a
    convolution split by rows, a matrix layer by output channels (each part the larger of
    its matrix-unit time and its port time, the layer its slowest part or the ports' share
    of its traffic, :func:`..array_cost.part_cycles`); any other layer moves its input and
    output maps over the ports."""
    bus = config.axi_data_bits // 8
    if n.op in MATRIX_OPS and "q" in n.meta:
        s = matrix_shape(g, n, 0)
        if n.op == "Conv" and s.oh > 1:
            shares = [(r, (0, s.rows)) for r in blocks(s.oh, k)]
        else:
            shares = [((0, s.oh), c) for c in blocks(s.rows, k, max(8, config.lanes))]
        parts = [(*part_cycles(s, config, r, c, True, True), part_cycles(s, config, r, c, False, False)[1])
                 for r, c in shares]

        def time(resident: bool) -> tuple[float, float]:
            # resident weights still take the core's load time (local memory is no
            # wider than the bus) but no longer cross the shared ports
            slowest = max(max(mx, b / bus) for mx, b, _ in parts)
            moved = sum(b - (w if resident else 0) for _, b, w in parts)
            return max(slowest, moved / bus / min(ports, len(parts))), moved

        (c, t), (cr, tr) = time(False), time(True)
        return LayerEstimate(c, cr, max(w for _, _, w in parts), t, tr)
    size = lambda t: int(np.prod(g.tensor(t).shape[1:]))  # noqa: E731  (one image)
    moved = sum(size(t) for t in [*n.inputs, *n.outputs] if t and not g.tensor(t).is_const)
    c = moved / bus / max(1, min(k, _out_rows(g, n), ports))
    return LayerEstimate(c, c, 0.0, moved, moved)


def _bottleneck_cut(cost, n: int, stages: int) -> tuple[float, list[tuple[int, int]]]:
    """Items ``0..n-1`` (in order) cut into at most ``stages`` contiguous runs whose
    largest ``cost(a, b)`` (of the run [a, b); it must grow with the run) is the least:
    (that cost, the runs); the fewest runs that reach it."""
    k = min(stages, n)
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(k + 1)]
    cut = [[0] * (n + 1) for _ in range(k + 1)]
    best[0][0] = 0.0
    for j in range(1, k + 1):
        prev, row, cj = best[j - 1], best[j], cut[j]
        for i in range(j, n + 1):
            for m in range(i - 1, j - 2, -1):
                here = cost(m, i)
                if here >= row[i]:
                    break  # earlier cuts only make this run longer
                v = max(prev[m], here)
                if v < row[i]:
                    row[i], cj[i] = v, m
    j = min(range(1, k + 1), key=lambda j: (best[j][n], j))
    runs, i = [], n
    for jj in range(j, 0, -1):
        runs.append((cut[jj][i], i))
        i = cut[jj][i]
    return best[j][n], runs[::-1]


def pipeline_stages(g: Graph, layers: list[Node], cores: list[Coord], config: CoreConfig,
                    images: int, width: int, ports: int
                    ) -> tuple[dict[str, int], list[list[Coord]], dict]:
    """Throughput mode: the core ``layers`` in program order cut into contiguous *stages*, each
    on its own group of ``k`` cores (every layer of a stage split over its group as
    :func:`parallelize` splits one image over an array of ``k``).  A stage whose weights
    fit its cores' local memories keeps them there (:meth:`.codegen_mesh._Segment.keep_resident`)
    and loads none through the ports.  For every group size ``k`` a dynamic programme cuts
    the layers so that the pipeline's step (its slowest stage, :func:`layer_estimate`) is
    the least; the step is at least the ports' share of every stage's traffic, and the
    group size whose ``images`` take the fewest estimated cycles,
    ``(images + stages - 1) x step``, wins.  Returns node name -> stage, the stages' cores
    and what the report says (with the estimate of the data-parallel split for
    comparison)."""
    bus = config.axi_data_bits // 8
    room = config.local_bytes - FLAG_BYTES
    best = None
    for k in range(1, len(cores) // 2 + 1):
        groups = [cores[i * k:(i + 1) * k] for i in range(len(cores) // k)]
        reach = len({memory_port(x, width, ports) for x, _ in groups[0]})
        est = [layer_estimate(g, n, config, k, reach) for n in layers]
        pre = {f: np.concatenate([[0.0], np.cumsum([getattr(e, f) for e in est])]).tolist()
               for f in ("cycles", "cycles_resident", "weights", "traffic", "traffic_resident")}

        def resident(a: int, b: int) -> bool:
            return pre["weights"][b] - pre["weights"][a] <= room

        def cost(a: int, b: int) -> float:
            f = "cycles_resident" if resident(a, b) else "cycles"
            return pre[f][b] - pre[f][a] + (b - a) * LAYER_LATENCY + HANDOVER

        step, runs = _bottleneck_cut(cost, len(layers), len(groups))
        moved = sum(pre[f][b] - pre[f][a] for a, b in runs
                    for f in ["traffic_resident" if resident(a, b) else "traffic"])
        step = max(step, moved / bus / ports)
        total = (images + len(runs) - 1) * step
        if best is None or total < best[0]:
            best = (total, k, step, runs, groups, sum(resident(a, b) for a, b in runs))
    total, k, step, runs, groups, kept = best
    stage = {n.name: s for s, (a, b) in enumerate(runs) for n in layers[a:b]}
    info = {"images": images, "stages": len(runs), "cores_per_stage": k,
            "stages_with_resident_weights": kept, "step_estimate": round(step),
            "cycles_estimate": round(total),
            "data_parallel_estimate": round(data_parallel_cycles(g, layers, config, cores, images,
                                                                 width, ports))}
    return stage, groups[:len(runs)], info


def data_parallel_cycles(g: Graph, layers: list[Node], config: CoreConfig, cores: list[Coord],
                         images: int, width: int, ports: int) -> float:
    """The cost model's cycles of ``images`` through ``layers`` without a pipeline: a batch
    at least as large as the array split by images (each core whole layers), a smaller one
    with each image on its own ``len(cores) // images`` cores; at least the ports' share of
    the traffic."""
    bus = config.axi_data_bits // 8
    k = max(1, len(cores) // images)
    reach = len({memory_port(x, width, ports) for x, _ in cores[:k]})
    est = [layer_estimate(g, n, config, k, reach) for n in layers]
    rounds = -(-images // len(cores)) if k == 1 else 1
    one = sum(e.cycles for e in est) + len(est) * LAYER_LATENCY
    return max(rounds * one, images * sum(e.traffic for e in est) / bus / ports)
