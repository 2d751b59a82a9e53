"""Does a program deadlock on its token channels?  Decided without timing.

A core is a network of processes joined by bounded FIFOs: the dispatcher feeds each unit's
queue (``queue_depth`` entries) in program order; a unit takes its head instruction's
tokens (one per channel in ``wait``), runs it, then puts one token into each channel of
``signal`` (``token_depth`` tokens per channel), stalling while any of them is full;
``sync`` and ``halt`` wait until every queue is empty and every unit idle.  Each process
reads and writes its channels in a fixed order and blocks on an empty or full one, so
(Kahn) whether the network deadlocks does not depend on how long anything takes: running
every instruction in zero time decides it for every timing, the golden model's and the
RTL's alike.  The compiler runs this on every program it emits (on an array, on each
core's, a ``recv`` taken as satisfied): precise tokens may live long enough to fill a
channel.
"""

from __future__ import annotations

from collections import deque

from .isa import IMPLEMENTED_UNITS, Instr
from .sequencer import dispatch_arrays

NU = len(IMPLEMENTED_UNITS)


def deadlock(prog: list[Instr], token_depth: int, queue_depth: int) -> str | None:
    """``None`` if the well-formed program ``prog`` (ending in ``halt``) runs to its end
    with channels of ``token_depth`` tokens and unit queues of ``queue_depth`` entries;
    else where it stops: each unit's blocked instruction (ROM word) and why."""
    idx, _, _ = dispatch_arrays(prog)
    unit = [-1 if ins.unit is None else int(ins.unit) for ins in prog]
    waits = [tuple(int(w) for w in ins.wait) for ins in prog]
    signals = [tuple(int(s) for s in ins.signal) for ins in prog]
    stream = idx.tolist()
    tokens = [[0] * NU for _ in range(NU)]       # tokens[v][u]: channel v -> u
    queues: list[deque[int]] = [deque() for _ in range(NU)]
    pending: list[int | None] = [None] * NU      # ran, its signals not yet put
    pos, n = 0, len(stream)
    while True:
        progress = False
        for u in range(NU):
            q, tu = queues[u], tokens[u]
            while True:
                k = pending[u]
                if k is not None:
                    if any(tu[s] >= token_depth for s in signals[k]):
                        break
                    for s in signals[k]:
                        tu[s] += 1
                    pending[u] = None
                    progress = True
                if not q:
                    break
                k = q[0]
                if any(tokens[w][u] == 0 for w in waits[k]):
                    break
                for w in waits[k]:
                    tokens[w][u] -= 1
                q.popleft()
                pending[u] = k
                progress = True
        while pos < n:
            k = stream[pos]
            u = unit[k]
            if u < 0:  # sync / halt
                if any(queues) or any(p is not None for p in pending):
                    break
                if prog[k].op == "halt":
                    return None
            elif len(queues[u]) >= queue_depth:
                break
            else:
                queues[u].append(k)
            pos += 1
            progress = True
        if not progress:
            return _report(prog, stream, pos, queues, pending, tokens, token_depth)


def _report(prog, stream, pos, queues, pending, tokens, token_depth) -> str:
    parts = []
    for u in range(NU):
        name = IMPLEMENTED_UNITS[u].name
        k = pending[u]
        if k is not None:
            full = [IMPLEMENTED_UNITS[s].name for s in prog[k].signal
                    if tokens[u][int(s)] >= token_depth]
            parts.append(f"{name} cannot signal {', '.join(full)} (channel full) after ROM "
                         f"word {k}")
        elif queues[u]:
            k = queues[u][0]
            empty = [w.name for w in prog[k].wait if tokens[int(w)][u] == 0]
            parts.append(f"{name} waits for a token from {', '.join(empty)} at ROM word {k}")
    if pos < len(stream):
        parts.append(f"dispatcher blocked at ROM word {stream[pos]} ({prog[stream[pos]].op})")
    return "; ".join(parts)
