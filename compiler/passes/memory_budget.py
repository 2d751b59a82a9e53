"""Pass: plan the activations' memory under a fast-memory budget (seed 001;
``docs/compiler.md``, "Memory planning").

The memory hierarchy: a *fast* memory, one arena of external memory where activations
whose lifetimes do not overlap share bytes, and a *far* memory (the image's ``far``
region) that is larger and slower (:class:`~snpu.verif.timing.FarMemory`: the golden
model and the testbench's RAM both give it a longer latency and a narrower bus).  The
graph's inputs and outputs are in the arena too: an input's storage is live from the start
of the run (the runtime writes it before) to its last reader, an output's from its producer
to the end (the runtime reads it after).  With ``fast="local"`` the arena is the core's
local memory instead: it keeps the maps one core subgraph writes and reads
(:func:`_local_roots`), every other map lives in far memory, and every halo there is
zeroed (local memory holds what the last run left).

1. The program order is the scheduled kernels of every core subgraph with the host
   subgraphs between them.  A tensor is live in fast memory from the first kernel writing
   it to the last kernel reading it (through views and concatenations: the storage roots of
   :func:`~..memory.storage`).
2. Without swapping, the arena is placed greedily (:func:`_place`), with element-wise
   outputs written over an input that dies there where that helps (:func:`_inplace`,
   :func:`_evaluate`); if it fits ``budget`` bytes, that is the plan.
3. Otherwise seed 001's rewrite (:mod:`.memory_plan`): timing analysis over the node graph
   (each node's delay from the cost model; each node after the one before it, since the
   core runs them in turn), candidates (slack above ``th_tts``, size above ``th_s``,
   largest first, at most ``n``; :func:`_swap_sets`), and for the ``k`` largest candidates
   the reduction (a ``Copy`` node: fast -> far after the producer), serialization,
   restoration (``Copy``: far -> fast before the late consumers, duplicated for late
   consumers far apart), prefetch and second serialization edges, each ``k`` with and
   without the prefetch edges.  The control edges become the program order: the rewritten
   graph's kernels run in :func:`~.memory_plan.schedule`'s topological order
   (:func:`_apply`), and the emitter's tokens order every memory access.  ``k`` grows
   until the plan fits; if none does, the error gives the smallest budget that compiles.
4. If no set of swaps fits, whole maps stay in far memory (:func:`_far_resident`; a swap
   cannot lower one kernel's working set): their producers store them there, their readers
   read them there directly, whole instead of by pieces, or a band of rows at a time
   through two staging buffers in the arena (:class:`_FarCost` times each way and takes the
   cheapest); greedy at the plan's peak, cheapest per byte first.
5. A tensor with a zero halo (a padded convolution reads it) placed on bytes another tensor
   used before gets its halo zeroed by the first kernel writing it (``zero_halo``).

Results: the graph with the ``Copy`` nodes and new unit orders, its layouts
(:func:`~..memory.allocate` with an :class:`~..memory.Arena`), and ``meta["memory"]``: the
budget, the peak before and after, the arena, the swapped tensors, and the memory profile
(bytes live in fast memory after every kernel) before and after.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from snpu.config import CoreConfig
from snpu.errors import CompileError
from snpu.verif import timing
from snpu.verif.image import MemoryImage

from ..ir import Graph, Node, Tensor
from .. import kernels
from ..memory import Arena, allocate, hwc, storage
from ..windows import rows_read
from .codegen import subgraph_units
from .memory_plan import Flow, candidates, rewrite, timing_analysis
from .schedule import KernelTimer


class BudgetError(CompileError):
    """No plan fits the budget; ``smallest``: the fast bytes of the smallest plan found."""

    def __init__(self, message: str, smallest: int):
        super().__init__(message)
        self.smallest = smallest


#: ops that have no kernel (memory layout only)
_LAYOUT_OPS = ("Concat", "Flatten", "Reshape")


@dataclass
class MemoryOptions:
    #: bytes of fast memory the activations may occupy at any moment (None: no plan)
    budget: int | None = None
    th_tts: float = 0.0   #: candidates: slack above this many cycles
    th_s: int = 0         #: candidates: tensors above this many bytes
    n: int = 0            #: candidates: at most this many (0: as many as the budget needs)
    #: late consumers of one tensor whose required times differ by more than this many
    #: cycles get a restoration each
    gap: float = 0.0
    #: which tensors to swap: ``slack`` (seed 001's timing analysis) or ``distance`` (the
    #: TFLMS-style baseline: every tensor read at least d nodes after it is written)
    strategy: str = "slack"
    far: timing.FarMemory = timing.FarMemory()
    #: which swapped tensors are stored compressed (``stc`` / ``ldc``): ``auto`` (those a
    #: ReLU wrote whose stream is expected to be smaller than the dense map), ``all`` or
    #: ``off``
    compress: str = "auto"
    #: when no set of swaps fits the budget, keep whole tensors in far memory, written and
    #: read there by their kernels (:func:`_far_resident`); ``False``: swaps only (the
    #: TFLMS-style baseline has no such fallback)
    far_resident: bool = True
    #: how kernels read a far-resident map: ``auto`` (the way the cost model finds
    #: cheapest), ``direct`` (from far memory, as scheduled or as a whole node) or
    #: ``staged`` (through a staging buffer in fast memory, a band of rows at a time,
    #: wherever the reader and the budget allow)
    far_reads: str = "auto"
    #: the fast memory: ``external`` (an arena of external memory treated as fast) or
    #: ``local`` (the core's local memory: maps a run of the core writes and reads stay
    #: there, everything else -- the graph's inputs and outputs, maps crossing to the host
    #: or to another core segment -- lives in far memory; the budget is at most its size)
    fast: str = "external"


#: the non-zero fraction assumed for a ReLU map none of whose readers measured its density
#: on the calibration inputs
RELU_DENSITY_GUESS = 0.5
#: ``auto`` compresses a map when its expected stream is below this fraction of its bytes
COMPRESS_BELOW = 0.9


# ---------------------------------------------------------------------------------------------
# The program as a sequence of steps
# ---------------------------------------------------------------------------------------------


def _steps(g: Graph) -> list[tuple[str, int | None]]:
    """Every kernel of the program in order, ``(node, piece)``; a host node is one step."""
    out: list[tuple[str, int | None]] = []
    for sg in g.meta["subgraphs"]:
        if sg["device"] == "host":
            out += [(v, None) for v in sg["nodes"]]
        else:
            out += subgraph_units(g, sg)
    return out


def _spans(steps) -> dict[str, tuple[int, int]]:
    """Node -> (its first step, its last step)."""
    out: dict[str, tuple[int, int]] = {}
    for p, (v, _) in enumerate(steps):
        out[v] = (out[v][0], p) if v in out else (p, p)
    return out


def _lifetimes(g: Graph, st, steps) -> dict[str, tuple[int, int]]:
    """Storage root -> (first step writing it, last step reading it); inputs and outputs:
    the whole program."""
    nodes = {n.name: n for n in g.nodes}
    roots = set(st.roots)
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for p, (name, _) in enumerate(steps):
        n = nodes[name]
        for t in n.inputs:
            r = st.root.get(t) if t else None
            if r in roots:
                last[r] = p
        for t in n.outputs:
            r = st.root.get(t)
            if r in roots:
                first.setdefault(r, p)
    end = len(steps) - 1
    # storage holding a graph input (itself or a slice of it) is written before the run,
    # storage holding an output is read after it
    holds_input = {st.root[t] for t in g.inputs if t in st.root} | set(g.inputs)
    holds_output = {st.root[t] for t in g.outputs if t in st.root} | set(g.outputs)
    life = {}
    for r in st.roots:
        if r in holds_input or r in first:
            a = 0 if r in holds_input else first[r]
            b = end if r in holds_output else max(last.get(r, a), a)
            life[r] = (a, b)
    return life


def _place(life: dict[str, tuple[int, int]], size: dict[str, int]) -> tuple[dict[str, int], int]:
    """Arena placement: tensors in some order, each at a 64-byte aligned offset where no
    tensor placed before it overlaps both in time and in bytes, either the lowest such
    offset (first fit) or the smallest hole it fits (best fit).  Four orders (largest
    first as TFLite's arena planner, longest-lived first, largest size x lifetime first,
    earliest first) times both fits; the smallest arena wins.  Returns (offsets, bytes)."""
    keys = [lambda t: (-size[t], life[t][0], t),
            lambda t: (-(life[t][1] - life[t][0]), -size[t], t),
            lambda t: (-size[t] * (life[t][1] - life[t][0] + 1), t),
            lambda t: (life[t][0], -size[t], t)]
    best = None
    for key in keys:
        for best_fit in (False, True):
            got = _place_in(sorted(life, key=key), life, size, best_fit)
            if best is None or got[1] < best[1]:
                best = got
    return best or ({}, 0)


def _place_in(order, life, size, best_fit: bool) -> tuple[dict[str, int], int]:
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, first step, last step)
    offsets = {}
    for t in order:
        a, b = life[t]
        n = -(-max(size[t], 1) // 64) * 64
        busy = sorted((o, e) for o, e, f, l in placed if f <= b and a <= l)
        holes, off = [], 0
        for o, e in busy:
            if off + n <= o:
                holes.append((o - off, off))
                if not best_fit:
                    break
            off = max(off, e)
        holes.append((1 << 62, off))  # above everything
        offsets[t] = min(holes)[1] if best_fit else holes[0][1]
        placed.append((offsets[t], offsets[t] + n, a, b))
    return offsets, max((e for _, e, _, _ in placed), default=0)


def _profile(life: dict, size: dict, steps: int) -> list[int]:
    """Bytes live after every step."""
    prof = np.zeros(steps + 1, np.int64)
    for t, (a, b) in life.items():
        prof[a] += size[t]
        prof[b + 1] -= size[t]
    return [int(v) for v in np.cumsum(prof)[:steps]]


@dataclass
class _Plan:
    graph: Graph
    arena: Arena
    profile: list[int]
    dirty: list[str]   #: roots with a halo on bytes another tensor used before
    swapped: list[dict]
    prefetch: bool = True  #: restorations start early (prefetch edges) or just in time
    #: where the profile peaks: the kernel, and the tensors live there (largest first)
    peak_at: tuple = ("", ())
    #: far-resident tensor -> the cycles it is estimated to add (:func:`_far_resident`)
    far_costs: dict = field(default_factory=dict)

    @property
    def fast(self) -> int:
        """Bytes of fast memory the plan takes (the arena: inputs and outputs are in it)."""
        return self.arena.size


#: element-wise kernels that may write their output over an input (each pixel block is
#: loaded before it is stored at the same addresses)
_IN_PLACE_OPS = ("Add", "Sum", "Affine")


def _inplace(g: Graph, st, steps) -> dict[str, str]:
    """Outputs of element-wise core nodes that can share an input's storage: the input is a
    storage root of the same shape that no kernel reads after this node's first kernel
    (every other reader is done), no graph input or output, and no concatenation's; the
    output is no graph output and no slice of a concatenation (``st``: ``g``'s storage
    with no output in place yet)."""
    span = _spans(steps)
    readers: dict[str, list[str]] = {}
    for n in g.nodes:
        for t in set(n.inputs):
            if t and t in st.root:
                readers.setdefault(st.root[t], []).append(n.name)
    concat = set(st.parent) | {st.root[t] for t in st.parent}
    fixed = set(g.inputs) | set(g.outputs)
    out: dict[str, str] = {}
    taken: set[str] = set()
    for n in sorted((n for n in g.nodes if n.name in span), key=lambda n: span[n.name][0]):
        u = n.outputs[0]
        if (n.device != "core" or n.op not in _IN_PLACE_OPS or u not in st.roots
                or u in fixed or u in concat):
            continue
        for t in dict.fromkeys(i for i in n.inputs if i):
            r = st.root.get(t)
            if (r != t or r in fixed or r in concat or r in taken
                    or g.tensor(t).shape != g.tensor(u).shape):
                continue
            if all(span[v][1] < span[n.name][0] for v in readers.get(r, ()) if v != n.name):
                out[u] = t
                taken.add(t)
                break
    return out


def _evaluate(g: Graph, steps=None) -> _Plan:
    """The smallest placement of ``g``'s program (``steps``: its :func:`_steps`, if known):
    outputs written in place over their inputs where they can, only where that adds no
    halo bytes, or nowhere."""
    steps = steps if steps is not None else _steps(g)
    st = storage(g)
    every = _inplace(g, st, steps)
    same = {u: t for u, t in every.items() if st.halo.get(u, (0, 0)) == st.halo.get(t, (0, 0))}
    best = None
    for inplace in dict.fromkeys(map(lambda d: tuple(sorted(d.items())), (every, same, {}))):
        h = g.copy()
        h.meta["inplace"] = dict(inplace)
        plan = _place_plan(h, steps)
        if best is None or plan.fast < best.fast:
            best = plan
    return best


def _place_plan(g: Graph, steps) -> _Plan:
    st = storage(g)
    life = _lifetimes(g, st, steps)
    size = {t: st.size(g, t) for t in life}
    far = [n.outputs[0] for n in g.nodes if n.meta.get("memory") == "reduction"]
    far += [t for t in g.meta.get("far_resident", ()) if t in life and t not in far]
    local = g.meta.get("fast_memory") == "local"
    if local:  # what the core's local memory cannot keep lives in far memory
        keep = _local_roots(g, st)
        far += [t for t in life if t not in keep and t not in far]
    arena_life = {t: v for t, v in life.items() if t not in far}
    span = _spans(steps)
    for v, read in g.meta.get("far_reads", {}).items():  # staging buffers of far reads
        if read["mode"] == "staged":
            arena_life[f"{v}@stage"] = span[v]
            size[f"{v}@stage"] = 2 * read["bytes"]
    offsets, arena_bytes = _place(arena_life, size)
    profile = _profile(arena_life, size, len(steps))
    dirty = []
    for t, off in offsets.items():
        if not any(st.halo.get(t, (0, 0))):
            continue
        if local:  # local memory holds whatever the last run left: every halo is zeroed
            dirty.append(t)
            continue
        a = arena_life[t][0]
        end = off + size[t]
        if any(arena_life[u][1] < a and offsets[u] < end and off < offsets[u] + size[u]
               for u in offsets if u != t):
            dirty.append(t)
    k = int(np.argmax(profile)) if profile else 0
    live = sorted(((t, size[t]) for t, (a, b) in arena_life.items() if a <= k <= b),
                  key=lambda x: -x[1])
    name, piece = steps[k] if steps else ("", None)
    at = name + (f"#{piece}" if piece is not None else "")
    return _Plan(g, Arena(offsets, sorted(far), arena_bytes, local=local), profile,
                 sorted(dirty), [],
                 peak_at=(at, live))


def _local_roots(g: Graph, st) -> set[str]:
    """Storage roots the core's local memory may hold: written and read only by the core
    nodes of one core subgraph (local memory keeps nothing the runtime or the next run of
    the core could use), holding no graph input or output (the runtime writes and reads
    those in external memory)."""
    subgraph = {v: k for k, sg in enumerate(g.meta["subgraphs"]) for v in sg["nodes"]}
    on_core = {k for k, sg in enumerate(g.meta["subgraphs"]) if sg["device"] == "core"}
    where: dict[str, set] = {}
    for n in g.nodes:
        for t in (*n.inputs, *n.outputs):
            if t and t in st.root:
                where.setdefault(st.root[t], set()).add(subgraph.get(n.name, -1))
    fixed = {st.root.get(t, t) for t in (*g.inputs, *g.outputs)}
    return {r for r, ks in where.items() if len(ks) == 1 and ks <= on_core and r not in fixed}


# ---------------------------------------------------------------------------------------------
# Seed 001's rewrite on the node graph
# ---------------------------------------------------------------------------------------------


def _flow(g: Graph, st, steps, delays: dict[str, float]) -> tuple[Flow, set[str]]:
    """The node graph as a :class:`~.memory_plan.Flow` (nodes with kernels and host nodes,
    in the order of their first step, each with a control edge from the one before; tensors:
    storage roots) and the roots that may be
    swapped: written by one core kernel node, read only by core kernel nodes (directly,
    not through a view or a concatenation), not an input or output of the graph."""
    nodes = {n.name: n for n in g.nodes}
    order = list(dict.fromkeys(name for name, _ in steps))
    roots = set(st.roots)
    # a concatenation's storage is written by every slice's producer (and holds the graph
    # input when that is a slice): not a tensor of the flow (it is never swapped; the order
    # edges below keep its readers after its writers).  A flow tensor is written by one
    # node, before every node that reads it.
    pos = {v: i for i, v in enumerate(order)}
    writers: dict[str, set[str]] = {}
    first_read: dict[str, int] = {}
    for v in order:
        for t in nodes[v].outputs:
            if st.root.get(t) in roots:
                writers.setdefault(st.root[t], set()).add(v)
        for t in nodes[v].inputs:
            if t and st.root.get(t) in roots:
                first_read.setdefault(st.root[t], pos[v])
    roots = {r for r in roots
             if len(writers.get(r, ())) <= 1
             and all(pos[w] < first_read.get(r, len(order)) for w in writers.get(r, ()))}
    reads = {v: [st.root[t] for t in nodes[v].inputs if t and st.root.get(t) in roots]
             for v in order}
    writes = {v: [st.root[t] for t in nodes[v].outputs if st.root.get(t) in roots] for v in order}
    size = {t: st.size(g, t) for t in roots}
    # the core runs one kernel after another: the schedule is part of the graph (each node
    # after the one before it), so slack is the time a tensor waits in the program as run
    after = {v: {u} for u, v in zip(order, order[1:])}
    flow = Flow(order, reads, writes, size, {v: delays.get(v, 0.0) for v in order}, after)
    made = g.producers()
    users = g.consumers()
    slices = {st.root[t] for t in st.parent}
    ok = set()
    for t in st.roots:
        p = made.get(t)
        us = users.get(t, [])
        if (t not in roots or p is None or p.device != "core" or p.op in _LAYOUT_OPS or t in g.inputs
                or t in g.outputs or t in slices or not us):
            continue
        if all(u.device == "core" and u.op not in _LAYOUT_OPS and u.name in reads for u in us):
            ok.add(t)
    if g.meta.get("fast_memory") == "local":  # the rest lives in far memory already
        ok &= _local_roots(g, st)
    return flow, ok


def _apply(g: Graph, flow: Flow, old_steps) -> Graph:
    """The graph with ``flow``'s reduction / restoration nodes as ``Copy`` nodes, their
    consumers reading the restored copies, and every core subgraph's kernels in the
    rewritten flow's order (original kernels keep their relative order; a copy runs right
    after the node before it in the flow's order, and never after a kernel of one of its
    consumers)."""
    g = g.copy()
    nodes = {n.name: n for n in g.nodes}
    new = [v for v in flow.order if v not in nodes]
    # tensors and nodes
    copy_of = {}  # new tensor -> the tensor it copies
    for v in new:
        (src,), (dst,) = flow.reads[v], flow.writes[v]
        copy_of[dst] = copy_of.get(src, src)
        t = g.tensor(copy_of[dst])
        g.tensors[dst] = Tensor(dst, t.shape, t.dtype, None, t.scale)
        g.nodes.append(Node(v, "Copy", [src], [dst], {}, "core", {"memory": flow.kind[v]}))
    for v in flow.order:
        if v in nodes:
            n = nodes[v]
            renamed = {copy_of[t]: t for t in flow.reads[v] if t in copy_of}
            n.inputs = [renamed.get(i, i) for i in n.inputs]
    g.toposort()
    # positions: original steps keep theirs; a copy goes after its anchor
    pos = _spans(old_steps)
    seg_of = {}
    for k, sg in enumerate(g.meta["subgraphs"]):
        for v in sg["nodes"]:
            seg_of[v] = k
    made = {t: v for v in flow.order for t in flow.writes[v]}
    users: dict[str, list[str]] = {}
    for v in flow.order:
        for t in flow.reads[v]:
            users.setdefault(t, []).append(v)
    # a copy's position: a fraction past an original step (flow order breaks ties)
    place: dict[str, float] = {}
    anchor = None
    for i, v in enumerate(flow.order):
        if v in pos:
            anchor = v
            continue
        eps = 0.001 * (i + 1)
        p = (pos[anchor][1] if anchor else -1) + eps
        src = made[flow.reads[v][0]]
        if flow.kind[v] == "reduction":  # after the producer, in its subgraph
            p = max(p, pos[src][1] + eps)
            seg_of[v] = seg_of[src]
        else:  # before its first consumer and after the reduction, in the consumer's subgraph
            first = min(users[flow.writes[v][0]], key=lambda u: pos[u][0])
            seg_of[v] = seg_of[first]
            seg_start = min(pos[u][0] for u in g.meta["subgraphs"][seg_of[v]]["nodes"] if u in pos)
            p = max(min(p, pos[first][0] - 1 + eps), seg_start - 1 + eps, place[src] + 1e-6)
        place[v] = p
    step_of = {u: p for p, u in enumerate(old_steps)}
    subgraphs = []
    for k, sg in enumerate(g.meta["subgraphs"]):
        sg = dict(sg)
        extra = [v for v in new if seg_of[v] == k]
        if extra:
            kern = subgraph_units(g, sg)
            keyed = [(step_of[u], u) for u in kern] + [(place[v], (v, None)) for v in extra]
            sg["nodes"] = list(sg["nodes"]) + extra
            sg["units"] = [list(u) for _, u in sorted(keyed)]
        subgraphs.append(sg)
    g.meta["subgraphs"] = subgraphs
    _check_order(g)
    return g


def _check_order(g: Graph) -> None:
    """Every kernel after the kernels writing what it reads (program order)."""
    steps = _steps(g)
    nodes = {n.name: n for n in g.nodes}
    made = g.producers()
    span = _spans(steps)

    def writers(t):
        p = made.get(t)
        if p is None:
            return []
        if p.op in _LAYOUT_OPS and p.name not in span:
            return [w for i in p.inputs if i and not g.tensor(i).is_const for w in writers(i)]
        return [p.name]

    for v in span:
        for t in nodes[v].inputs:
            if not t or g.tensor(t).is_const:
                continue
            for w in writers(t):
                if w in span and span[w][1] >= span[v][0]:
                    raise AssertionError(f"memory plan: {v} runs before {w}, which writes {t}")


# ---------------------------------------------------------------------------------------------
# The pass
# ---------------------------------------------------------------------------------------------


def memory_budget(graph: Graph, options: MemoryOptions, config: CoreConfig, image: MemoryImage,
                  scratch: MemoryImage, dense: bool = False) -> Graph:
    """See the module docstring.  ``graph`` has layouts in ``scratch`` (the allocation the
    schedule pass timed orders with); the plan's regions go into ``image``."""
    g = graph.copy()
    budget = options.budget
    if budget is not None and budget <= 0:
        raise CompileError(f"--memory-budget {budget}: must be a positive number of bytes")
    if options.compress not in ("auto", "all", "off"):
        raise CompileError(f"memory plan: compress={options.compress!r} is not auto, all or off")
    if options.far_reads not in ("auto", "direct", "staged"):
        raise CompileError(f"memory plan: far_reads={options.far_reads!r} is not auto, direct "
                           "or staged")
    if options.fast not in ("external", "local"):
        raise CompileError(f"memory plan: fast={options.fast!r} is not external or local")
    if options.fast == "local":
        if budget is not None and budget > config.local_bytes:
            raise CompileError(f"--memory-budget {budget}: the fast memory is the core's local "
                               f"memory, which holds {config.local_bytes} bytes")
        g.meta["fast_memory"] = "local"
    steps = _steps(g)
    plain = _place_plan(g.copy(), steps)  # no output in place, no swap
    base = _evaluate(g.copy(), steps)
    best = base
    tried = 0
    packed: dict[str, float] = {}  # candidates stored compressed: expected stream / bytes
    if budget is not None and base.fast > budget:
        st = storage(g)  # tensors as written (no output shares its input's storage yet)
        timer = KernelTimer(g, config, scratch, dense)
        nodes = {n.name: n for n in g.nodes}
        delays: dict[str, float] = {}
        alone: dict = {}  # each kernel's cycles alone (the far-memory estimates reuse them)
        for name, idx in steps:
            if nodes[name].device == "core":
                alone[(name, idx)] = timer.units([(name, idx)])[0]
                delays[name] = delays.get(name, 0.0) + alone[(name, idx)]
        flow, ok = _flow(g, st, steps, delays)
        _, _, tts = timing_analysis(flow)
        sets = _swap_sets(flow, ok, tts, options)
        tensors = list(dict.fromkeys(t for _, t in (sets[-1] if sets else [])))
        packed = _compressed(g, tensors, options, config)
        restore = {t: _copy_cycles(flow.size[t] * packed.get(t, 1.0), config, options.far)
                   for t in tensors}
        for chosen, prefetch in [(c, p) for c in sets for p in (True, False)]:
            new = rewrite(flow, chosen, gap=options.gap, restore_delay=restore,
                          prefetch=prefetch)
            plan = _evaluate(_apply(g, new, steps))
            plan.prefetch = prefetch
            plan.swapped = [{"tensor": t, "bytes": flow.size[t],
                             "late_consumers": sorted(n for n, u in chosen if u == t),
                             "restorations": sum(1 for v in new.order
                                                 if new.kind.get(v) == "restoration"
                                                 and new.reads[v] == [f"{t}@far"])}
                            for t in dict.fromkeys(t for _, t in chosen)]
            tried += 1
            if plan.fast < best.fast:
                best = plan
            if plan.fast <= budget:
                best = plan
                break
        if best.fast > budget and options.far_resident:
            starts = [base] + ([best] if best is not base else [])
            # staging buffers take at most a quarter of the budget (two halves)
            far_cost = _FarCost(g, timer, steps, options.far, budget // 4, options.far_reads,
                                known=alone)
            filled = [_far_resident(p, budget, far_cost) for p in starts]
            fits = [p for p in filled if p.fast <= budget]
            best = (min(fits, key=lambda p: _far_cycles(p, config, options.far)) if fits
                    else min(filled + [best], key=lambda p: p.fast))
        if best.fast > budget:
            why = (f"{len(tensors)} tensors can be swapped" if tensors else
                   "no tensor can be swapped: a swap needs a tensor one core kernel writes "
                   "and later core kernels read, with slack; concatenation buffers, views "
                   "and the graph's inputs and outputs stay")
            if options.far_resident:
                why += ("; no tensor live at the peak can stay in far memory instead (the "
                        "graph's inputs and outputs and swapped tensors cannot)")
            at, live = best.peak_at
            top = ", ".join(f"{t} {b}" for t, b in live[:3])
            raise BudgetError(f"--memory-budget {budget}: {g.name} needs at least {best.fast} "
                              f"bytes of fast memory ({why}; without swapping it needs "
                              f"{base.fast}; the smallest plan peaks at kernel {at!r} with "
                              f"{len(live)} tensors live, largest {top} bytes); give a budget "
                              f"of {best.fast} or more", best.fast)
    for s in best.swapped:  # every swapped tensor was a candidate
        s["compressed"] = s["tensor"] in packed
        if s["compressed"]:
            s["expected_ratio"] = round(packed[s["tensor"]], 3)
    _mark_compressed(best.graph, best.arena, packed, config)
    reads = _far_reads(best)
    out = allocate(best.graph, image, arena=best.arena)
    for n in out.nodes:
        if n.name in reads:
            read = dict(reads[n.name])
            if read["mode"] == "staged":
                read["addr"] = best.arena.base(image) + best.arena.offsets[f"{n.name}@stage"]
            n.meta = {**n.meta, "far_read": read}
    resident = [t for t in best.graph.meta.get("far_resident", ()) if t in best.arena.far]
    out.meta["memory"] = {
        "budget": budget, "fast_memory": options.fast,
        "fast_bytes_before": base.fast, "fast_bytes": best.fast,
        "arena_bytes": best.arena.size, "peak_plain": max(plain.profile, default=0),
        "peak_before": max(base.profile, default=0),
        "peak_after": max(best.profile, default=0), "plans_tried": tried,
        "prefetch": best.prefetch,
        "far_bytes": sum(best.arena.far_bytes.get(t, storage(out).size(out, t))
                         for t in best.arena.far),
        "far_memory": {"latency": options.far.latency, "beat_cycles": options.far.beat_cycles},
        "swapped": best.swapped, "zero_halo": best.dirty,
        "far_resident": [{"tensor": t, "bytes": storage(out).size(out, t),
                          "estimated_cycles": round(best.far_costs.get(t, 0.0))}
                         for t in resident],
        "in_place": sorted(best.graph.meta.get("inplace", {}).items()),
        "profile_before": base.profile, "profile_after": best.profile,
    }
    return out


def _compressed(g: Graph, tensors, options: MemoryOptions,
                config: CoreConfig) -> dict[str, float]:
    """The swapped ``tensors`` stored compressed under ``options.compress``, each with the
    fraction of its bytes its stream is expected to take.  Only maps of one image (the
    kernels cut a batch's maps as one).  ``auto``: maps a ReLU wrote whose expected stream
    is below :data:`COMPRESS_BELOW` of their bytes; ``all``: every one."""
    if options.compress == "off":
        return {}
    made = g.producers()
    readers: dict[str, list[Node]] = {}
    for n in g.nodes:
        for i in n.inputs:
            readers.setdefault(i, []).append(n)
    out = {}
    for t in tensors:
        n = made.get(t)
        shape = g.tensor(t).shape
        if n is None or (shape and len(shape) == 4 and shape[0] != 1):
            continue
        measured = [r.meta["neurons"]["density"] for r in readers.get(t, [])
                    if r.meta.get("neurons") and r.inputs[0] == t]
        relu = bool(n.meta.get("relu"))
        density = max(measured) if measured else (RELU_DENSITY_GUESS if relu else 1.0)
        h, w, c = hwc(shape)
        ratio = kernels.expected_stream_bytes(config, h, w, c, density) / max(1, h * w * c)
        if options.compress == "all" or (relu and ratio < COMPRESS_BELOW):
            out[t] = ratio
    return out


def _mark_compressed(g: Graph, arena: Arena, packed, config: CoreConfig) -> None:
    """Mark the reductions of ``packed`` tensors and the restorations of their far copies
    ``compressed`` (code generation stores them with ``stc`` and loads them with ``ldc``)
    and give each far copy its bound in ``arena.far_bytes``."""
    for n in g.nodes:
        if n.op == "Copy" and n.meta.get("memory") == "reduction" and n.inputs[0] in packed:
            n.meta = {**n.meta, "compressed": True}
            h, w, c = hwc(g.tensor(n.outputs[0]).shape)
            arena.far_bytes[n.outputs[0]] = kernels.compressed_bytes(config, h, w, c)
    for n in g.nodes:
        if n.op == "Copy" and n.meta.get("memory") == "restoration" and \
                n.inputs[0] in arena.far_bytes:
            n.meta = {**n.meta, "compressed": True}


def _swap_sets(flow: Flow, ok: set[str], tts: dict, options: MemoryOptions) -> list[list]:
    """The sets of input slots ``(late consumer, tensor)`` to try, smallest first.

    ``slack`` (seed 001): the candidates (slack above ``th_tts``, tensor above ``th_s``),
    largest tensor first; set ``k`` holds every slot of the ``k`` largest tensors (at most
    ``n``).  ``distance`` (the TFLMS-style baseline): every slot whose consumer runs at
    least ``d`` nodes after the tensor's producer, for ``d`` from the longest distance down;
    no slack analysis."""
    if options.strategy == "slack":
        pool = [s for s in candidates(flow, tts, options.th_tts, options.th_s, len(tts))
                if s[1] in ok]
        tensors = list(dict.fromkeys(t for _, t in pool))
        if options.n:
            tensors = tensors[:options.n]
        return [[s for s in pool if s[1] in tensors[:k]] for k in range(1, len(tensors) + 1)]
    if options.strategy != "distance":
        raise CompileError(f"memory plan: strategy {options.strategy!r} is not slack or distance")
    pos = {v: i for i, v in enumerate(flow.order)}
    made = flow.producer()
    dist = {(n, t): pos[n] - pos[made[t]] for n in flow.order for t in flow.reads[n]
            if t in ok}
    out = []
    for d in sorted({d for d in dist.values() if d >= 2}, reverse=True):
        out.append(sorted(s for s, v in dist.items() if v >= d))
    return out


def _copy_cycles(nbytes: int, config: CoreConfig, far: timing.FarMemory) -> float:
    """Rough cycles of a swap between fast and far memory: the far side's beats."""
    return far.latency + nbytes / config.axi_bytes * far.beat_cycles


# ---------------------------------------------------------------------------------------------
# Far-resident tensors: the fallback when swapping cannot fit the budget
# ---------------------------------------------------------------------------------------------


#: readers of a far-resident map that read it through a staging buffer in fast memory, a
#: band of output rows at a time (:func:`~..kernels.stage_rows`, ``codegen.emit_layer``)
STAGED_OPS = ("Conv", "MaxPool", "AveragePool", "Affine")


def _bands(g: Graph, n: Node, L, rows: int) -> tuple[int, int, int]:
    """For ``n`` reading map layout ``L`` a band of ``rows`` output rows at a time: the
    largest band's input bytes (padded rows), all bands' bytes, and the number of bands."""
    h = g.tensor(n.outputs[0]).shape[2]
    sizes = [(b - a) * L.row for a, b in
             (rows_read(g, n, r0, min(h, r0 + rows), 0, L.pad_h) for r0 in range(0, h, rows))]
    return max(sizes), sum(sizes), len(sizes)


def _stage_plan(g: Graph, n: Node, L, cap: int) -> dict:
    """The bands ``n`` reads map layout ``L`` in: the most output rows whose two staging
    buffers (double-buffered: a band is copied while the one before is computed) fit
    ``cap`` bytes (at least one row, whether it fits or not)."""
    h = g.tensor(n.outputs[0]).shape[2]
    lo, hi = 1, h
    while lo < hi:  # a band's input grows with its rows
        mid = (lo + hi + 1) // 2
        if 2 * _bands(g, n, L, mid)[0] <= cap:
            lo = mid
        else:
            hi = mid - 1
    biggest, copied, count = _bands(g, n, L, lo)
    return {"rows": lo, "bytes": -(-biggest // 64) * 64, "copied": copied, "bands": count}


class _FarCost:
    """Estimated cycles a storage root adds when it stays in far memory, and how its
    readers read it.  Every kernel writing or reading it (or a view of it) is timed by the
    cost model with the tensor's addresses (``graph``'s layouts, before the plan) in far
    memory, less the same kernels in fast memory.  A reader split into pieces may instead
    run whole (a pooling of every channel at once reads whole pixel rows: long far
    bursts), and a reader in :data:`STAGED_OPS` may copy its input a band of rows at a time
    to a staging buffer in fast memory first (one long far burst per block of pixels, two
    copies' worth of beats, a weight reload per band); each way is timed and the cheapest
    taken.  Tensors written in place over the root count too."""

    def __init__(self, graph: Graph, timer: KernelTimer, steps, far: timing.FarMemory,
                 cap: int, mode: str = "auto", known: dict | None = None):
        """``known``: cycles of steps alone in fast memory, already timed."""
        self.g, self.timer, self.far, self.cap, self.mode = graph, timer, far, cap, mode
        self.nodes = {n.name: n for n in graph.nodes}
        self.touch: dict[str, list] = {}  # tensor -> the steps reading or writing it
        self.steps: dict[str, list] = {}  # node -> its steps
        for step in steps:
            n = self.nodes.get(step[0])
            if n is None or n.device != "core":
                continue
            self.steps.setdefault(n.name, []).append(step)
            for t in dict.fromkeys(x for x in (*n.inputs, *n.outputs) if x):
                self.touch.setdefault(t, []).append(step)
        self.memo: dict = {(s, None, None): c for s, c in (known or {}).items()}
        self.stage_at, self.stage_room = 0, 0  # a staging region in the timer's image

    def _range(self, t: str) -> tuple[int, int] | None:
        L = self.g.meta["layouts"].get(t)
        if L is None:
            return None
        P = L.padded()
        return P.base, P.base + (L.n - 1) * L.image + P.h * P.row

    def _time(self, step, rng=None, read: dict | None = None) -> int:
        """Cycles of ``step`` alone, ``rng`` in far memory, its node reading ``read``-wise."""
        key = (step, rng, read and read["mode"])
        if key not in self.memo:
            far = None if rng is None else timing.FarMemory(
                rng[0], rng[1], self.far.latency, self.far.beat_cycles)
            n = self.nodes[step[0]]
            old = n.meta
            if read is not None:
                n.meta = {**old, "far_read": read}
            try:
                self.memo[key] = self.timer.units([step], far)[0]
            finally:
                n.meta = old
        return self.memo[key]

    def _ways(self, n: Node, t: str, rng) -> list[tuple[float, dict | None]]:
        """Extra cycles of ``n`` with root ``t`` at ``rng`` in far memory, each way it can
        read it (``None``: as scheduled, piece by piece), against the same node in fast
        memory as scheduled (piece by piece) or whole (a whole node's own gain or loss is
        not counted: pieces alone run slower than between their neighbours)."""
        steps = self.steps[n.name]
        ways = [(sum(self._time(s, rng) - self._time(s) for s in steps), None)]
        if self.mode == "staged":
            staged = self._staged(n, t, rng)
            return [staged] if staged else ways
        if len(steps) > 1:
            ways.append((self._time((n.name, None), rng, {"mode": "whole"}) - self._whole(n),
                         {"mode": "whole"}))
        if self.mode == "auto":
            staged = self._staged(n, t, rng)
            ways += [staged] if staged else []
        return ways

    def _whole(self, n: Node) -> int:
        """Cycles of node ``n`` whole (not piece by piece) in fast memory."""
        steps = self.steps[n.name]
        return self._time((n.name, None)) if len(steps) > 1 else self._time(steps[0])

    def _staged(self, n: Node, t: str, rng) -> tuple[float, dict] | None:
        """Extra cycles of ``n`` reading root ``t`` at ``rng`` in far memory through a
        staging buffer (against ``n`` whole in fast memory), and the bands; ``None`` if
        ``n`` cannot (not a :data:`STAGED_OPS` reader of ``t`` itself, or not even one
        row's window fits the cap)."""
        L = self.g.meta["layouts"].get(t)
        if n.op not in STAGED_OPS or n.inputs[0] != t or L is None or not kernels.stageable(L):
            return None
        read = {"mode": "staged", **_stage_plan(self.g, n, L, self.cap)}
        if 2 * read["bytes"] > self.cap:
            return None
        if 2 * read["bytes"] > self.stage_room:
            self.stage_room = 2 * read["bytes"]
            region = self.timer.image.alloc(
                f"memory plan:stage{self.stage_room}", self.stage_room, "scratch", "int8",
                (self.stage_room,), align=64)
            self.stage_at = region.addr
            # the cost model's stores write nothing: the staged rows read non-zero, as
            # the timer's activations do
            self.timer.image.data[region.addr:region.end] = 127
        read["addr"] = self.stage_at
        return self._time((n.name, None), rng, read) - self._whole(n), read

    def __call__(self, tensors: list[str], root: str) -> tuple[float, dict]:
        """Extra cycles of keeping ``tensors`` (storage ``root``'s) in far memory, and how
        the readers that do not read it piece by piece read it (node -> way)."""
        total, reads = 0.0, {}
        ranges = {t: self._range(t) for t in tensors}
        for name in dict.fromkeys(s[0] for t in tensors for s in self.touch.get(t, ())):
            n = self.nodes[name]
            mine = [r for t, r in ranges.items() if r is not None and t in n.inputs]
            if len(mine) == 1 and not any(t in n.outputs for t in tensors):
                cycles, read = min(self._ways(n, root, mine[0]), key=lambda w: w[0])
                if read is not None:
                    reads[name] = read
                total += cycles
                continue
            for s in self.steps[name]:  # writes (and several views read): step by step
                for r in ranges.values():
                    if r is not None:
                        total += self._time(s, r) - self._time(s)
        return total, reads


def _far_resident(plan: _Plan, budget: int, far_cost: _FarCost) -> _Plan:
    """``plan`` with tensors moved wholly to far memory until it fits ``budget`` (or no
    tensor live at its peak can move): their producers store them there and their readers
    load them from there -- directly, paying the far memory's latency and narrower bus on
    those DMAs, or a band of rows at a time through a staging buffer in fast memory
    (:class:`_FarCost` takes the cheaper) -- instead of a swap's two copies.

    A swap cannot shrink the working set of one kernel (its inputs and its output are in
    fast memory while it runs); a far-resident tensor leaves it.  Greedy: at the plan's
    peak, the live tensor whose far accesses cost the fewest estimated cycles per byte it
    frees moves, and the next cheapest until the bytes moved cover the plan's excess over
    the budget; repeat.  Graph inputs and outputs (the runtime reads and writes them),
    swapped tensors and their copies stay where they are."""
    g = plan.graph
    steps = _steps(g)
    copies = {t for n in g.nodes if n.op == "Copy" for t in (*n.inputs, *n.outputs)}
    fixed = set(g.inputs) | set(g.outputs) | copies
    far = list(g.meta.get("far_resident", ()))
    reads = dict(g.meta.get("far_reads", {}))
    costs: dict[str, float] = {}
    while plan.fast > budget:
        st = storage(plan.graph)
        members: dict[str, list[str]] = {}  # root -> the tensors it stores
        for t, r in st.root.items():
            members.setdefault(r, []).append(t)
        held = {st.root.get(t, t) for t in fixed}
        movable = [(t, b) for t, b in plan.peak_at[1]
                   if t not in fixed and t not in held and t not in far and "@" not in t]
        if not movable:
            break
        priced = {t: far_cost(members.get(t, [t]), t) for t, _ in movable}
        freed = 0  # the cheapest per byte first, until the peak's excess is freed
        for t, b in sorted(movable, key=lambda x: (priced[x[0]][0] / max(1, x[1]), x[0])):
            far.append(t)
            costs[t] = priced[t][0]
            reads.update(priced[t][1])
            freed += b
            if freed >= plan.fast - budget:
                break
        h = g.copy()
        h.meta.pop("inplace", None)  # _evaluate chooses the outputs in place again
        h.meta["far_resident"] = list(far)
        h.meta["far_reads"] = dict(reads)
        moved = _evaluate(h, steps)
        moved.swapped, moved.prefetch = plan.swapped, plan.prefetch
        plan = moved
    plan.far_costs = {t: c for t, c in costs.items() if t in plan.arena.far}
    return plan


def _far_reads(plan: _Plan) -> dict[str, dict]:
    """How the readers of the plan's far-resident maps read them (node -> way), for those
    whose input did end up in far memory; the rest read their input as scheduled (the
    staging bytes of a staged one stay unused)."""
    st = storage(plan.graph)
    nodes = {n.name: n for n in plan.graph.nodes}
    far = set(plan.arena.far)
    return {v: r for v, r in plan.graph.meta.get("far_reads", {}).items()
            if any(st.root.get(i, i) in far for i in nodes[v].inputs if i)}


def _far_cycles(plan: _Plan, config: CoreConfig, far: timing.FarMemory) -> float:
    """Estimated cycles a plan adds: its far-resident tensors' (:class:`_FarCost`) and a
    swap's copies (out once, back once per restoration; each the far side's beats)."""
    copies = sum((1 + s["restorations"]) * _copy_cycles(s["bytes"], config, far)
                 for s in plan.swapped)
    return copies + sum(plan.far_costs.values())
