"""Seed 001's memory-saving graph rewrite on a bare dataflow graph (``docs/compiler.md``):
timing analysis, candidate selection, the swap rewrite with its control edges, and the
memory profile before and after.

This module is the mechanism, on :class:`Flow` (nodes in program order, the tensors each
reads and writes, tensor sizes, node delays).  The compile pass :mod:`.memory_budget`
builds a :class:`Flow` from the graph and the cost model, places the activations in a
fast-memory arena and the swapped ones in far memory, and emits the reductions and
restorations as ``Copy`` kernels.

* **Timing analysis** (:func:`timing_analysis`, one linear pass): per input slot, the
  tensor's arrival time TAT, the node's required time TRT (the latest arrival among its
  inputs) and the slack TTS = TRT - TAT; a node's own TAT is its TRT plus its delay.
* **Candidates** (:func:`candidates`): input slots with TTS > ``th_tts`` and a tensor larger
  than ``th_s`` bytes, the ``n`` largest.
* **Rewrite** (:func:`rewrite`), per chosen tensor ``t`` (producer ``P``; its late consumers:
  the chosen ones and every consumer after the first of them in program order):
  a *reduction* node ``A`` (``t`` -> far memory) fed by ``P``; a *serialization* edge
  ``A -> p`` to the last early consumer ``p`` that runs after ``P``, so ``p`` does not
  allocate its output before ``t`` has left; a *restoration* node ``B`` (far memory ->
  ``t'``) per group of late consumers (duplicated for late consumers far apart) feeding
  them; a *prefetch* edge into ``B`` from an ancestor of its consumer (never the consumer:
  that would be a cycle), chosen so that ``B`` starts about ``delay(B)`` before the
  consumer needs it, and edges from the early consumers (``t`` and its copy are never live
  together); a second *serialization* edge into ``B`` from the consumer of the
  previous restoration, so two restorations never overlap.  Control edges carry no data.
  An edge that would close a cycle is not added (the rewrite never creates one).
* **Memory profile** (:func:`memory_profile`): bytes live in fast memory after every step of
  a program order, before and after the rewrite.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field


@dataclass
class Flow:
    """A dataflow graph: ``order`` is a topological order of the nodes (the program order);
    ``reads[n]`` / ``writes[n]`` the tensors node ``n`` reads (its input slots) and writes;
    ``size[t]`` bytes; ``delay[n]`` cycles; ``after[n]``: control edges (nodes that must
    finish before ``n`` starts); ``far``: tensors that live in far memory."""

    order: list[str]
    reads: dict[str, list[str]]
    writes: dict[str, list[str]]
    size: dict[str, int]
    delay: dict[str, float]
    after: dict[str, set[str]] = field(default_factory=dict)
    far: set[str] = field(default_factory=set)
    kind: dict[str, str] = field(default_factory=dict)  #: "reduction" / "restoration"
    #: restoration -> the node its prefetch edge comes from
    prefetch: dict[str, str] = field(default_factory=dict)

    def producer(self) -> dict[str, str]:
        return {t: n for n in self.writes for t in self.writes[n]}

    def preds(self) -> dict[str, set[str]]:
        """Data and control predecessors of every node."""
        made = self.producer()
        return {n: {made[t] for t in self.reads[n] if t in made} | set(self.after.get(n, ()))
                for n in self.reads}

    def consumers(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for n in self.reads:
            for t in self.reads[n]:
                out.setdefault(t, []).append(n)
        return out


def timing_analysis(flow: Flow) -> tuple[dict, dict, dict]:
    """(TAT, TRT, TTS): TAT per node (its finish time) and per input slot ``(node, tensor)``,
    TRT per node, TTS per input slot; one pass over the nodes in the seed's work-list
    order (a node is ready when every input's arrival is known)."""
    made = flow.producer()
    tat: dict = {}
    trt: dict = {}
    tts: dict = {}
    waiting = {n: len([t for t in flow.reads[n] if t in made]) + len(flow.after.get(n, ()))
               for n in flow.order}
    users: dict[str, list] = {}
    for n in flow.order:
        for t in flow.reads[n]:
            if t in made:
                users.setdefault(made[t], []).append((n, t))
        for a in flow.after.get(n, ()):
            users.setdefault(a, []).append((n, None))
    queue = [n for n in flow.order if waiting[n] == 0]
    for n in queue:  # sources: TAT = TRT = 0 for their (graph-input) slots
        trt[n] = 0.0
        for t in flow.reads[n]:
            tat[(n, t)], tts[(n, t)] = 0.0, 0.0
        tat[n] = float(flow.delay.get(n, 0.0))
    i = 0
    while i < len(queue):
        q = queue[i]
        i += 1
        for n, t in users.get(q, ()):
            if t is not None:
                tat[(n, t)] = tat[q]
            else:
                tat[(n, ("after", q))] = tat[q]
            waiting[n] -= 1
            if waiting[n] == 0:
                slots = [(n, t) for t in flow.reads[n]] + [(n, ("after", a))
                                                           for a in flow.after.get(n, ())]
                for s in slots:
                    tat.setdefault(s, 0.0)  # graph inputs arrive at 0
                trt[n] = max((tat[s] for s in slots), default=0.0)
                for s in slots:
                    if not isinstance(s[1], tuple):
                        tts[s] = trt[n] - tat[s]
                tat[n] = trt[n] + float(flow.delay.get(n, 0.0))
                queue.append(n)
    if len(queue) != len(flow.order):
        raise ValueError("timing analysis: the flow has a cycle")
    return tat, trt, tts


def candidates(flow: Flow, tts: dict, th_tts: float, th_s: int, n: int) -> list[tuple[str, str]]:
    """Input slots ``(node, tensor)`` with slack above ``th_tts`` and a tensor above ``th_s``
    bytes; the ``n`` largest tensors when there are more (ties: the later slot first)."""
    keep = [(s, flow.size.get(s[1], 0)) for s, v in tts.items()
            if v > th_tts and flow.size.get(s[1], 0) > th_s and s[1] not in flow.far]
    keep.sort(key=lambda x: (-x[1], -tts[x[0]]))
    return [s for s, _ in keep[:n]]


def _reaches(preds: dict[str, set[str]], src: str, dst: str) -> bool:
    """Is there a path src -> ... -> dst (following predecessor sets backwards from dst)?"""
    seen, stack = set(), [dst]
    while stack:
        v = stack.pop()
        if v == src:
            return True
        if v in seen:
            continue
        seen.add(v)
        stack.extend(preds.get(v, ()))
    return False


def _add_edge(flow: Flow, preds: dict, a: str, b: str) -> bool:
    """Control edge a -> b unless it would close a cycle (b already reaches a)."""
    if a == b or _reaches(preds, b, a):
        return False
    flow.after.setdefault(b, set()).add(a)
    preds[b].add(a)
    return True


def rewrite(flow: Flow, chosen: list[tuple[str, str]], *, gap: float = 0.0,
            restore_delay: dict[str, float] | None = None, prefetch: bool = True) -> Flow:
    """The flow with the module docstring's reduction / restoration nodes and control edges
    for every chosen slot ``(late consumer, tensor)``; ``gap``: late consumers of one tensor
    whose required times differ by more than this get a restoration each (else they share
    one); ``restore_delay[t]``: the restoration's delay (default: the tensor's size / 8);
    ``prefetch=False``: no prefetch edges (each restoration runs just before its consumer:
    slower, but its copy is not live while the nodes before the consumer run)."""
    tat, trt, _ = timing_analysis(flow)
    out = Flow(list(flow.order), {k: list(v) for k, v in flow.reads.items()},
               {k: list(v) for k, v in flow.writes.items()}, dict(flow.size), dict(flow.delay),
               {k: set(v) for k, v in flow.after.items()}, set(flow.far), dict(flow.kind),
               dict(flow.prefetch))
    made = flow.producer()
    users = flow.consumers()
    pos = {n: i for i, n in enumerate(flow.order)}
    flow_preds = flow.preds()
    late_of: dict[str, list[str]] = {}
    for n, t in chosen:
        if t in made:
            late_of.setdefault(t, []).append(n)
    preds = out.preds()
    restorations: list[tuple[float, str]] = []  # (required time of its consumer, B)
    for t in sorted(late_of, key=lambda t: pos[made[t]]):
        P = made[t]
        # the consumers from the first chosen one on (in program order) read the restored
        # copy; the ones before it read the tensor before it leaves
        cut = min(pos[n] for n in late_of[t])
        late = sorted({n for n in users[t] if pos[n] >= cut}, key=lambda n: trt[n])
        early = [n for n in users[t] if n not in late]
        far = f"{t}@far"
        A = f"swap_out:{t}"
        out.reads[A], out.writes[A] = [t], [far]
        out.size[far] = flow.size[t]
        out.far.add(far)
        out.delay[A] = float(flow.size[t]) / 8
        out.kind[A] = "reduction"
        preds[A] = {P}
        if early:  # serialization: the last early consumer (in program order) waits for
            # the reduction
            _add_edge(out, preds, A, max(early, key=pos.get))
        # restorations: one per group of late consumers within `gap` of each other
        groups: list[list[str]] = []
        for n in late:
            if groups and trt[n] - trt[groups[-1][0]] <= gap:
                groups[-1].append(n)
            else:
                groups.append([n])
        for k, group in enumerate(groups):
            B = f"swap_in:{t}" + (f"#{k}" if len(groups) > 1 else "")
            back = f"{t}@{k}" if len(groups) > 1 else f"{t}@back"
            out.reads[B], out.writes[B] = [far], [back]
            out.size[back] = flow.size[t]
            d = (restore_delay or {}).get(t, float(flow.size[t]) / 8)
            out.delay[B] = d
            out.kind[B] = "restoration"
            preds[B] = {A}
            for n in group:
                out.reads[n] = [back if x == t else x for x in out.reads[n]]
                preds[n].add(B)
            first = group[0]
            # prefetch: the ancestor of the consumer that finishes closest before the time
            # the restoration must start (never the consumer itself)
            start_by = trt[first] - d
            ancestors = _ancestors(flow_preds, first)
            ancestors.discard(P)
            options = [u for u in ancestors if tat[u] <= start_by]
            if options and prefetch:
                u = max(options, key=lambda u: tat[u])
                if _add_edge(out, preds, u, B):
                    out.prefetch[B] = u
            # and never before the tensor has left fast memory (t and its copy would both
            # be live): after every early consumer
            for p in early:
                _add_edge(out, preds, p, B)
            restorations.append((trt[first], B))
    # second serialization: restorations in the order they are needed, each after the
    # consumers of the previous one
    restorations.sort()
    for (_, prev), (_, nxt) in zip(restorations, restorations[1:]):
        for n in [v for v in out.order if out.writes[prev][0] in out.reads[v]]:
            _add_edge(out, preds, n, nxt)
    out.order = schedule(out, flow.order)
    return out


def _ancestors(preds: dict[str, set[str]], n: str) -> set[str]:
    seen, stack = set(), list(preds[n])
    while stack:
        v = stack.pop()
        if v not in seen:
            seen.add(v)
            stack.extend(preds[v])
    return seen


def schedule(flow: Flow, hint: list[str]) -> list[str]:
    """A topological order of ``flow`` (data and control edges) that follows ``hint`` (the
    old program order) where it can: a reduction right after its producer, a restoration
    right after its prefetch edge's source (its transfer overlaps the nodes between there
    and its consumer), else just before its first consumer."""
    preds = flow.preds()
    nodes = list(flow.reads)
    rank = {n: i for i, n in enumerate(hint)}
    users: dict[str, list[str]] = {}
    for n in nodes:
        for p in preds[n]:
            users.setdefault(p, []).append(n)
    made = flow.producer()

    def key(n: str) -> float:
        if n in rank:
            return rank[n]
        if flow.kind.get(n) == "reduction":
            return rank.get(made[flow.reads[n][0]], 0) + 0.25
        if n in flow.prefetch and flow.prefetch[n] in rank:
            return rank[flow.prefetch[n]] + 0.5
        firsts = [rank[u] for u in users.get(n, ()) if u in rank]
        return (min(firsts) if firsts else len(hint)) - 0.5

    missing = {n: len(preds[n]) for n in nodes}
    ready = [(key(n), n) for n in nodes if missing[n] == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, n = heapq.heappop(ready)
        order.append(n)
        for u in users.get(n, ()):
            missing[u] -= 1
            if missing[u] == 0:
                heapq.heappush(ready, (key(u), u))
    if len(order) != len(nodes):
        raise ValueError("memory plan: the rewritten flow has a cycle")
    return order


def memory_profile(flow: Flow, order: list[str] | None = None) -> list[int]:
    """Bytes live in fast memory after each step of ``order`` (default: ``flow.order``): a
    tensor is live from the step that writes it to the last step that reads it (graph
    inputs from the start; outputs nobody reads until the end); tensors in far memory do
    not count."""
    order = order or flow.order
    pos = {n: i for i, n in enumerate(order)}
    made = flow.producer()
    last: dict[str, int] = {}
    for n in order:
        for t in flow.reads[n]:
            last[t] = max(last.get(t, -1), pos[n])
    steps = [0] * (len(order) + 1)
    tensors = set(made) | {t for n in order for t in flow.reads[n]}
    for t in tensors:
        if t in flow.far:
            continue
        start = pos[made[t]] if t in made else 0
        end = last.get(t, len(order) - 1)
        for i in range(start, end + 1):
            steps[i] += flow.size.get(t, 0)
    return steps[:len(order)]
