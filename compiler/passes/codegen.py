"""Pass: code generation.  Every core subgraph becomes one ROM segment (its kernels in
order, tokens inserted by the emitter, ``halt`` at the end; a layer over a batch runs once
per image, which the re-roller turns into a hardware loop); host subgraphs stay as
operator lists for the runtime.  Weights, parameters and ROMs go into the memory image."""

from __future__ import annotations

import dataclasses

from snpu.config import CoreConfig
from snpu.errors import CompileError
from snpu.verif.image import MemoryImage
from snpu.verif.program import Program
from snpu.verif.sequencer import dispatch_count, half_sizes
from snpu.verif.token_flow import deadlock

from .. import kernels
from ..emit import Kernels
from ..ir import Graph
from ..memory import channel_view, view_source
from ..windows import rows_read
from .pair_cfg import pair_cfg
from .reroll import reroll
from .split import Piece


def codegen(graph: Graph, config: CoreConfig, image: MemoryImage, dense: bool = False,
            loops: bool = True, overlap: bool = False) -> Graph:
    """``dense``: compile every layer in dense mode (no weight index, no activation
    threshold): the same computation without sparse skipping, the baseline of sparse
    speedups.  ``loops``: re-roll each segment into hardware loops (:mod:`.reroll`).
    ``overlap``: tokens for the most overlap between units (:mod:`..emit`).

    Every segment is checked for a deadlock on its token channels
    (:func:`snpu.verif.token_flow.deadlock`, exact for every timing): a program that would
    deadlock is an error, not a hang.  A loop's first iterations also take precise tokens
    from the words before the loop (``Emitter(pre_loop=True)``), which keeps them like the
    steady ones but lets a token live longer; if a segment would deadlock, the pass runs
    again without those tokens, and in the default mode then with every wait's token from
    the other unit's latest instruction (tokens that never wait for a later word: a core
    with one-token channels, say)."""
    # the tokens to try, in order: with tokens from before loops, without, and (the default
    # mode only) every wait from the other unit's latest instruction
    mode = "overlap" if overlap else "credits"
    modes = [(mode, True), (mode, False)] + ([] if overlap else [("latest", False)])
    for tokens, pre_loop in modes[:-1]:
        before = image.copy_image()
        try:
            return _codegen(graph, config, image, dense, loops, tokens, pre_loop)
        except _Deadlock:
            image.restore(before)
    try:
        return _codegen(graph, config, image, dense, loops, *modes[-1])
    except _Deadlock as e:
        raise deadlock_error(config, str(e), " or --optimize size" if overlap else "") from None


def deadlock_error(config: CoreConfig, where: str, hint: str = "") -> CompileError:
    """The error for a program that would deadlock on its token channels however emitted
    (``where``: :func:`snpu.verif.token_flow.deadlock`'s account)."""
    return CompileError(f"the program would deadlock on its token channels (token_depth="
                        f"{config.token_depth}, queue_depth={config.queue_depth}): {where}; "
                        f"use deeper channels{hint}")


class _Deadlock(Exception):
    pass


def _codegen(graph: Graph, config: CoreConfig, image: MemoryImage, dense: bool, loops: bool,
             tokens: str, pre_loop: bool) -> Graph:
    g = graph.copy()
    segments = []
    layer = 0
    for sg in g.meta["subgraphs"]:
        if sg["device"] == "host":
            segments.append({"kind": "host", "nodes": list(sg["nodes"])})
            continue
        k = len(segments)
        prog = Program(config, image=image, rom_name=f"rom:{k}")
        em = Kernels(prog, loops=loops, overlap=tokens == "overlap",
                     credits=tokens == "credits", pre_loop=pre_loop)
        order = subgraph_units(g, sg)
        stats = emit_nodes(em, g, order, f"{k}:", layer, dense)
        layer += len(order)
        em.halt()
        prog.instrs = pair_cfg(prog.instrs)
        dispatched = dispatch_count(prog.instrs)
        if loops:
            prog.instrs = reroll(prog.instrs, halves=half_sizes(config))
        stuck = deadlock(prog.instrs, config.token_depth, config.queue_depth)
        if stuck is not None:
            raise _Deadlock(f"segment {k}: {stuck}")
        words = prog.place_rom()
        segments.append({"kind": "core", "rom": prog.rom_name, "nodes": list(sg["nodes"]),
                         "words": words, "instructions": len(words),
                         "dispatched_instructions": dispatched, "token_nops": em.nops,
                         "tokens": tokens + (" from before loops" if pre_loop else ""),
                         "layers": stats})
    g.meta["segments"] = segments
    return g


def units(g: Graph, names: list[str]) -> list[tuple[str, int | None]]:
    """The kernels of core nodes ``names`` in program order: ``(node, piece)`` with
    ``piece`` an index into ``node.meta["pieces"]`` (:mod:`.split`) or ``None`` (the whole
    node); layout-only nodes have none."""
    nodes = {n.name: n for n in g.nodes}
    out: list[tuple[str, int | None]] = []
    for v in names:
        n = nodes[v]
        if n.op in ("Concat", "Flatten", "Reshape"):
            continue  # memory layout only
        pieces = n.meta.get("pieces")
        out += [(v, i) for i in range(len(pieces))] if pieces else [(v, None)]
    return out


def subgraph_units(g: Graph, sg: dict) -> list[tuple[str, int | None]]:
    """A core subgraph's kernels in program order: the schedule pass's order
    (``sg["units"]``) or, without one, the file order (:func:`units`)."""
    return [tuple(u) for u in sg["units"]] if "units" in sg else units(g, sg["nodes"])


def emit_nodes(em: Kernels, g: Graph, order: list[tuple[str, int | None]], prefix: str,
               layer: int = 0, dense: bool = False) -> dict:
    """Emit the kernels ``order`` (:func:`units` of one core subgraph, in program order)
    into ``em``'s program, each instruction tagged with its node's name; ``layer`` numbers
    the first kernel (parameter memory halves alternate by it), ``prefix`` names its data in
    the image.  Returns each node's report entry."""
    layouts = g.meta["layouts"]
    nodes = {n.name: n for n in g.nodes}
    stats: dict = {}
    shared: dict[str, dict] = {}  # per node: its pieces place identical data once
    # tensors whose arena bytes held another tensor before: their halo is zeroed before
    # the first kernel writing them (the memory plan, passes/memory_budget.py)
    dirty = set((g.meta.get("memory") or {}).get("zero_halo", ()))
    roots = g.meta.get("storage_root", {})
    for k, name, index, piece in _kernel_units(order, nodes):
        n = nodes[name]
        root = roots.get(n.outputs[0])
        if root in dirty:
            dirty.discard(root)
            em.p.tag = n.name
            ctx = kernels.LayerContext(em, layer + k, f"{prefix}{n.name}:halo", dense)
            kernels.zero_halo(ctx, layouts[root])
        images = layouts[n.outputs[0]].n
        if "far_read" in n.meta and piece is not None:
            # a map in far memory read whole (long bursts) or by bands of rows through a
            # staging buffer, instead of by pieces: the whole node at its first piece's
            # place (the memory plan, passes/memory_budget.py)
            if name in stats:
                continue
            piece = None
        todo = range(*piece.images) if piece is not None and piece.images else range(images)
        repeats = images > 1 or piece is not None or "far_read" in n.meta  # (by bands)
        share = shared.setdefault(name, {}) if repeats else None
        label = f"{prefix}{n.name}" + (f"#{index}" if index is not None else "")
        ctx = kernels.LayerContext(em, layer + k, label, dense,
                                   n.meta.get("neurons"), shared=share)
        em.p.tag = n.name
        for b in todo:
            stats[name] = emit_layer(ctx, g, n, layouts, part=piece, image=b)
        if images > 1:
            stats[name]["batch"] = images
        if index is not None:
            stats[name]["pieces"] = len(n.meta["pieces"])
    em.p.tag = None
    return stats


#: operators whose channel pieces are one loop over weight tiles each (:func:`kernels.conv`,
#: :func:`kernels.fc`): pieces next to each other in the program are one kernel
TILED = ("Conv", "Gemm", "MatMul")
#: operators whose kernels walk output rows (``rows``): row pieces next to each other in the
#: program are one kernel
ROWED = ("Conv", "MaxPool", "AveragePool", "Add", "Sum", "Affine")
#: operators computing each channel alone (on channel views of their maps): channel pieces
#: next to each other in the program are one kernel
PER_CHANNEL = ("MaxPool", "AveragePool", "GlobalAveragePool", "Add", "Sum", "Affine")


def _merged(n, last: Piece, piece: Piece) -> Piece | None:
    """``last`` and ``piece`` (pieces of node ``n``, in this order in the program) as one
    piece, or ``None`` where they are not one kernel (:func:`_kernel_units`)."""
    if last.images is not None or piece.images is not None:
        return None
    if (n.op in TILED and last.rows is None and piece.rows is None and last.channels
            and piece.channels and last.channels[1] == piece.channels[0]):
        return Piece(channels=(last.channels[0], piece.channels[1]))
    if (n.op in ROWED and last.channels == piece.channels and last.rows and piece.rows
            and last.rows[1] == piece.rows[0]):
        return Piece(channels=last.channels, rows=(last.rows[0], piece.rows[1]))
    if (n.op in PER_CHANNEL and last.rows == piece.rows and last.channels and piece.channels
            and last.channels[1] == piece.channels[0]):
        return Piece(channels=(last.channels[0], piece.channels[1]), rows=last.rows)
    return None


def _kernel_units(order: list[tuple[str, int | None]], nodes: dict) -> list[tuple]:
    """The kernels of ``order``: ``(position, node, piece index, piece)``.  Pieces of a node
    that follow each other in the program are one kernel over their union (the first
    piece's position and index) where its kernel walks that dimension anyway:

    * channel pieces of a convolution or fully connected layer with adjacent channel
      ranges: each piece is a loop over its weight tiles against the same input, so
      together they are the same loop over all their tiles;
    * row pieces (of the same channels) with adjacent row ranges: each piece is a loop over
      tiles of its output rows, so together they are the same loop over all their rows
      (a convolution's pieces load the same weights again; one kernel loads them once);
    * channel pieces (of the same rows) of a per-channel layer with adjacent channel
      ranges: each piece is the layer on a channel view, so together they are the layer on
      the view of their union.

    Either way: the same computation and on-chip footprint per tile, in one loop instead of
    several with a prologue each.  Pieces the order search put apart keep their own
    kernels (the memory plan sees the same tensors live either way: they are live from
    their first piece's kernel to their last)."""
    out: list[tuple] = []
    for k, (name, index) in enumerate(order):
        n = nodes[name]
        piece = n.meta["pieces"][index] if index is not None else None
        if out and piece is not None and out[-1][1] == name and out[-1][3] is not None:
            both = _merged(n, out[-1][3], piece)
            if both is not None:
                out[-1] = out[-1][:3] + (both,)
                continue
        out.append((k, name, index, piece))
    return out


def _whole_map(n, X) -> bool:
    """Is this pooling window the whole (unpadded) map, one output pixel?"""
    from ..ops import pool_geometry

    kh, kw, _, _, pads, oh, ow = pool_geometry(n, (1, X.c, X.h, X.w))
    return (kh, kw) == (X.h, X.w) and not any(pads) and (oh, ow) == (1, 1)


def emit_layer(ctx: kernels.LayerContext, g: Graph, n, layouts: dict, part=None,
               image: int = 0) -> dict:
    """Emit node ``n``'s kernel (all of it, or ``part``: a :class:`~.parallelize.Part` of
    it on an array, a :class:`~.split.Piece` of it on one core) for image ``image`` of a
    batch; returns the kernel's report entry."""

    def layout(t):
        L = layouts[t]
        return L.at(image) if L.n > 1 else L

    X = layout(view_source(g, n.inputs[0]))
    Y = layout(n.outputs[0])
    ins = None  # a sum's inputs
    rows = part.rows if part is not None else None
    cols = part.cols if part is not None else None
    channels = part.channels if part is not None else None
    if channels is not None and n.op not in ("Conv", "Gemm", "MatMul"):
        # a channel piece of a per-channel layer is the layer on channel views
        lo, hi = channels
        X, Y = channel_view(X, lo, hi), channel_view(Y, lo, hi)
        if n.op in ("Add", "Sum"):
            ins = [channel_view(layout(view_source(g, i)), lo, hi) for i in n.inputs]
        if n.op == "Affine":
            q = n.meta["q"]
            n = dataclasses.replace(n, meta={**n.meta, "q": {**q, **{k: q[k][lo:hi] for k in
                                                                 ("bias", "mult", "shift")}}})
        channels = None
    elif n.op in ("Add", "Sum"):
        ins = [layout(view_source(g, i)) for i in n.inputs]
    read = n.meta.get("far_read")
    if read is None or read["mode"] != "staged":
        return _kernel(ctx, n, X, Y, rows, cols, channels, ins)
    # the input stays in far memory: a band of output rows at a time, its input rows
    # copied to one of two staging buffers in fast memory first (the memory plan)
    lo, hi = rows or (0, Y.h)
    out = {}
    for b, r0 in enumerate(range(lo, hi, read["rows"])):
        r1 = min(hi, r0 + read["rows"])
        a, z = rows_read(g, n, r0, r1, 0, X.pad_h)
        S = kernels.stage_rows(ctx, X, a, z, read["addr"] + (b % 2) * read["bytes"])
        out = _kernel(ctx, n, S, Y, (r0, r1), None, channels, None)
    return {**out, "staged_bands": -(-(hi - lo) // read["rows"])}


def _kernel(ctx: kernels.LayerContext, n, X, Y, rows, cols, channels, ins) -> dict:
    """Node ``n``'s kernel on input ``X`` (``ins``: every input of a sum), output ``Y``."""
    try:
        if n.op == "Conv":
            return kernels.conv(ctx, n, X, Y, rows, channels, cols)
        if n.op in ("Gemm", "MatMul"):
            return kernels.fc(ctx, n, X, Y, channels)
        if n.op == "AveragePool" and _whole_map(n, X) and rows is None:
            return kernels.global_pool(ctx, n, X, Y)  # the same sum and divisor
        if n.op in ("MaxPool", "AveragePool"):
            return kernels.pool(ctx, n, X, Y, rows, cols)
        if n.op == "GlobalAveragePool":
            return kernels.global_pool(ctx, n, X, Y)
        if n.op in ("Add", "Sum"):
            return kernels.add(ctx, n, ins, Y, rows, cols)
        if n.op == "Affine":
            return kernels.affine(ctx, n, X, Y, rows, cols)
        if n.op == "Copy" and n.meta.get("compressed"):  # a swap stored with stc / ldc
            if n.meta["memory"] == "reduction":
                return kernels.compress_copy(ctx, X, Y.base)
            return kernels.expand_copy(ctx, X.base, Y)
        if n.op == "Copy":
            return kernels.copy(ctx, X, Y)
        raise CompileError(f"{n.where()}: no core kernel")
    except CompileError as e:
        if str(e).startswith(("node", "layer")):
            raise
        raise CompileError(f"{n.where()}: {e}") from None
