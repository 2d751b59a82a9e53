"""Pass: topological-order search (seed 002, ``docs/compiler.md``).

The core's units (LD, MX, VX, ST) run concurrently, fed in program order, so the order of
independent kernels decides how much of one kernel's loads and stores hide behind another's
multiply-accumulates.  The search orders *kernels*: a whole core operator, or a piece of
one (:mod:`.split`).  Per core subgraph:

1. **Key nodes**: the kernels every path through the subgraph passes through (a kernel is
   one when every other kernel is its ancestor or its descendant).  The kernels between
   two consecutive key nodes, the later one included, form a *block*; every topological
   order of the subgraph is a concatenation of its blocks' orders, so each block is
   searched on its own.  Blocks with fewer than ``merge_below`` kernels join the previous
   one.
2. **Order search**: a block's topological orders are enumerated exhaustively when there
   are at most ``exhaustive`` of them, else ``samples`` random ones are drawn (seeded),
   always with the file order first and the list scheduler's (:func:`greedy_order`, also
   a mode of its own: the baseline) second.  Each candidate is emitted alone into a scratch copy
   of the memory image and timed by the cost model (:mod:`..cost`); the fastest is kept
   when it beats the file order by ``min_gain``.
3. **Linking**: the subgraph's program order is its blocks' orders concatenated along the
   data flow (``subgraph["units"]``); code generation emits it as one program
   (:mod:`.codegen`).

Dependencies between kernels are whole tensors: a kernel follows every kernel of the
operators that produce its inputs (through layout-only nodes such as Concat).  Pieces of
one operator are independent of each other.  ``graph.meta["schedule"]`` records, per core
subgraph, the blocks (kernels, orders, orders timed, the file order's and the chosen
order's estimated cycles) and the chosen order.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from snpu.config import CoreConfig
from snpu.errors import CompileError
from snpu.verif import timing
from snpu.verif.image import MemoryImage
from snpu.verif.program import Program

from .. import cost
from ..emit import Kernels
from ..ir import Graph
from .codegen import emit_nodes, units


#: file: the ONNX file's order; greedy: a list scheduler balancing the units; search: the
#: order search on the cost model (the file and the greedy order among the candidates)
MODES = ("file", "greedy", "search")


@dataclass(frozen=True)
class ScheduleOptions:
    mode: str = "file"          #: one of :data:`MODES`
    exhaustive: int = 24        #: enumerate every order of a block up to this many
    samples: int = 12           #: else time this many random orders (and the file order)
    merge_below: int = 2        #: a block with fewer kernels joins the previous one
    #: keep the file order unless another is estimated this much faster (the estimate's
    #: noise, bench/schedule.py)
    min_gain: float = 0.005
    seed: int = 0


Unit = tuple  #: (node name, piece index or None): one kernel


def unit_dag(g: Graph, names: list[str], order: list[Unit]) -> dict[Unit, set[Unit]]:
    """Predecessors of each kernel of ``order`` (the :func:`.codegen.units` of core nodes
    ``names``): every kernel of the operators producing its inputs, through layout-only
    nodes."""
    nodes = {n.name: n for n in g.nodes if n.name in set(names)}
    made = {o: v for v, n in nodes.items() for o in n.outputs}
    kernels_of: dict[str, list[Unit]] = {}
    for u in order:
        kernels_of.setdefault(u[0], []).append(u)
    memo: dict[str, set[str]] = {}

    def producers(v: str) -> set[str]:
        """Compute nodes ``v`` reads from (through layout nodes)."""
        if v not in memo:
            out: set[str] = set()
            for i in nodes[v].inputs:
                p = made.get(i)
                if p is None or p == v:
                    continue
                out |= {p} if p in kernels_of else producers(p)
            memo[v] = out
        return memo[v]

    return {u: {w for p in producers(u[0]) for w in kernels_of[p]} for u in order}


def is_topological(order: list, preds: dict) -> bool:
    seen: set = set()
    for v in order:
        if not preds[v] <= seen:
            return False
        seen.add(v)
    return True


def key_nodes(order: list, preds: dict) -> list:
    """The kernels every other kernel is an ancestor or a descendant of, in ``order``."""
    anc: dict = {}
    for v in order:
        a = set(preds[v])
        for p in preds[v]:
            a |= anc[p]
        anc[v] = a
    desc: dict = {v: set() for v in order}
    for v in order:
        for a in anc[v]:
            desc[a].add(v)
    everyone = len(order) - 1
    return [v for v in order if len(anc[v]) + len(desc[v]) == everyone]


def blocks(order: list, preds: dict, merge_below: int) -> list[list]:
    """Split ``order`` (topological) into blocks, each ending at a key node; a block with
    fewer than ``merge_below`` kernels joins the previous one."""
    keys = set(key_nodes(order, preds))
    out: list[list] = []
    cur: list = []
    for v in order:
        cur.append(v)
        if v in keys:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    merged: list[list] = []
    for b in out:
        if merged and len(b) < merge_below:
            merged[-1] = merged[-1] + b
        else:
            merged.append(b)
    return merged


def first_orders(nodes: list, preds: dict, limit: int) -> list[list]:
    """The first ``limit + 1`` topological orders of ``nodes`` (all of them if there are
    fewer; every prefix of a topological order extends to a whole one, so this costs at
    most ``limit + 1`` orders)."""
    return list(itertools.islice(all_orders(nodes, preds), limit + 1))


def count_orders(nodes: list, preds: dict, limit: int) -> int:
    """The number of topological orders of ``nodes``, counted up to ``limit + 1``."""
    return len(first_orders(nodes, preds, limit))


def all_orders(nodes: list, preds: dict):
    """Every topological order of ``nodes`` (a generator; ``nodes`` itself first when it is
    one), with predecessors outside ``nodes`` taken as placed."""
    inside = set(nodes)
    p = {v: preds[v] & inside for v in nodes}

    def rec(done: list, placed: set):
        if len(done) == len(nodes):
            yield list(done)
            return
        for v in nodes:
            if v not in placed and p[v] <= placed:
                done.append(v)
                placed.add(v)
                yield from rec(done, placed)
                done.pop()
                placed.discard(v)

    yield from rec([], set())


def random_order(nodes: list, preds: dict, rng: random.Random) -> list:
    inside = set(nodes)
    p = {v: preds[v] & inside for v in nodes}
    done: list = []
    placed: set = set()
    while len(done) < len(nodes):
        v = rng.choice([v for v in nodes if v not in placed and p[v] <= placed])
        done.append(v)
        placed.add(v)
    return done


def greedy_order(block: list, preds: dict, busy: dict) -> list:
    """A list scheduler: each step takes, among the ready kernels, the one after which the
    busiest unit finishes earliest (every unit's work of a kernel added to that unit's
    finish time, as if the kernels' units overlapped perfectly); ties: the file order.
    ``busy[kernel]``: the cost model's busy cycles per unit of the kernel alone."""
    inside = set(block)
    p = {v: preds[v] & inside for v in block}
    finish: dict[str, float] = {}
    done: list = []
    placed: set = set()
    while len(done) < len(block):
        ready = [v for v in block if v not in placed and p[v] <= placed]

        def makespan(v):
            return max(finish.get(u, 0) + c for u, c in busy[v].items())

        v = min(ready, key=lambda v: (makespan(v), block.index(v)))
        for u, c in busy[v].items():
            finish[u] = finish.get(u, 0) + c
        done.append(v)
        placed.add(v)
    return done


class KernelTimer:
    """Times candidate orders: each is emitted alone into a scratch copy of the memory
    image and run by the cost model."""

    def __init__(self, g: Graph, config: CoreConfig, image: MemoryImage, dense: bool):
        self.g, self.config, self.dense = g, config, dense
        self.image = image.copy_image()
        # every activation non-zero (halos stay zero): the neuron index the loads build then
        # marks the padding a window reads, and the cost model scales the rest by density
        for L in g.meta["layouts"].values():
            self.image.data[L.addresses()] = 127
        self.density = {n.name: float((n.meta.get("neurons") or {}).get("density", 1.0))
                        for n in g.nodes}
        self.timed = 0

    def __call__(self, order: list) -> int:
        return self.units(order)[0]

    def units(self, order: list, far: timing.FarMemory | None = None) -> tuple[int, dict[str, int]]:
        """Estimated cycles of ``order`` emitted alone, and each unit's busy cycles
        (``far``: with that address range timed as far memory)."""
        prog = Program(self.config, image=self.image, rom_name=f"schedule:{self.timed}")
        em = Kernels(prog, credits=True)  # the default mode's tokens (codegen)
        emit_nodes(em, self.g, order, f"schedule{self.timed}:", 0, self.dense)
        em.halt()
        self.timed += 1
        return cost.estimate(prog.instrs, self.image.data, self.config,
                             cost.layer_density(prog.tags, self.density), far)


def schedule(graph: Graph, options: ScheduleOptions, config: CoreConfig, image: MemoryImage,
             dense: bool = False) -> Graph:
    """See the module docstring.  ``image`` is only read (candidates are emitted into a
    copy)."""
    if options.mode not in MODES:
        raise CompileError(f"--schedule {options.mode!r}: expected one of {', '.join(MODES)}")
    g = graph.copy()
    report = []
    subgraphs = []
    timer = None  # made for the first core subgraph searched (it copies the image)
    for k, sg in enumerate(g.meta["subgraphs"]):
        if sg["device"] != "core" or options.mode == "file":
            subgraphs.append(sg)
            continue
        order = units(g, sg["nodes"])
        preds = unit_dag(g, sg["nodes"], order)
        timer = timer or KernelTimer(g, config, image, dense)
        rng = random.Random(options.seed * 1000003 + k)
        chosen: list = []
        entry: dict = {"subgraph": k, "kernels": len(order), "blocks": [],
                       "file_cycles": 0, "chosen_cycles": 0}
        for block in blocks(order, preds, options.merge_below):
            first = first_orders(block, preds, options.exhaustive)
            n_orders = len(first)
            if n_orders <= 1:
                chosen += block
                continue
            if options.mode == "search" and n_orders <= options.exhaustive:
                candidates = first  # every order (the list scheduler's among them)
            else:
                # each kernel's busy units, for the list scheduler
                busy = {u: timer.units([u])[1] for u in block}
                greedy = greedy_order(block, preds, busy)
                if options.mode == "greedy":
                    candidates = [block, greedy]
                else:
                    seen = {tuple(block), tuple(greedy)}
                    candidates = [block] + ([greedy] if greedy != block else [])
                    for _ in range(options.samples * 4):
                        if len(candidates) > options.samples:
                            break
                        o = random_order(block, preds, rng)
                        if tuple(o) not in seen:
                            seen.add(tuple(o))
                            candidates.append(o)
            times = [timer(o) for o in candidates]
            if options.mode == "greedy":
                best = 1  # the list scheduler's order, whatever the estimate says
            else:
                best = min(range(len(candidates)), key=lambda i: (times[i], i))  # ties: file
                if times[best] > (1 - options.min_gain) * times[0]:
                    best = 0
            chosen += candidates[best]
            entry["file_cycles"] += times[0]
            entry["chosen_cycles"] += times[best]
            entry["blocks"].append({
                "kernels": len(block),
                "orders": n_orders if n_orders <= options.exhaustive else f">{options.exhaustive}",
                "timed": len(candidates), "file_cycles": times[0], "chosen_cycles": times[best],
                "worst_cycles": max(times)})
        if sorted(chosen, key=str) != sorted(order, key=str) or not is_topological(chosen, preds):
            raise AssertionError(f"schedule: subgraph {k}: the chosen order is not a "
                                 "topological order of its kernels")
        entry["order"] = [u[0] if u[1] is None else f"{u[0]}#{u[1]}" for u in chosen]
        entry["changed"] = chosen != order
        report.append(entry)
        subgraphs.append({**sg, "units": [list(u) for u in chosen]})
    g.meta["subgraphs"] = subgraphs
    g.meta["schedule"] = {"mode": options.mode, "subgraphs": report}
    return g
