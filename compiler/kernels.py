"""Kernels: how each core operator becomes instructions, tiled to the core's buffers.

Every kernel splits its work into tiles that fit half of each on-chip buffer and alternates
the halves (ping-pong), so the loads of tile ``k + 1`` need not wait for the compute of
tile ``k``; how much they overlap depends on the emitter's automatic tokens (:mod:`.emit`:
the fc kernel's precise tokens overlap them fully).

* **Convolution** (:func:`conv`) is an fc over im2col patches: for a group of output
  pixels of one output row, one 3-D load gathers every pixel's ``kh x kw x C`` patch (plane
  = pixel, rows = kernel rows, bytes = ``kw * C``) from the zero-haloed input into the
  neuron buffer, thresholded on the way (the direct neuron index); the fc computes every
  output channel of the tile; ``req`` and ``st`` write the output pixels.  Channel slices
  (concatenation inputs) and input-channel splits load each patch with its own 3-D load.
  Grouped and depthwise convolutions are fc with structurally sparse weights.
* **Fully connected** (:func:`fc`): the input vector is loaded in chunks that fit the
  neuron buffer, the partial sums accumulate in ``acc``; output rows are tiled to the
  weight banks, in the tiles whose loads overlap the fcs best (:mod:`.tiling`), the
  steps software-pipelined with precise tokens (:meth:`.emit.Emitter.overlapped`).
* **Pooling** (:func:`pool`): input rows into ``acc`` (int8 sign-extended), one ``vred``
  per run of output pixels with the same clipped window (borders never read padding, so
  max pooling is exact for negative inputs and average pooling divides by the right count),
  ``req`` with the divisor's multiplier (a run requantised as one pixel of all its
  channels); every pixel group's window at one accumulator pitch, so the stride registers
  do not change from group to group.
* **Global average pooling** (:func:`global_pool`), **sums** (:func:`add`: ``vew`` with
  int16 input multipliers), **per-channel affine** / standalone ReLU (:func:`affine`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Callable

import numpy as np

from snpu.errors import CompileError
from snpu.verif import layout as lanes_layout
from snpu.config import CoreConfig
from snpu.verif import act_compress, numerics, timing
from snpu.verif.index import FORMAT_CODES
from snpu.verif.isa import Unit

from . import tiling
from .emit import Kernels
from .memory import TensorLayout

FMT = FORMAT_CODES


def _r(x: int, m: int) -> int:
    return -(-x // m) * m


class LayerContext:
    """What every kernel needs: the emitter, the image, and the layer's parameter rows."""

    def __init__(self, k: Kernels, layer_index: int, name: str, dense: bool = False,
                 neurons: dict | None = None, shared: dict | None = None):
        self.k = k
        #: read-only data already in the image, by content (the cores of an array that run
        #: parts of one layer share its weights): ``None`` places every array anew
        self.shared = shared
        #: dense mode (the baseline for sparse speedups): dense weight format, activations
        #: loaded without the sparse processing unit's threshold (no neuron index)
        self.dense = dense
        #: the sparse processing unit's settings for this layer's input (passes/neurons.py)
        self.neurons = None if dense else (neurons or {"threshold": 0, "group": None,
                                                        "density": 1.0})
        self.threshold = None if self.neurons is None else int(self.neurons["threshold"])
        g = self.neurons.get("group") if self.neurons else None
        self.group = tuple(int(v) for v in g) if g else None
        self.nfmt = FMT["dense"] if dense else FMT["direct"]
        self.cfg = k.cfg
        self.image = k.p.image
        self.name = name
        self.index = layer_index
        self.nb_half = self.cfg.nbuf_bytes // 2
        self.acc_half = self.cfg.acc_elems // 2
        self.ob_half = self.cfg.obuf_bytes // 2
        self.wb_half = self.cfg.wbuf_bytes // 2
        self.ib_half = self.cfg.widx_bytes // 2
        self.param_half = self.cfg.param_rows // 2
        self.param_base = (layer_index % 2) * self.param_half
        #: the ping-pong halves continue from the previous kernel of the program (its last
        #: tile's half is still busy when this kernel's first tile starts)
        self._toggles: dict[str, int] = k.__dict__.setdefault("_toggles", {})
        #: read-only data this core keeps in its local memory (throughput mode: a pipeline
        #: stage's weights), by content: its local address
        self.resident: dict = {}

    def data(self, tag: str, array: np.ndarray, kind: str = "weights", align: int = 8) -> int:
        """The address of ``array`` (weights, indices, parameter rows) in memory: placed in
        the image (once per content when the cores share it), or its copy in this core's
        local memory when it is :attr:`resident`."""
        a = np.ascontiguousarray(array)
        key = None
        if self.shared is not None or self.resident:
            key = data_key(a, kind, align)
            if key in self.resident:
                return self.resident[key]
            if self.shared is not None and key in self.shared:
                return self.shared[key]
        region = self.image.alloc(f"{self.name}:{tag}", max(a.nbytes, 1), kind, a.dtype.str,
                                  a.shape, align=align)
        self.image.write(region.name, a)
        if key is not None and self.shared is not None:
            self.shared[key] = region.addr
        return region.addr

    def load_params(self, sets: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
                    multipliers: list[tuple[int, int]] = ()) -> list[int]:
        """Load per-channel parameter sets (bias, mult, shift, each padded to lanes), then
        one row per pair of ``vewp`` multipliers (ma, mb), into this layer's half of the
        parameter memory; returns each set's and each pair's first row."""
        P = self.cfg.lanes
        rows, blobs = [], []
        row = self.param_base
        for bias, mult, shift in sets:
            n = _r(len(bias), P)
            pad = lambda a: np.concatenate([np.asarray(a, np.int64), np.zeros(n - len(a), np.int64)])
            blobs.append(numerics.pack_params(pad(bias), pad(mult), pad(shift)))
            rows.append(row)
            row += n // P
        for ma, mb in multipliers:
            blobs.append(numerics.pack_ew_multipliers(ma, mb, self.cfg.param_row_bytes))
            rows.append(row)
            row += 1
        if row - self.param_base > self.param_half:
            raise CompileError(f"layer {self.name!r}: {row - self.param_base} parameter rows do "
                               f"not fit half of the parameter memory ({self.param_half})")
        blob = np.concatenate(blobs)
        self._params_loaded = getattr(self, "_params_loaded", 0) + 1
        addr = self.data(f"params{self._params_loaded}", blob, "params", 8)
        self.k.ld("param", addr, self.param_base * self.cfg.param_row_bytes, blob.size)
        return rows

    def load_neurons(self, *args, **kw) -> None:
        """An nbuf load through the sparse processing unit with this layer's settings."""
        self.k.ld("nbuf", *args, threshold=self.threshold, group=self.group, **kw)

    def neuron_report(self) -> dict:
        if self.neurons is None:
            return {}
        out = {"neuron_threshold": self.threshold, "neuron_density": self.neurons.get("density")}
        if self.group:
            out["neuron_groups"] = list(self.group)
        elif self.neurons.get("group_off"):
            out["neuron_groups"] = self.neurons["group_off"]
        return out

    def weight_path(self, w: np.ndarray, fmt: str, n_in: int) -> tuple[str, int, dict]:
        """How weights whose smallest encoding is ``fmt`` meet the neurons: (the format
        stored and run, ``mx.mixed``, what the report says).

        A stride index meets direct neurons on one of the two mixed paths, chosen by the
        cost model (:func:`timing.fc_row_cycles_estimate`, this layer's densities) or by
        ``--mixed-path``: *expand* it to a bitmap and AND (claim 9) -- done here, at compile
        time: the weights are stored direct, as the lanes have no weight-side expander --
        or convert the neuron bitmap to strides and *merge* (claim 10: stored stride,
        ``mx.mixed = 1``).  (Dense neurons come with dense weights: ``fmt`` is then
        ``dense``.)"""
        if fmt != "stride":
            return fmt, 0, {}
        forced = self.neurons.get("mixed", "auto")
        if forced != "auto":
            path, report = forced, {"mixed_path": forced}
        else:
            dn = float(self.neurons.get("density", 1.0))
            kept = float(np.count_nonzero(w)) / max(1, w.shape[0])
            cost = {p: timing.fc_row_cycles_estimate(n_in, kept, dn, self.cfg.chunk_bits,
                                                     p == "merge", expand=False)
                    for p in ("expand", "merge")}
            path = min(cost, key=cost.get)
            report = {"mixed_path": path,
                      "mixed_cost": {k: round(v, 1) for k, v in cost.items()}}
        return ("stride", 1, report) if path == "merge" else ("direct", 0, report)

    def alternate(self, resource: str = "buf") -> int:
        """0 / 1: the next half of ``resource`` (ping-pong)."""
        self._toggles[resource] = self._toggles.get(resource, 1) ^ 1
        return self._toggles[resource]


def data_key(a: np.ndarray, kind: str, align: int) -> tuple:
    """What identifies a blob of read-only data (:meth:`LayerContext.data`): its content."""
    return (kind, a.dtype.str, a.shape, align, hashlib.sha1(a.tobytes()).digest())


class WeightTiles:
    """A layer's quantised weights ``[rows, K]`` split into row tiles (and column chunks)
    that fit half of every lane's banks, encoded in the layer's index format.

    In external memory every tile is one *record* of a fixed size: the tile's requantisation
    parameters, then per column chunk its weight values and its index, each *striped* over
    the lanes (lane ``g``'s bank at ``g * stride``, every lane padded to the same length) so
    that one ``ld`` with a plane per lane fills every lane's bank.  Records (and the parts in
    them) lie at constant strides, so the loads of consecutive tiles differ only in their
    external address by one record: the re-roller turns the tile sequence into a loop that
    walks the weight stream.  Padding to the layer's largest tile is skipped when it would
    cost more than :data:`PAD_LIMIT` of the layer's bytes (each tile then keeps its sizes).
    """

    PAD_LIMIT = 0.125

    def __init__(self, ctx: LayerContext, w: np.ndarray, fmt: str, col_chunks: list[tuple[int, int]],
                 q: dict, pipeline: tiling.Pipeline | None = None):
        self.ctx, self.w, self.fmt = ctx, w, fmt
        P = ctx.cfg.lanes
        self.chunks = col_chunks
        # row tiles (multiples of the lanes) whose every chunk fits every lane's half-bank:
        # the largest, or with ``pipeline`` the fastest with loads overlapping the fcs
        self.tiles = tiling.row_tiles(tiling.row_bytes(w, fmt, col_chunks), P,
                                      (ctx.wb_half, ctx.ib_half),
                                      min(4095 // P * P, ctx.param_half * P), pipeline,
                                      where=f"layer {ctx.name!r}")
        self._build_records(q)

    def _build_records(self, q: dict) -> None:
        """Encode every tile's parameters and banks and lay the records out (see above)."""
        ctx, P = self.ctx, self.ctx.cfg.lanes
        banks = [[lanes_layout.encode_weight_tile(self.w[r0:r1, c0:c1], self.fmt, P, 64)
                  for c0, c1 in self.chunks] for r0, r1 in self.tiles]
        params = [numerics.pack_params(*(np.concatenate([np.asarray(q[k][r0:r1], np.int64),
                                                         np.zeros(_r(r1 - r0, P) - (r1 - r0),
                                                                  np.int64)])
                                         for k in ("bias", "mult", "shift")))
                  for r0, r1 in self.tiles]
        # per tile: the param bytes, and per chunk the striped lane length of wbuf and widx
        sizes = [(p.size, [(_r(max(len(b.wbuf) for b in bk), 8), _r(max(len(b.widx) for b in bk), 8))
                           for bk in chunks]) for p, chunks in zip(params, banks)]
        most = (max(s[0] for s in sizes),
                [tuple(max(s[1][j][i] for s in sizes) for i in range(2)) for j in range(len(self.chunks))])
        used = sum(p + P * sum(a + b for a, b in c) for p, c in sizes)
        uniform = most[0] + P * sum(a + b for a, b in most[1])
        if uniform * len(sizes) - used <= self.PAD_LIMIT * used:
            sizes = [most] * len(sizes)
        self.records = []  # per tile: (param addr, param bytes, [(wbuf addr, stride, widx addr, stride)])
        for t, ((pbytes, chunk_sizes), p, chunks) in enumerate(zip(sizes, params, banks)):
            record = bytearray(pbytes + P * sum(a + b for a, b in chunk_sizes))
            record[:p.size] = p.tobytes()
            offsets, off = [], pbytes
            for (sw, si), bk in zip(chunk_sizes, chunks):
                for g, b in enumerate(bk):
                    record[off + g * sw:off + g * sw + len(b.wbuf)] = b.wbuf
                    record[off + P * sw + g * si:off + P * sw + g * si + len(b.widx)] = b.widx
                offsets.append((off, sw, off + P * sw, si))
                off += P * (sw + si)
            base = ctx.data(f"tile{t}", np.frombuffer(bytes(record), np.uint8), "weights", 8)
            self.records.append((base, pbytes, [(base + o1, s1, base + o2, s2)
                                                for o1, s1, o2, s2 in offsets],
                                 [(max(len(b.wbuf) for b in bk), max(len(b.widx) for b in bk))
                                  for bk in chunks]))

    def load_params(self, t: int, alternate: bool = False) -> int:
        """Emit the load of tile ``t``'s requantisation parameters; returns their first row:
        the layer's parameter half, or with ``alternate`` the half of that half that tile
        ``t - 1`` did not use (its requantisation may still be reading it)."""
        ctx = self.ctx
        base, pbytes, _, _ = self.records[t]
        row = ctx.param_base + (t % 2) * (ctx.param_half // 2) * alternate
        ctx.k.ld("param", base, row * ctx.cfg.param_row_bytes, pbytes)
        return row

    def load(self, t: int, j: int, half: int) -> tuple[int, int, int, int]:
        """Emit the loads of tile ``t``, chunk ``j`` into weight half ``half`` (one striped
        load per bank kind); returns (wbuf, widx, max wbuf bytes, max widx bytes)."""
        ctx, k, P = self.ctx, self.ctx.k, self.ctx.cfg.lanes
        wb, ib = half * ctx.wb_half, half * ctx.ib_half
        (wa, ws, ia, isz), (wmax, imax) = self.records[t][2][j], self.records[t][3][j]
        for buf, addr, stride, dst in (("wbuf", wa, ws, wb), ("widx", ia, isz, ib)):
            if stride:
                k.ld(buf, addr, dst, stride, n3=P, lane=0)
        return wb, ib, wmax, imax


def choose_format(w: np.ndarray) -> str:
    """The weight index format with the smallest encoding (dense needs no index)."""
    # (the stride index is only sized for sparse weights: its entries take a pass per row)
    indexed = ["direct", "stride"] if np.count_nonzero(w) < 0.3 * w.size else ["direct"]
    return min([(w.size, "dense")] + [(int(tiling.row_bytes(w, f, [(0, w.shape[1])]).sum()), f)
                                      for f in indexed])[1]


# ---------------------------------------------------------------------------------------------


def conv_channel_chunk(cin: int, kh: int, kw: int, nb_half: int, group: int = 1) -> int:
    """Input channels per chunk, so that a chunk's ``kh x kw`` patches fit half the neuron
    buffer; a multiple of ``group`` (neuron groups must not straddle two chunks).  Returns 0
    if no such chunk exists."""
    ck = cin
    while ck > 1 and _r(kh * kw * ck, 64) > nb_half:
        ck = -(-ck // 2)
    if group > 1:
        ck = max(group, ck // group * group)
        if _r(kh * kw * ck, 64) > nb_half:
            return 0
    return ck


def conv(ctx: LayerContext, node, X: TensorLayout, Y: TensorLayout,
         rows: tuple[int, int] | None = None, channels: tuple[int, int] | None = None,
         cols: tuple[int, int] | None = None) -> dict:
    """Convolution; a core's share of a layer split across an array: ``rows``, only output
    rows [r0, r1) (``cols``: the first from column x0, the last up to x1: a block of
    pixels, :func:`row_spans`); ``channels``, only output channels [c0, c1) (only that
    slice of the weights is stored and loaded)."""
    k, P = ctx.k, ctx.cfg.lanes
    q = node.meta["q"]
    kh, kw, sh, sw, pads, _, _, oh, ow = node.meta["geometry"]
    rows = rows or (0, oh)
    out0 = 0
    if channels is not None:
        out0, out1 = channels
        q = {**q, "w": q["w"][out0:out1], **{key: q[key][out0:out1] for key in ("bias", "mult", "shift")}}
    cin = X.c
    if X.pad_h < max(pads[0], pads[2]) or X.pad_w < max(pads[1], pads[3]):
        raise CompileError(f"{node.where()}: input halo smaller than the padding")
    ck = conv_channel_chunk(cin, kh, kw, ctx.nb_half, ctx.group[0] if ctx.group else 1)
    cchunks = [(c0, min(cin, c0 + ck)) for c0 in range(0, cin, ck)]
    # weight columns of each chunk, in (ky, kx, c) patch order
    col = np.arange(kh * kw * cin).reshape(kh, kw, cin)
    w = q["w"]
    col_sets = [col[:, :, c0:c1].reshape(-1) for c0, c1 in cchunks]
    wcat = np.concatenate([w[:, s] for s in col_sets], axis=1)
    bounds, off = [], 0
    for s in col_sets:
        bounds.append((off, off + s.size))
        off += s.size
    fmt, mixed, mixed_report = ctx.weight_path(w, "dense" if ctx.dense else choose_format(w),
                                               kh * kw * cin)
    tiles = WeightTiles(ctx, wcat, fmt, bounds, q)
    contiguous = len(cchunks) == 1 and X.pixel == cin
    kmax = max(_r(kh * kw * (c1 - c0), 64) for c0, c1 in cchunks)
    for t, (r0, r1) in enumerate(tiles.tiles):
        R = r1 - r0
        Rp = _r(R, P)
        prow = tiles.load_params(t)
        G = max(1, min(ow, ctx.nb_half // kmax, ctx.acc_half // Rp, ctx.ob_half // Rp, 4095))
        # one chunk: the tile's weights stay in the banks; several: reloaded per pixel group
        whalves = [tiles.load(t, 0, ctx.alternate("w"))] if len(cchunks) == 1 else [None] * len(cchunks)
        def row(oy: int, xa: int = 0, xb: int = ow) -> None:
            iy0 = oy * sh - pads[0]
            for ox0 in range(xa, xb, G):
                g = min(G, xb - ox0)
                half = ctx.alternate()
                nb, ab, ob = half * ctx.nb_half, half * ctx.acc_half, half * ctx.ob_half
                for j, (c0, c1) in enumerate(cchunks):
                    kj = kh * kw * (c1 - c0)
                    ns = _r(kj, 64)
                    if len(cchunks) > 1:
                        whalves[j] = tiles.load(t, j, ctx.alternate("w"))
                    if contiguous:
                        ctx.load_neurons(X.addr(iy0, ox0 * sw - pads[1]), nb, kw * cin, kh, g,
                                         ext_stride=X.row, dst_stride=kw * cin,
                                         ext_stride3=sw * X.pixel, dst_stride3=ns)
                    else:
                        for i in range(g):
                            ctx.load_neurons(X.addr(iy0, (ox0 + i) * sw - pads[1], c0),
                                             nb + i * ns, c1 - c0, kw, kh, ext_stride=X.pixel,
                                             dst_stride=c1 - c0, ext_stride3=X.row,
                                             dst_stride3=kw * (c1 - c0))
                    wb, ib, wbytes, ibytes = whalves[j]
                    k.fc(nbuf=nb, n_in=kj, rows=R, acc=ab, wbuf=wb, widx=ib, wbytes=wbytes,
                         ibytes=ibytes, nvec=g, nstride=ns, nfmt=ctx.nfmt, wfmt=FMT[fmt],
                         accumulate=int(j > 0), acc_stride=Rp, mixed=mixed)
                k.req(ob, ab, prow, g, Rp // P, int(q["relu"]), src_stride=Rp, dst_stride=Rp)
                _store_pixels(k, Y, oy, ox0, out0 + r0, R, g, ob, Rp)

        walk_rows(ctx, rows, cols, ow, G, row, CONV_TILE_WAITS)
    return {"format": fmt, "density": float(np.count_nonzero(w)) / w.size,
            "weight_tiles": len(tiles.tiles), "channel_chunks": len(cchunks),
            **ctx.neuron_report(), **mixed_report}


def row_spans(rows: tuple[int, int], cols: tuple[int, int] | None,
              width: int) -> list[tuple[int, int, int]]:
    """``(y, x0, x1)``: the output pixels of each row of ``rows`` a kernel computes, for a
    map ``width`` pixels wide: whole rows, but the first starts at ``cols[0]`` and the last
    ends before ``cols[1]`` (a core's block of pixels in raster order)."""
    r0, r1 = rows
    a, b = cols or (0, width)
    return [(y, a if y == r0 else 0, b if y == r1 - 1 else width) for y in range(r0, r1)]


def column_passes(width: int, per: int, split: bool = True) -> list[tuple[int, int]]:
    """The column ranges ``[x0, x1)`` a kernel walking rows of ``width`` pixels in groups
    of at most ``per`` covers in separate passes over the rows: the whole groups, then the
    last, shorter group (a row of 14 pixels in groups of 5: columns 0-10 in groups of 5
    for every row, then columns 10-14 for every row).  Each pass has the same groups in
    every row, so each is one loop over the rows with a body of one row of equal groups;
    rows of 5, 5, 4 would need a body of all three (or of two rows, for the ping-pong
    halves to come back) and a different group size in the middle of it.  ``split``
    false: one pass (the speed mode's kernels: with tokens from direct knowledge only every
    pass is software-pipelined on its own, and its ramp costs more words than the split
    saves; the default mode's units know what their tokens tell, and there the split
    saves words and cycles: shufflenet as shipped 1 529 -> 1 383 words, at weight
    density 0.5 6 047 064 -> 6 015 164 golden-model cycles)."""
    if not (split and _split_row(width, per)):
        return [(0, width)]
    whole = width // per * per
    return [(0, whole), (whole, width)]


def _split_row(width: int, per: int) -> bool:
    """Are rows of ``width`` pixels in groups of ``per`` walked in two passes
    (:func:`column_passes`)?  Where the whole groups are an even number: the ping-pong
    halves then come back after every row of each pass.  With an odd number of whole
    groups the whole row is an even number of groups already."""
    whole = width // per
    return width % per != 0 and whole >= 2 and whole % 2 == 0


#: the writes a convolution's tiles make that wait, tile after tile, for another unit's
#: access to that half two tiles back, as (writer, the unit waited for, buffer): its neuron
#: loads for MX, its fc for VX, its ``req`` for ST (:meth:`~.emit.Emitter.prime`)
CONV_TILE_WAITS = ((Unit.LD, Unit.MX, "nbuf"), (Unit.MX, Unit.VX, "acc"),
                   (Unit.VX, Unit.ST, "obuf"))
#: the same for the vector unit's kernels (batch norm, sum, copy, pooling): their
#: accumulator loads wait for VX, their ``req`` for ST
VECTOR_TILE_WAITS = ((Unit.LD, Unit.VX, "acc"), (Unit.VX, Unit.ST, "obuf"))


def walk_rows(ctx: LayerContext, rows: tuple[int, int], cols: tuple[int, int] | None,
              width: int, per: int, row: Callable[[int, int, int], None],
              waits: tuple[tuple[Unit, Unit, str], ...] = (),
              key: Callable[[int], object] = lambda y: None, split: bool | None = None,
              tiles_per_group: int = 1) -> None:
    """``row(y, x0, x1)`` over the output pixels of ``rows`` (``cols``: :func:`row_spans`)
    of a map ``width`` pixels wide, where ``row`` walks its span in groups of ``per``
    pixels, each group flipping the ping-pong halves once.  Rows differ only in where they
    load and store (and rows of different ``key(y)``, e.g. a pooling window clipped at
    the top, in more): a partial first and last row are emitted on their own, each run of
    rows of one key as loops over rows (:func:`loop_rows`; over row pairs where a row has an
    odd number of groups, so that the halves come back to where they started), the whole
    groups of every row first, then every row's last, shorter group (:func:`column_passes`;
    ``split``: whether to, by default where units know what their tokens tell).  ``waits``:
    the tiles' writes that wait for the work two tiles back (:data:`CONV_TILE_WAITS`), for
    which the first tiles ask credits (:meth:`~.emit.Emitter.prime`).  ``tiles_per_group``:
    the tiles (halves flipped) ``row`` emits per group, where it is more than one (a
    pooling's channel chunks)."""
    for writer, waited, buf in waits:
        ctx.k.prime(writer, waited, buf)
    spans = row_spans(rows, cols, width)
    head = [s for s in spans[:1] if s[1:] != (0, width)]
    tail = [s for s in spans[len(head):][-1:] if s[1:] != (0, width)]
    for span in head:
        row(*span)
    y, end = rows[0] + len(head), rows[1] - len(tail)
    passes = column_passes(width, per, ctx.k.transitive if split is None else split)
    while y < end:
        run = y + 1
        while run < end and key(run) == key(y):
            run += 1
        for xa, xb in passes:
            period = 1 if -(-(xb - xa) // per) * tiles_per_group % 2 == 0 else 2
            loop_rows(ctx, (y, run), period, lambda r, xa=xa, xb=xb: row(r, xa, xb))
        y = run
    for span in tail:
        row(*span)


def loop_rows(ctx: LayerContext, rows: tuple[int, int], period: int,
              row: Callable[[int], None]) -> None:
    """``row(r)`` for every r in ``rows``, as a loop of ``period`` rows per iteration
    (:meth:`~.emit.Emitter.repeat`): ``row`` must emit the same instructions for every row
    but for load and store addresses linear in ``r``, and after ``period`` rows leave the
    ping-pong halves as it found them.  Rows left over (an odd number of rows walked in
    pairs) come first: the loop then ends the kernel and takes its last tile in, leaving
    its credits, where a row after it would give the next kernel's tokens from its own
    words and stay out of the loop (inception_v1 as shipped 1 687 -> 1 487 words)."""
    r0, r1 = rows
    iters = (r1 - r0) // period
    first = r1 - r0 - iters * period
    for r in range(r0, r0 + first):
        row(r)
    r0 += first
    ctx.k.repeat(iters, lambda i: [row(r0 + i * period + j) for j in range(period)],
                 state=lambda: tuple(sorted(ctx._toggles.items())))


def fc(ctx: LayerContext, node, X: TensorLayout, Y: TensorLayout,
       channels: tuple[int, int] | None = None) -> dict:
    """Fully connected: the HWC-flattened input (a view's source) times ``q["w"]``;
    ``channels``: compute only outputs [c0, c1) (a core's share of a layer split by output
    channels across the array: only that slice of the weights is stored and loaded)."""
    k, P = ctx.k, ctx.cfg.lanes
    q = node.meta["q"]
    n_in = X.h * X.w * X.c
    w = q["w"]
    out0 = 0
    if channels is not None:
        out0, out1 = channels
        q = {**q, "w": w[out0:out1], **{key: q[key][out0:out1] for key in ("bias", "mult", "shift")}}
        w = q["w"]
    if w.shape[1] != n_in:
        raise CompileError(f"{node.where()}: weights have {w.shape[1]} columns for {n_in} inputs")
    # input chunks that fit half of the neuron buffer, on whole pixels
    if X.c <= ctx.nb_half:
        per = (ctx.nb_half // X.c) * X.c
    elif X.dense:
        per = ctx.nb_half
    else:
        raise CompileError(f"{node.where()}: a {X.c}-channel pixel does not fit half the neuron buffer")
    chunks = [(e0, min(n_in, e0 + per)) for e0 in range(0, n_in, per)]
    fmt, mixed, mixed_report = ctx.weight_path(w, "dense" if ctx.dense else choose_format(w), n_in)
    resident = len(chunks) == 1
    tiles = WeightTiles(ctx, w, fmt, chunks, q, _fc_pipeline(ctx, w, fmt, chunks, mixed, resident))
    if resident:
        _load_vector(ctx, X, 0, n_in, 0)
    # steps (tile, chunk), software-pipelined in program order: step s + 1's loads come
    # before step s's fc and, with the emitter's precise tokens (Kernels.overlapped), wait
    # only for the fc and the requantisation two steps back that used their halves
    steps = [(t, j) for t in range(len(tiles.tiles)) for j in range(len(chunks))]
    halves: dict[int, tuple[int, int]] = {}  # tile -> (its acc / obuf half, its parameter row)

    def load(t: int, j: int) -> tuple[int, int, int, int, int]:
        if j == 0:
            halves[t] = (ctx.alternate(), tiles.load_params(t, alternate=len(tiles.tiles) > 1))
        banks = tiles.load(t, j, ctx.alternate("w"))
        nb = 0
        if not resident:
            nb = ctx.alternate("nbuf") * ctx.nb_half
            _load_vector(ctx, X, *chunks[j], nb)
        return (*banks, nb)

    def compute(step: tuple[int, int], loaded: tuple[int, int, int, int, int]) -> None:
        (t, j), (wb, ib, wbytes, ibytes, nb) = step, loaded
        (r0, r1), (half, prow) = tiles.tiles[t], halves[t]
        R, Rp, (e0, e1) = r1 - r0, _r(r1 - r0, P), chunks[j]
        ab, ob = half * ctx.acc_half, half * ctx.ob_half
        k.fc(nbuf=nb, n_in=e1 - e0, rows=R, acc=ab, wbuf=wb, widx=ib, wbytes=wbytes,
             ibytes=ibytes, nvec=1, nfmt=ctx.nfmt, wfmt=FMT[fmt], accumulate=int(j > 0),
             mixed=mixed)
        if j == len(chunks) - 1:
            k.req(ob, ab, prow, 1, Rp // P, int(q["relu"]), src_stride=Rp, dst_stride=Rp)
            k.st(ob, Y.addr(0, 0, out0 + r0), R)

    with k.overlapped():
        _pipelined_steps(steps, load, compute)
    return {"format": fmt, "density": float(np.count_nonzero(w)) / w.size,
            "weight_tiles": len(tiles.tiles), "input_chunks": len(chunks),
            **ctx.neuron_report(), **mixed_report}


def _pipelined_steps(steps: list, load, compute) -> None:
    """``load(step)`` then, for every step, the next step's ``load`` before this step's
    ``compute(step, loaded)``."""
    loaded = load(*steps[0])
    for s, step in enumerate(steps):
        now = loaded
        if s + 1 < len(steps):
            loaded = load(*steps[s + 1])
        compute(step, now)


def _fc_pipeline(ctx: LayerContext, w: np.ndarray, fmt: str, chunks: list[tuple[int, int]],
                 mixed: int, resident: bool) -> tiling.Pipeline:
    """What an fc layer's steps cost, for choosing its row tiles (:mod:`.tiling`): every
    row's fc cycles per chunk from the weights and the input's measured density
    (:func:`timing.fc_row_cycles_estimate`), and each chunk's input load when the input
    does not stay in the neuron buffer."""
    cfg = ctx.cfg
    density = 1.0 if ctx.neurons is None else float(ctx.neurons.get("density", 1.0))
    compute = tiling.fc_row_cycles(w, fmt, chunks, density, cfg.chunk_bits, bool(mixed))
    extra = [] if resident else [timing.ld_cycles(np.zeros(1, np.int64), e1 - e0, cfg.axi_bytes)
                                 for e0, e1 in chunks]
    return tiling.Pipeline(compute, cfg.axi_bytes, cfg.param_row_bytes / cfg.lanes, extra,
                           split_rows=ctx.param_half // 2 * cfg.lanes)


def _load_vector(ctx: LayerContext, X: TensorLayout, e0: int, e1: int, dst: int) -> None:
    """Elements [e0, e1) of the HWC-flattened tensor into the neuron buffer at ``dst``,
    thresholded (chunks start and end on whole pixels)."""
    c = X.c
    if X.dense:
        ctx.load_neurons(X.base + e0, dst, e1 - e0)
        return
    p0, p1 = e0 // c, e1 // c
    while p0 < p1:
        y, x = divmod(p0, X.w)
        run = min(p1 - p0, X.w - x)
        ctx.load_neurons(X.addr(y, x), dst + (p0 * c - e0), c, run, ext_stride=X.pixel,
                         dst_stride=c)
        p0 += run


def pool(ctx: LayerContext, node, X: TensorLayout, Y: TensorLayout,
         rows: tuple[int, int] | None = None, cols: tuple[int, int] | None = None) -> dict:
    """Max / average pooling; ``rows``: only output rows [r0, r1) (``cols``: of the first
    and the last, only from / up to these columns: :func:`row_spans`)."""
    from .ops import pool_geometry

    k, P = ctx.k, ctx.cfg.lanes
    q = node.meta["q"]
    kh, kw, sh, sw, pads, oh, ow = pool_geometry(node, (1, X.c, X.h, X.w))
    out_rows = rows or (0, oh)
    c, cp = X.c, _r(X.c, P)
    # windows are clipped to the map, or to its zero halo where zeros are exact for this
    # pooling (ops.pool_halo): then every window has the pooling's own shape
    hy, hx = (X.pad_h, X.pad_w) if any(q.get("halo", ())) else (0, 0)
    is_max = node.op == "MaxPool"
    if is_max:
        keys = {0: (1, 0)}
        div = np.zeros((oh, ow), np.int64)
    else:
        div = q["divisors"]
        keys = q["by_divisor"]
    key_list = sorted(keys)
    # channel chunks and output pixels per group: the input tile (kh rows x span pixels)
    # and the outputs must fit half the accumulators; every divisor's parameter set (the
    # same values for every channel) covers one chunk
    cc = cp
    while cc > P and (kh * kw * cc + cc > ctx.acc_half or len(key_list) * cc // P > ctx.param_half):
        cc = _r(cc // 2, P)
    if kh * kw * cc + cc > ctx.acc_half:
        raise CompileError(f"{node.where()}: a {kh}x{kw} window of {P} channels does not fit")
    G = ow
    while G > 1 and (kh * ((G - 1) * sw + kw) * cc + G * cc > ctx.acc_half or G * cc > ctx.ob_half):
        G = -(-G // 2)
    # every channel of a pooling has the same parameters: with sets G pixels long, a run of
    # output pixels is requantised as one pixel of all their channels, so ``req`` needs no
    # pixel stride and the VX stride registers keep the window's strides (no cfg per group)
    flat = len(key_list) * G * cc // P <= ctx.param_half and G * cc // P <= 255
    # every group's window sits in the accumulators at one pitch (the widest group's), with
    # its outputs after a whole window: the same strides and addresses for every group
    pitch = (G - 1) * sw + kw
    per_set = G * cc if flat else cc
    rows = ctx.load_params([(np.zeros(per_set), np.full(per_set, keys[d][0]),
                             np.full(per_set, keys[d][1])) for d in key_list])
    param_of = dict(zip(key_list, rows))

    def window_rows(oy: int) -> tuple[int, int]:
        iy0 = oy * sh - pads[0]
        return max(-hy, iy0), min(X.h + hy, iy0 + kh)

    # every chunk of channels has the pitch of a whole one (the last one's padding is
    # computed and not stored), so every chunk's tile reads the same registers
    ncp = _r(cc, P)
    chunks = [(c0, min(cc, c - c0)) for c0 in range(0, c, cc)]

    def pool_row(oy: int, oxa: int, oxb: int) -> None:
        for ox0 in range(oxa, oxb, G):
            for c0, n in chunks:
                pool_tile(oy, ox0, min(G, oxb - ox0), c0, n)

    def pool_tile(oy: int, ox0: int, g: int, c0: int, n: int) -> None:
        """Output pixels ``ox0 .. ox0 + g`` of row ``oy``, channels ``c0 .. c0 + n``."""
        ya, yb = window_rows(oy)
        half = ctx.alternate()
        ab, ob = half * ctx.acc_half, half * ctx.ob_half
        xa = max(-hx, ox0 * sw - pads[1])
        xb = min(X.w + hx, (ox0 + g - 1) * sw - pads[1] + kw)
        npix = xb - xa
        out = ab + _r(kh * pitch * ncp, P)
        if X.pixel == n == ncp:  # a window row is one contiguous DMA row
            k.ld("acc", X.addr(ya, xa, c0), ab, npix * n, 1, yb - ya,
                 ext_stride3=X.row, dst_stride3=pitch * ncp)
        else:
            k.ld("acc", X.addr(ya, xa, c0), ab, n, npix, yb - ya, ext_stride=X.pixel,
                 dst_stride=ncp, ext_stride3=X.row, dst_stride3=pitch * ncp)
        # runs of output pixels with the same clipped window and divisor
        runs = []
        for i in range(g):
            lo = (ox0 + i) * sw - pads[1]
            a, b = max(-hx, lo), min(X.w + hx, lo + kw)
            key = (b - a, 0 if is_max else int(div[oy, ox0 + i]))
            if runs and runs[-1][0] == key and runs[-1][2] + runs[-1][3] * sw == a - xa:
                runs[-1][3] += 1
            else:
                runs.append([key, i, a - xa, 1])
        for (kwe, d), i, start, m in runs:
            k.vred("max" if is_max else "sum", out + i * ncp, ab + start * ncp, m,
                   ncp // P, kwe, yb - ya, src_stride=sw * ncp, dst_stride=ncp,
                   k1_stride=ncp, k2_stride=pitch * ncp)
        for (kwe, d), i, start, m in runs:
            if flat:
                k.req(ob + i * ncp, out + i * ncp, param_of[d], 1, m * ncp // P,
                      int(q["relu"]), src_stride=ctx.k.p.reg("vx.src_stride"),
                      dst_stride=ctx.k.p.reg("vx.dst_stride"))
            else:
                k.req(ob + i * ncp, out + i * ncp, param_of[d], m, ncp // P,
                      int(q["relu"]), src_stride=ncp, dst_stride=ncp)
        _store_pixels(k, Y, oy, ox0, c0, n, g, ob, ncp)

    # rows whose windows are clipped alike (and, averaging, have the same divisors) differ
    # only in where they load and store
    def row_key(oy: int) -> tuple:
        ya, yb = window_rows(oy)
        iy0 = oy * sh - pads[0]
        return ya - iy0, yb - iy0, None if is_max else tuple(int(v) for v in div[oy])

    # a group's chunks are tiles one after the other (each its own half), so every group of
    # a row is alike: with the chunks outside the rows, a pooling of two chunks was its
    # rows twice (inception_v2 as shipped 1 881 -> 1 784 words)
    walk_rows(ctx, out_rows, cols, ow, G, pool_row, VECTOR_TILE_WAITS, key=row_key,
              tiles_per_group=len(chunks))
    return {"groups_per_row": -(-ow // G), "channel_chunks": len(chunks)}


def _pool_tiles(h: int, w: int, c: int, P: int, acc: int, max_chunk: int) -> tuple[int, int, int]:
    """(channels per chunk, rows, columns) of a global pooling's tiles: the whole map of the
    largest channel chunk when it fits half the accumulators, else tiles of rows x columns
    summed into a running total (a tile, its sum and two totals must fit; fewest
    instructions: the largest chunk x tile).  (0, 0, 0) if not even one pixel fits."""
    whole = min(_r(c, P), max_chunk, (acc // (h * w + 1)) // P * P)
    if whole >= P:
        return whole, h, w
    best = (0, 0, 0)
    for cc in range(P, min(_r(c, P), max_chunk) + 1, P):
        room = acc // cc - 3  # pixels of a tile beside its sum and the two totals
        if room < 1:
            break
        cw = min(w, room)
        rr = min(h, room // cw)
        if cc * rr * cw > best[0] * best[1] * best[2]:
            best = (cc, rr, cw)
    return best


def global_pool(ctx: LayerContext, node, X: TensorLayout, Y: TensorLayout) -> dict:
    """Global average pooling (and an AveragePool whose window is the whole map): per
    channel chunk, the map -- or tile by tile, each tile's sum added to a running total
    that alternates between two slots (``vew``) -- loaded into the accumulators, summed by
    ``vred`` in int32 and requantised by the divisor H*W."""
    k, P = ctx.k, ctx.cfg.lanes
    q = node.meta["q"]
    d = X.h * X.w
    mult, shift = q["by_divisor"][d]
    c = X.c
    cc, rr, cw = _pool_tiles(X.h, X.w, c, P, ctx.acc_half, ctx.param_half * P)
    if not cc:
        raise CompileError(f"{node.where()}: one pixel of {P} channels and its sums do not fit "
                           "half the accumulators")
    row = ctx.load_params([(np.zeros(cc), np.full(cc, mult), np.full(cc, shift))])[0]
    tiles = [(y0, min(rr, X.h - y0), x0, min(cw, X.w - x0))
             for y0 in range(0, X.h, rr) for x0 in range(0, X.w, cw)]
    for c0 in range(0, c, cc):
        n = min(cc, c - c0)
        ncp = _r(n, P)
        half = ctx.alternate()
        ab, ob = half * ctx.acc_half, half * ctx.ob_half
        total = [ab + rr * cw * ncp, ab + rr * cw * ncp + ncp]  # the running total's two slots
        part = ab + rr * cw * ncp + 2 * ncp                       # one tile's sum
        cur = 0
        for t, (y0, rows, x0, cols) in enumerate(tiles):
            k.ld("acc", X.addr(y0, x0, c0), ab, n, cols, rows, ext_stride=X.pixel,
                 dst_stride=ncp, ext_stride3=X.row, dst_stride3=cols * ncp)
            k.vred("sum", total[0] if t == 0 else part, ab, 1, ncp // P, cols, rows,
                   src_stride=0, dst_stride=0, k1_stride=ncp, k2_stride=cols * ncp)
            if t > 0:
                k.vew(total[1 - cur], total[cur], part, 1, ncp // P, 1, 1,
                      a_stride=0, b_stride=0, dst_stride=0)
                cur = 1 - cur
        k.req(ob, total[cur], row, 1, ncp // P, int(q["relu"]), src_stride=0, dst_stride=0)
        k.st(ob, Y.addr(0, 0, c0), n)
    return {"channel_chunk": cc, "tiles": len(tiles)}


def _split_maps(ctx: LayerContext) -> bool:
    """Do element-wise kernels (batch norm, sums, copies) walk rows in two passes
    (:func:`column_passes`)?  Only with latest tokens: with precise ones a row in one pass
    takes fewer words (densenet121 as shipped 3 381 -> 3 351)."""
    return not ctx.k.precise


def _pixel_groups(X: TensorLayout, per: int, rows: tuple[int, int] | None = None,
                  cols: tuple[int, int] | None = None, split: bool = True):
    """``(y, x0, pixels)`` of groups of at most ``per`` pixels covering ``rows`` of ``X``
    (with ``cols``, as :func:`row_spans`); where :func:`column_passes` splits rows, every
    row's whole groups first, then every row's last, shorter group."""
    rest = []
    for y, a, b in row_spans(rows or (0, X.h), cols, X.w):
        whole = a + (b - a) // per * per if split and _split_row(b - a, per) else b
        for x0 in range(a, whole, per):
            yield y, x0, min(per, whole - x0)
        if whole < b:
            rest.append((y, whole, b - whole))
    yield from rest


def _channel_chunks(c: int, P: int, words_budget: int) -> list[tuple[int, int]]:
    """Channel ranges whose padded width fits ``words_budget`` elements."""
    cc = max(P, min(_r(c, P), words_budget // P * P))
    return [(c0, min(c, c0 + cc)) for c0 in range(0, c, cc)]


def add(ctx: LayerContext, node, inputs: list[TensorLayout], Y: TensorLayout,
        rows: tuple[int, int] | None = None, cols: tuple[int, int] | None = None) -> dict:
    """Element-wise sum of 2+ tensors; ``rows``: only rows [r0, r1) (``cols``: as
    :func:`row_spans`)."""
    k, P = ctx.k, ctx.cfg.lanes
    q = node.meta["q"]
    X = inputs[0]
    regions = len(inputs) + 1
    m = [int(v) for v in q["in_mult"]]
    # the scaled adds' multipliers, a row each after the requantisation's (vewp: the words
    # of two adds differing only in their scales are alike, one loop body)
    pairs = [(m[0], m[1])] + [(1, m[i]) for i in range(2, len(inputs))]
    chunks = _channel_chunks(X.c, P, min(ctx.acc_half // regions, ctx.ob_half,
                                         (ctx.param_half - len(pairs)) * P))
    cmax = _r(chunks[0][1] - chunks[0][0], P)
    row, *mrows = ctx.load_params([(np.zeros(cmax), np.ones(cmax), np.full(cmax, q["shift"]))],
                                  pairs)
    for c0, c1 in chunks:
        c, cp = c1 - c0, _r(c1 - c0, P)
        per = max(1, min(X.w, ctx.acc_half // (regions * cp), ctx.ob_half // cp, 4095))

        def pixels(y: int, xa: int, xb: int, c0=c0, c=c, cp=cp, per=per) -> None:
            for x0 in range(xa, xb, per):
                g = min(per, xb - x0)
                half = ctx.alternate()
                ab, ob = half * ctx.acc_half, half * ctx.ob_half
                regs = [ab + i * g * cp for i in range(regions)]
                for i, L in enumerate(inputs):
                    k.ld("acc", L.addr(y, x0, c0), regs[i], c, g, ext_stride=L.pixel, dst_stride=cp)
                out = regs[-1]
                k.vewp(out, regs[0], regs[1], g, cp // P, mrows[0], 0, a_stride=cp, b_stride=cp,
                       dst_stride=cp)
                for i in range(2, len(inputs)):
                    k.vewp(out, out, regs[i], g, cp // P, mrows[i - 1], 0, a_stride=cp,
                           b_stride=cp, dst_stride=cp)
                k.req(ob, out, row, g, cp // P, int(q["relu"]), src_stride=cp, dst_stride=cp)
                k.st(ob, Y.addr(y, x0, c0), c, g, src_stride=cp, ext_stride=Y.pixel)

        walk_rows(ctx, rows or (0, X.h), cols, X.w, per, pixels, VECTOR_TILE_WAITS,
                  split=_split_maps(ctx))
    return {"channel_chunks": len(chunks)}


def affine(ctx: LayerContext, node, X: TensorLayout, Y: TensorLayout,
           rows: tuple[int, int] | None = None, cols: tuple[int, int] | None = None) -> dict:
    """Per-channel scale and offset (folded BatchNormalization); ``rows``: only rows [r0, r1)
    (``cols``: as :func:`row_spans`)."""
    q = node.meta["q"]
    return _requantize_map(ctx, X, Y, q["bias"], q["mult"], q["shift"], int(q["relu"]), rows,
                           cols)


def copy(ctx: LayerContext, X: TensorLayout, Y: TensorLayout) -> dict:
    """``Y <- X`` (the memory plan's swap-out and swap-in): each block of pixels goes
    through the accumulators and out unchanged (bias 0, multiplier 1, shift 0)."""
    return _requantize_map(ctx, X, Y, np.zeros(X.c), np.ones(X.c), np.zeros(X.c), 0)


def stageable(X: TensorLayout) -> bool:
    """Are ``X``'s padded rows contiguous (:func:`stage_rows` copies them as one block)?"""
    P = X.padded()
    return P.row == P.w * P.pixel


def stage_rows(ctx: LayerContext, X: TensorLayout, a: int, b: int, buf: int) -> TensorLayout:
    """Copy rows ``[a, b)`` of map ``X`` -- whole padded rows, halo columns included, and
    halo rows where ``a < 0`` or ``b > X.h`` -- as one contiguous block to ``buf``; returns
    ``X``'s layout moved so that those rows are read at ``buf``.  The memory plan's staged
    reads of a map kept in far memory (:mod:`.passes.memory_budget`): one long burst per
    block of pixels from far memory instead of the reader's short ones.  ``X``: a map whose
    padded rows are contiguous (``row`` = padded width x ``pixel``)."""
    if not stageable(X):
        raise CompileError(f"layer {ctx.name!r}: a staged map needs contiguous padded rows")
    P = X.padded()
    start = P.base + (a + X.pad_h) * P.row
    if P.pixel % ctx.cfg.lanes == 0:  # blocks of whole pixels, every lane busy
        block = TensorLayout(start, b - a, P.w, P.pixel, P.pixel, P.row)
    else:  # each padded row one "pixel" of row bytes
        block = TensorLayout(start, b - a, 1, P.row, P.row, P.row)
    copy(ctx, block, dataclasses.replace(block, base=buf))
    return dataclasses.replace(X, base=X.base + buf - start)


def _load_pixels(k: Kernels, X: TensorLayout, y: int, x0: int, c0: int, c: int, g: int,
                 acc: int, pitch: int) -> None:
    """Channels ``[c0, c0 + c)`` of ``g`` pixels of ``X`` from ``(y, x0)`` into the
    accumulators at ``acc``, ``pitch`` elements per pixel: one DMA row when both sides are
    contiguous (every channel, no padding), else a row per pixel."""
    if X.pixel == c == pitch:
        k.ld("acc", X.addr(y, x0, c0), acc, g * c)
    else:
        k.ld("acc", X.addr(y, x0, c0), acc, c, g, ext_stride=X.pixel, dst_stride=pitch)


def _store_pixels(k: Kernels, Y: TensorLayout, y: int, x0: int, c0: int, c: int, g: int,
                  obuf: int, pitch: int) -> None:
    """The inverse of :func:`_load_pixels`, from the output cache at ``obuf``."""
    if Y.pixel == c == pitch:
        k.st(obuf, Y.addr(y, x0, c0), g * c)
    else:
        k.st(obuf, Y.addr(y, x0, c0), c, g, src_stride=pitch, ext_stride=Y.pixel)


def _requantize_map(ctx: LayerContext, X: TensorLayout, Y: TensorLayout, bias, mult, shift,
                    relu: int, rows: tuple[int, int] | None = None,
                    cols: tuple[int, int] | None = None) -> dict:
    """``Y`` = ``X`` requantised per channel (``bias``, ``mult``, ``shift``, ``relu``), by
    channel chunks and pixel groups through the accumulators; ``rows``: only [r0, r1)
    (``cols``: as :func:`row_spans`)."""
    k, P = ctx.k, ctx.cfg.lanes
    chunks = _channel_chunks(X.c, P, min(ctx.acc_half, ctx.ob_half, ctx.param_half * P))
    for c0, c1 in chunks:
        c, cp = c1 - c0, _r(c1 - c0, P)
        row = ctx.load_params([(bias[c0:c1], mult[c0:c1], shift[c0:c1])])[0]
        per = max(1, min(X.w, ctx.acc_half // cp, ctx.ob_half // cp, 4095))

        def pixels(y: int, xa: int, xb: int, c0=c0, c=c, cp=cp, row=row, per=per) -> None:
            for x0 in range(xa, xb, per):
                g = min(per, xb - x0)
                half = ctx.alternate()
                ab, ob = half * ctx.acc_half, half * ctx.ob_half
                _load_pixels(k, X, y, x0, c0, c, g, ab, cp)
                k.req(ob, ab, row, g, cp // P, relu, src_stride=cp, dst_stride=cp)
                _store_pixels(k, Y, y, x0, c0, c, g, ob, cp)

        walk_rows(ctx, rows or (0, X.h), cols, X.w, per, pixels, VECTOR_TILE_WAITS,
                  split=_split_maps(ctx))
    return {"channel_chunks": len(chunks)}


def zero_halo(ctx: LayerContext, L: TensorLayout, window: tuple[int, int] | None = None,
              own: list[tuple[int, int]] = ()) -> int:
    """Write zeros over the halo of ``L`` (every image of a batch): a tensor whose memory
    held another tensor before (the memory plan's arena, a tiled array's local memory)
    gets the zero border its convolutions read.  A block of zeros is made in the output
    cache once (``req`` with multiplier 0 of whatever the accumulators hold) and stored over
    the border: the rows above and below, and the pixels between one row's end and the
    next one's start.  With ``window`` (rows ``[a, b)``, the first halo row is ``-pad_h``)
    only the halo rows inside it and the halo pixels of the rows in ``own`` are written: a
    core's window of a tensor in local memory, whose other rows arrive from the cores that
    make them, halo pixels included.  Returns the stores emitted."""
    k, P = ctx.k, ctx.cfg.lanes
    if not (L.pad_h or L.pad_w):
        return 0
    if window is None:
        spans = [s for b in range(L.n) for s in _halo_spans(
            L.at(b) if L.n > 1 else L, (-L.pad_h, L.h + L.pad_h), [(0, L.h)])]
    else:
        spans = _halo_spans(L, window, own)
    if not spans:
        return 0
    words = max(1, min(ctx.acc_half, ctx.ob_half, 4095 * P) // P)
    z = words * P  # bytes of zeros in the block
    row = ctx.load_params([(np.zeros(P), np.zeros(P), np.zeros(P))])[0]
    half = ctx.alternate()
    ab, ob = half * ctx.acc_half, half * ctx.ob_half
    k.req(ob, ab, row, words, 1, 0, src_stride=P, dst_stride=P)
    stores = 0

    def fill(lo: int, hi: int) -> None:  # [lo, hi) contiguous
        nonlocal stores
        n = hi - lo
        if n >= z:
            rows = n // z
            for r0 in range(0, rows, 4095):
                r = min(4095, rows - r0)
                k.st(ob, lo + r0 * z, z, r, src_stride=0, ext_stride=z)
                stores += 1
            lo += rows * z
        if hi > lo:
            k.st(ob, lo, hi - lo, 1)
            stores += 1

    for start, n, count, stride in spans:
        if count == 1:
            fill(start, start + n)
        elif n <= z:
            for r0 in range(0, count, 4095):
                k.st(ob, start + r0 * stride, n, min(4095, count - r0), src_stride=0,
                     ext_stride=stride)
                stores += 1
        else:
            for y in range(count):
                fill(start + y * stride, start + y * stride + n)
    return stores


def _halo_spans(I: TensorLayout, window: tuple[int, int],
                own: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    """The halo bytes of one image ``I`` to zero (see :func:`zero_halo`), as (first byte,
    bytes, count, stride) spans in address order, touching spans merged."""
    a, b = window

    def R(y: int) -> int:  # first byte of row y, its left halo pixels included
        return I.base - I.pad_w * I.pixel + y * I.row

    gap = I.row - I.w * I.pixel  # from a row's last pixel to the next row's first
    raw = []
    if a < 0:
        raw.append((R(a), R(min(0, b)) - R(a), 1, 0))
    for lo, hi in sorted(own):
        lo, hi = max(lo, a, 0), min(hi, b, I.h)
        if lo >= hi:
            continue
        raw.append((R(lo), I.addr(lo, 0) - R(lo), 1, 0))
        if hi - 1 > lo and gap:
            raw.append((I.addr(lo, I.w - 1) + I.pixel, gap, hi - 1 - lo, I.row))
        end = I.addr(hi - 1, I.w - 1) + I.pixel
        raw.append((end, R(hi) - end, 1, 0))
    if b > I.h:
        raw.append((R(max(I.h, a)), R(b) - R(max(I.h, a)), 1, 0))
    spans: list[tuple[int, int, int, int]] = []
    for s in raw:
        if s[1] <= 0:
            continue
        if spans and spans[-1][2] == 1 and s[2] == 1 and spans[-1][0] + spans[-1][1] == s[0]:
            spans[-1] = (spans[-1][0], spans[-1][1] + s[1], 1, 0)
        else:
            spans.append(s)
    return spans


# ---------------------------------------------------------------------------------------------
# Compressed swaps (stc / ldc)
# ---------------------------------------------------------------------------------------------


def compressed_chunks(cfg: CoreConfig, c: int) -> list[tuple[int, int]]:
    """Channel ranges a compressed swap moves separately: padded to whole words of 8 (the
    stream units move words) and fitting half of the accumulators, the output cache and the
    parameter memory, as :func:`_requantize_map` does."""
    w = max(cfg.lanes, 8)
    return _channel_chunks(c, w, min(cfg.acc_elems // 2, cfg.obuf_bytes // 2,
                                     cfg.param_rows // 2 * cfg.lanes) // w * w)


def _compressed_groups(cfg: CoreConfig, h: int, w: int, c: int, far: int = 0):
    """How a compressed swap cuts an ``h x w x c`` map whose far storage starts at ``far``:
    ``(c0, c1, pitch, [(y, x0, g, stream address), ...])`` per channel chunk
    (:func:`compressed_chunks`; ``pitch``: the chunk's row pitch in acc and obuf), one
    stream per pixel group, each at its bound after the one before (the same cut for the
    swap-out, the swap-in and the reservation)."""
    P = cfg.lanes
    at = far
    shape = TensorLayout(0, h, w, c, c, w * c)
    for c0, c1 in compressed_chunks(cfg, c):
        pitch = _r(c1 - c0, max(P, 8))
        per = max(1, min(w, cfg.acc_elems // 2 // pitch, cfg.obuf_bytes // 2 // pitch, 4095))
        groups = []
        for y, x0, g in _pixel_groups(shape, per):
            groups.append((y, x0, g, at))
            at += act_compress.stream_bound(g, c1 - c0)
        yield c0, c1, pitch, groups


def expected_stream_bytes(cfg: CoreConfig, h: int, w: int, c: int, density: float) -> float:
    """The bytes the compressed swap of an ``h x w x c`` map is expected to write when a
    fraction ``density`` of its values is non-zero: per chunk of 64 values a mask word,
    the values, half a word of padding; a header per stream."""
    total = 0.0
    for c0, c1, _, groups in _compressed_groups(cfg, h, w, c):
        chunks = -(-(c1 - c0) // act_compress.CHUNK)
        total += h * w * chunks * (8 + density * (c1 - c0) / chunks + 4)
        total += act_compress.HEADER * len(groups)
    return total


def compressed_bytes(cfg: CoreConfig, h: int, w: int, c: int) -> int:
    """Far-memory bytes reserved for an ``h x w x c`` map swapped compressed: every
    stream's bound (:func:`_compressed_groups`); the streams themselves take what the data
    needs."""
    return sum(act_compress.stream_bound(g, c1 - c0)
               for c0, c1, _, groups in _compressed_groups(cfg, h, w, c)
               for _, _, g, _ in groups)


def _stream_copy(ctx: LayerContext, dense: TensorLayout, far: int, out: bool) -> dict:
    """A swap between the map ``dense`` and its compressed far storage at ``far``, per pixel
    group of each channel chunk (:func:`_compressed_groups`), through the accumulators and
    an identity ``req`` into the output cache: ``out``: ``dense`` loaded, stored by ``stc``;
    else expanded by ``ldc``, stored into ``dense``."""
    k, P = ctx.k, ctx.cfg.lanes
    streams = 0
    for c0, c1, pitch, groups in _compressed_groups(ctx.cfg, dense.h, dense.w, dense.c, far):
        c = c1 - c0
        row = ctx.load_params([(np.zeros(pitch), np.ones(pitch), np.zeros(pitch))])[0]
        for y, x0, g, at in groups:
            half = ctx.alternate()
            ab, ob = half * ctx.acc_half, half * ctx.ob_half
            if out:
                _load_pixels(k, dense, y, x0, c0, c, g, ab, pitch)
            else:
                k.ldc("acc", at, ab, c, g, dst_stride=pitch)
            k.req(ob, ab, row, g, pitch // P, 0, src_stride=pitch, dst_stride=pitch)
            if out:
                k.stc(ob, at, c, g, src_stride=pitch)
            else:
                _store_pixels(k, dense, y, x0, c0, c, g, ob, pitch)
            streams += 1
    return {"compressed_streams": streams}


def compress_copy(ctx: LayerContext, X: TensorLayout, far: int) -> dict:
    """The memory plan's swap-out, compressed: each pixel group of each channel chunk goes
    through the accumulators and the output cache (identity requantisation) and is stored
    as one ``stc`` stream at its place in the far storage ``far``."""
    return _stream_copy(ctx, X, far, out=True)


def expand_copy(ctx: LayerContext, far: int, Y: TensorLayout) -> dict:
    """The memory plan's swap-in of a map :func:`compress_copy` stored at ``far``: each
    stream is expanded into the accumulators (``ldc``), requantised by the identity and
    stored dense into ``Y``."""
    return _stream_copy(ctx, Y, far, out=False)
