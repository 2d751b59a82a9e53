"""Pass: code generation.  Every core subgraph becomes one ROM segment (its kernels in
order, tokens inserted by the emitter, ``halt`` at the end; a layer over a batch runs once
per image, which the re-roller turns into a hardware loop); host subgraphs stay as
operator lists for the runtime.  Weights, parameters and ROMs go into the memory image."""

from __future__ import annotations

from snpu.config import CoreConfig
from snpu.errors import CompileError
from snpu.verif.image import MemoryImage
from snpu.verif.program import Program

from .. import kernels
from ..emit import Kernels
from ..ir import Graph
from ..memory import view_source
from .reroll import reroll


def codegen(graph: Graph, config: CoreConfig, image: MemoryImage, dense: bool = False,
            loops: bool = True) -> Graph:
    """``dense``: compile every layer in dense mode (no weight index, no activation
    threshold): the same computation without sparse skipping, the baseline of sparse
    speedups.  ``loops``: re-roll each segment into hardware loops (:mod:`.reroll`)."""
    g = graph.copy()
    layouts = g.meta["layouts"]
    nodes = {n.name: n for n in g.nodes}
    segments = []
    layer = 0
    for sg in g.meta["subgraphs"]:
        if sg["device"] == "host":
            segments.append({"kind": "host", "nodes": list(sg["nodes"])})
            continue
        k = len(segments)
        prog = Program(config, image=image, rom_name=f"rom:{k}")
        em = Kernels(prog)
        stats = {}
        for name in sg["nodes"]:
            n = nodes[name]
            if n.op in ("Concat", "Flatten", "Reshape"):
                continue  # memory layout only
            images = layouts[n.outputs[0]].n
            # a batch: the layer once per image, its weights placed once (shared by content)
            ctx = kernels.LayerContext(em, layer, f"{k}:{n.name}", dense, n.meta.get("neurons"),
                                       shared={} if images > 1 else None)
            layer += 1
            for b in range(images):
                stats[n.name] = emit_layer(ctx, g, n, layouts, image=b)
            if images > 1:
                stats[n.name]["batch"] = images
        em.halt()
        dispatched = len(prog.instrs)
        if loops:
            prog.instrs = reroll(prog.instrs)
        words = prog.place_rom()
        segments.append({"kind": "core", "rom": prog.rom_name, "nodes": list(sg["nodes"]),
                         "words": words, "instructions": len(words),
                         "dispatched_instructions": dispatched, "token_nops": em.nops,
                         "layers": stats})
    g.meta["segments"] = segments
    return g


def _whole_map(n, X) -> bool:
    """Is this pooling window the whole (unpadded) map, one output pixel?"""
    from ..ops import pool_geometry

    kh, kw, _, _, pads, oh, ow = pool_geometry(n, (1, X.c, X.h, X.w))
    return (kh, kw) == (X.h, X.w) and not any(pads) and (oh, ow) == (1, 1)


def emit_layer(ctx: kernels.LayerContext, g: Graph, n, layouts: dict, part=None,
               image: int = 0) -> dict:
    """Emit node ``n``'s kernel (all of it, or ``part``: a
    :class:`~.parallelize.Part` of it) for image ``image`` of a batch; returns the kernel's
    report entry."""

    def layout(t):
        L = layouts[t]
        return L.at(image) if L.n > 1 else L

    X = layout(view_source(g, n.inputs[0]))
    Y = layout(n.outputs[0])
    rows = (part.lo, part.hi) if part is not None and part.kind == "rows" else None
    channels = (part.lo, part.hi) if part is not None and part.kind == "channels" else None
    try:
        if n.op == "Conv":
            return kernels.conv(ctx, n, X, Y, rows, channels)
        if n.op in ("Gemm", "MatMul"):
            return kernels.fc(ctx, n, X, Y, channels)
        if n.op == "AveragePool" and _whole_map(n, X) and rows is None:
            return kernels.global_pool(ctx, n, X, Y)  # the same sum and divisor
        if n.op in ("MaxPool", "AveragePool"):
            return kernels.pool(ctx, n, X, Y, rows)
        if n.op == "GlobalAveragePool":
            return kernels.global_pool(ctx, n, X, Y)
        if n.op in ("Add", "Sum"):
            return kernels.add(ctx, n, [layout(view_source(g, i)) for i in n.inputs], Y, rows)
        if n.op == "Affine":
            return kernels.affine(ctx, n, X, Y, rows)
        raise CompileError(f"{n.where()}: no core kernel")
    except CompileError as e:
        if str(e).startswith(("node", "layer")):
            raise
        raise CompileError(f"{n.where()}: {e}") from None
