"""Hardware loops at emission time: :func:`repeat` emits the iterations of a kernel's loop
until they reach a *steady state*, then writes the rest as one ``loop`` instead of emitting
every iteration.

Emitting an iteration costs the same whether the re-roller (:mod:`.passes.reroll`) folds it
afterwards or not, so a layer of 200 rows took 200 rows of emission.  Here the emitter
proves that every further iteration would come out as the previous one with its load and
store addresses moved, and stops:

* the instructions of the last two iterations are equal but for the ``ext`` of loads and
  stores (their steps: the kernel promises addresses linear in the iteration);
* the emitter's state after the last iteration is the state after the one before,
  *translated* by one iteration: every unit's instruction count, vector clock, token counts
  and history of footprints advance by what one iteration adds, the history's external
  addresses by the moving loads' and stores' steps; the registers and the kernel's own
  state (``state()``: e.g. its ping-pong halves) are equal;
* the tokens of a channel balance over an iteration (as many waits as signals);
* address ranges that move by different steps never meet, over all the loop's iterations,
  where one of them is written: then every overlap test the emitter makes in a later
  iteration has the answer it had one iteration earlier.

The emitter is deterministic, so from a translated state the translated calls (the kernel
guarantees its iterations differ only in addresses that move linearly) emit the translated
instructions: the remaining iterations are the steady iteration, moved.  They become one
``loop`` whose body is the steady iteration in its final form (with the tokens the next
iteration takes from it), then the last iteration as the flat code after it, whose
instructions later code may still add signals to.  The emitter's state jumps to the end.
The dispatched instruction stream is exactly the one full emission gives
(``tests/compiler/test_emit_loops.py`` compares them on real and random models).

With an emitter for overlap (``Emitter(..., overlap=True)``, ``snpu compile --optimize
speed``) the loop takes the last iteration in as well (:func:`_carried`): it gives the
tokens its next iteration would have taken, which later code takes instead of adding
signals to the loop's words (those words are *sealed*; a later token from one of them
comes from a carrier, see :mod:`.emit`).  Its units decide their waits from the tokens
they took themselves only, so the translation also lets a unit keep what it knows of a
unit it never waits for (:func:`_direct_moves`), and lets records made before the loop
stay where no access of the loop meets them (:func:`_out_of_the_way`).  The stream then
differs from full emission in tokens only, and the golden model's race checker is what
verifies it (``tests/compiler/test_overlap.py``).
"""

from __future__ import annotations

import bisect
import operator
from dataclasses import dataclass
from typing import Any, Callable

from snpu.verif import isa
from snpu.verif.isa import IMPLEMENTED_UNITS, Instr
from snpu.verif.sequencer import STREAMS, stream

#: the :class:`~snpu.compiler.emit.Emitter` these functions drive (not imported: it
#: imports this module)
Emitter = Any
NU = len(IMPLEMENTED_UNITS)

#: how many iterations back the footprints the emitter still tracks may come from
HISTORY_ITERATIONS = 8
#: fewest iterations worth fast-forwarding (at least two are emitted to find the steady state)
MIN_ITERATIONS = 6
_MAX_BODY = (1 << isa.OPCODE_BY_NAME["loop"].field("body").width) - 1
_MAX_COUNT = (1 << isa.OPCODE_BY_NAME["loop"].field("count").width) - 1
_INC = isa.OPCODE_BY_NAME["loop"].field("in_inc").width
_INC_RANGE = range(-(1 << (_INC - 1)), 1 << (_INC - 1))
_MOVING = ("ld", "st")
_SHIFTING_BUFFERS = ("ext",)  # footprints in external memory move with the ext operands


def repeat(em: Emitter, n: int, body: Callable[[int], None],
           state: Callable[[], object] = lambda: None) -> None:
    """Emit ``body(0)``, ..., ``body(n - 1)``: the iterations of a loop whose iterations
    emit the same instructions but for the ``ext`` of loads and stores, moving linearly
    with the iteration (the caller's promise).  ``state()``: the caller's state an
    iteration changes (it must be equal after every iteration for a loop to form).

    With ``em.loops`` false, or where no steady state is found, every iteration is
    emitted; otherwise the rest after the steady state is one ``loop`` (module docstring).
    """
    outer_floor, outer_start, outer_iteration = em.loop_floor, em.loop_start, em.iteration_start
    starts: list[int] = []

    def iteration(i: int) -> None:
        # tokens given by instructions of this iteration or the one before only (see
        # emit.py): each iteration's words then take signals from the next one alone
        starts.append(len(em.p.instrs))
        em.loop_floor = max(outer_floor, starts[-2] if len(starts) > 1 else starts[-1])
        em.iteration_start = starts[-1]
        if outer_start is None:
            em.loop_start = starts[0]
        body(i)

    try:
        _repeat(em, n, iteration, state)
    finally:
        em.loop_floor, em.loop_start = outer_floor, outer_start
        em.iteration_start = outer_iteration
    if em.fold and em.loops and len(starts) >= 2 \
            and not any(ins.op == "loop" for ins in em.p.instrs[starts[0]:]):
        _carry_flat(em, starts[-2], starts[-1])


def _carry_flat(em: Emitter, a: int, b: int) -> None:
    """A loop whose iterations stayed flat (too few to prove a steady state): its last
    iteration (words ``b`` on) gives the tokens the one before (words ``a .. b``) gave its
    next iteration, as a loop that takes its last iteration in does (:func:`_carried`).
    The re-roller then finds the last iteration like the others, and the next kernel's
    first tiles take those tokens as credits.  Per channel, only where no later word of the
    unit gives that channel a token already (tokens in program order), the tokens fit
    (``room``, as :func:`_carried`) and the emitter still has the clock after each word
    giving one."""
    p = em.p
    prev, last = p.instrs[a:b], p.instrs[b:]
    if len(prev) != len(last) or any(x.op != y.op or x.unit != y.unit for x, y in zip(prev, last)):
        return
    added: dict[tuple[int, int], list[int]] = {}  # channel -> the words to give it a token
    for k, (x, y) in enumerate(zip(prev, last)):
        if y.unit is not None:
            for t in sorted(x.signal - y.signal):
                added.setdefault((int(y.unit), int(t)), []).append(b + k)
    count_at: dict[int, int] = {}  # word -> its unit's instruction count
    seen = [0] * NU
    for idx in range(len(p.instrs) - 1, b - 1, -1):
        if p.instrs[idx].unit is not None:
            w = int(p.instrs[idx].unit)
            count_at[idx] = em.count[w] - seen[w]
            seen[w] += 1
    room = (em.cfg.token_depth - 2) // 2
    for (v, u), words in added.items():
        if em.signals[v][u] - em.waits[v][u] + len(words) > room:
            continue
        if any(p.instrs[j].unit is not None and int(p.instrs[j].unit) == v
               and isa.Unit(u) in p.instrs[j].signal for j in range(words[0] + 1, len(p.instrs))):
            continue
        snaps = [em.snap_at[v].get(count_at[i]) for i in words]
        log = em.sig_list.get((v, u))  # the iteration before gave tokens on it: a log
        if log is None or any(snap is None for snap in snaps):
            continue
        for i, snap in zip(words, snaps):
            old = p.instrs[i]
            p.instrs[i] = Instr(old.op, old.args, old.wait, old.signal | {isa.Unit(u)})
            em.signals[v][u] += 1
            em.signal_of[(i, u)] = em.signals[v][u]
            log.append(snap)
        _note_credits(em, v, u, last)


def _note_credits(em: Emitter, v: int, u: int, iteration: list[Instr]) -> None:
    """Channel ``v -> u`` now holds credits: the tokens ``iteration``'s words of unit ``u``
    that wait for ``v`` would take next.  Record the buffers those words write: a later
    write takes such a credit only into one of them (:meth:`~.emit.Emitter._take_credits`),
    so that the credits wait for the next kernel that double-buffers the way this loop
    did, and a kernel of another kind in between leaves them alone."""
    em.credit_for[(v, u)] = {b for ins in iteration if ins.unit == isa.Unit(u)
                             and isa.Unit(v) in ins.wait for b in written(ins)}


def written(ins: Instr) -> tuple[str, ...]:
    """The buffers instruction ``ins`` writes."""
    if ins.op in ("ld", "ldc"):
        buf = isa.BUFFER_NAMES[ins.args["buf"]]
        return (buf, "nidx") if buf == "nbuf" else (buf,)
    return _WRITES.get(ins.op, ())


_WRITES = {"fc": ("acc",), "vred": ("acc",), "vew": ("acc",), "vewp": ("acc",), "req": ("obuf",),
           "st": ("ext",), "stc": ("ext",), "send": ("ext",), "recv": ("ext",)}


def _repeat(em: Emitter, n: int, body: Callable[[int], None], state: Callable[[], object]) -> None:
    if not em.loops or n < MIN_ITERATIONS or em.trace is not None:
        for i in range(n):
            body(i)
        return
    em.trace = {}
    try:
        snaps: list[_Snap] = []
        for i in range(n):
            start = len(em.p.instrs)
            body(i)
            em._prune()
            _drop_subsumed(em)
            snaps.append(_snapshot(em, start, state))
            left = n - 1 - i
            if len(snaps) >= 2 and 2 <= left <= _MAX_COUNT - 2:
                plan = _steady(em, snaps, i, n)
                if plan is not None:
                    _fast_forward(em, snaps, plan, left)
                    return
    finally:
        em.trace = None


def _drop_subsumed(em: Emitter) -> None:
    """Drop footprint records a newer record of the same unit covers (the emitter's own
    rule, applied to all): whoever conflicts with the older conflicts with the newer, so
    the tokens chosen are the same, and the history of a steady loop becomes periodic."""
    for buf, recs in em.history.items():
        if len(recs) > 1:
            em.history[buf] = [r for r in recs if not any(
                q[0] == r[0] and q[1] > r[1] and q[2] <= r[2] and r[3] <= q[3] and (q[4] or not r[4])
                for q in recs)]


@dataclass
class _Snap:
    """The emitter's state at the end of one iteration (see :func:`_snapshot`)."""

    start: int                      #: the iteration's first instruction (index in p.instrs)
    end: int
    cur: list[Instr]                #: its instructions as they stood then
    count: list[int]
    clock: list[list[int]]
    direct: list[list[int]]
    last: list[int | None]
    last_snap: list[tuple[int, ...]]
    signals: list[list[int]]
    waits: list[list[int]]
    nops: int
    sig_len: dict
    pending: dict                   #: (v, u) -> the token v's latest instruction gives u
    history: dict
    regs: dict
    state: object


def _snapshot(em: Emitter, start: int, state: Callable[[], object]) -> _Snap:
    p = em.p
    return _Snap(start, len(p.instrs), p.instrs[start:], list(em.count),
                 [list(r) for r in em.clock], [list(r) for r in em.direct], list(em.last),
                 list(em.last_snap),
                 [list(r) for r in em.signals], [list(r) for r in em.waits], em.nops,
                 {ch: len(v) for ch, v in em.sig_list.items()},
                 {(v, u): em.signal_of.get((em.last[v], u))
                  for v in range(NU) if em.last[v] is not None for u in range(NU)},
                 {b: sorted(r) for b, r in em.history.items() if r}, dict(p._regs), state())


def _like(x: Instr, y: Instr, d: int) -> bool:
    """Is ``y`` instruction ``x`` with its ``ext`` moved by ``d`` (0 for words without)?"""
    if x.op not in _MOVING:
        return d == 0 and x == y
    ax, ay = x.args, y.args
    return (x.op == y.op and x.wait == y.wait and x.signal == y.signal and not ax["walk"]
            and ay["ext"] - ax["ext"] == d and all(v == ay[k] for k, v in ax.items() if k != "ext"))


@dataclass
class _Plan:
    deltas: list[int]               #: per instruction of an iteration: its ext step
    incs: dict[str, int]            #: per address stream: the loop's increment
    c: list[int]                    #: instructions per unit per iteration
    s: list[list[int]]              #: tokens per channel per iteration
    moving: list[list[bool]]        #: per unit: which entries of its direct knowledge advance


def _steady(em: Emitter, snaps: list[_Snap], i: int, n: int) -> _Plan | None:
    """The plan of a loop if the last of ``snaps`` (iteration ``i`` of ``n``) is steady."""
    s1, s2 = snaps[-2:]
    L = s2.end - s2.start
    if not (0 < L <= _MAX_BODY) or s1.end - s1.start != L:
        return None
    fin1 = em.p.instrs[s1.start:s1.end]
    deltas = []
    for a1, b in zip(s1.cur, s2.cur):
        d = b.args["ext"] - a1.args["ext"] if b.op in _MOVING and a1.op in _MOVING else 0
        if b.op == "loop" or not _like(a1, b, d):
            return None
        deltas.append(d)
    incs = {s: 0 for s in STREAMS}
    for ins, d in zip(fin1, deltas):
        if d:
            s = stream(ins)
            if incs[s] not in (0, d) or d not in _INC_RANGE:
                return None
            incs[s] = d
    c = [b - a for a, b in zip(s1.count, s2.count)]
    s = [[b - a for a, b in zip(r1, r2)] for r1, r2 in zip(s1.signals, s2.signals)]
    w = [[b - a for a, b in zip(r1, r2)] for r1, r2 in zip(s1.waits, s2.waits)]
    if s != w or s1.regs != s2.regs or s1.state != s2.state:
        return None
    moving = _state_translates(em, s1, s2, c, s, L)
    if moving is None:
        return None
    if not _history_translates(em, snaps, deltas, c, L, i, n):
        return None
    if not _moving_ranges_apart(em, s2, deltas, i, n):
        return None
    return _Plan(deltas, incs, c, s, moving)


def _shift(snap: tuple[int, ...], c: list[int], k: int = 1) -> tuple[int, ...]:
    return tuple(map(operator.add, snap, c if k == 1 else [k * d for d in c]))


def _direct_moves(em: Emitter, s1: _Snap, s2: _Snap, u: int, c: list[int]) -> list[bool] | None:
    """Which entries of unit ``u``'s direct knowledge (:attr:`~.emit.Emitter.direct`: the
    latest instruction of each unit it took a token from) advance by an iteration from
    ``s1`` to ``s2``.  The others must stay put and stay harmless: a unit idle in the loop
    keeps them, and a unit that does not wait for ``w`` in the loop may keep its entry for
    ``w`` if it is older than every record of ``w`` in the buffers ``u`` touches: it then
    decides the same way against every record, moved or not.  These entries decide the
    waits only without ``em.transitive``; with it nothing depends on them and every mask
    is accepted."""
    mask = []
    for w in range(NU):
        a, b = s1.direct[u][w], s2.direct[u][w]
        if em.transitive:
            mask.append(bool(c[w]) and b == a + c[w])
            continue
        if c[w] and b == a + c[w]:
            mask.append(True)
        elif b == a and (not c[w] or not c[u] or w == u or all(
                r[1] > b for buf, recs in s2.history.items()
                if u in (int(x) for x in em.users.get(buf, range(NU))) for r in recs if r[0] == w)):
            mask.append(False)
        else:
            return None
    return mask


def _state_translates(em: Emitter, s1: _Snap, s2: _Snap, c: list[int], s: list[list[int]],
                      L: int) -> list[list[bool]] | None:
    """Clocks, latest instructions, token lists: the state after ``s2`` is the one after
    ``s1`` moved by one iteration; returns which entries of the units' direct knowledge
    move (:func:`_direct_moves`), ``None`` if it is not."""
    moving = []
    for u in range(NU):
        # a unit idle in the loop keeps its clock (it learns only by waiting)
        if s2.clock[u] != (list(_shift(s1.clock[u], c)) if c[u] else s1.clock[u]):
            return None
        mask = _direct_moves(em, s1, s2, u, c)
        if mask is None:
            return None
        moving.append(mask)
        if c[u]:
            if s1.last[u] is None or not s1.start <= s1.last[u] < s1.end \
                    or s2.last[u] != s1.last[u] + L or s2.last_snap[u] != _shift(s1.last_snap[u], c):
                return None
        elif s2.last[u] != s1.last[u] or s2.last_snap[u] != s1.last_snap[u]:
            return None
    for (v, u), k2 in s2.pending.items():
        k1 = s1.pending.get((v, u))
        if (k1 is None) != (k2 is None) or (k1 is not None and k2 != k1 + s[v][u]):
            return None
    for (v, u), lst in em.sig_list.items():
        sv = s[v][u]
        n1, n2 = s1.sig_len.get((v, u), 0), s2.sig_len.get((v, u), 0)
        if n2 - n1 != sv:
            return None
        for j in range(max(0, s1.waits[v][u] - 1) if sv else n2, n2 - sv):
            if lst[j + sv] != _shift(lst[j], c):
                return None
    return moving


def _history_translates(em: Emitter, snaps: list[_Snap], deltas: list[int], c: list[int],
                        L: int, i: int, n: int) -> bool:
    """Every footprint record after the last iteration is one after the iteration before
    moved by an iteration; each was made by an instruction of one of the last
    :data:`HISTORY_ITERATIONS` iterations, which are the steady one moved back -- or it
    was made before the loop and stays as it is: where every unit accessing its buffer
    in the loop knows its instruction finished (it decides no wait of the loop; a unit
    idle in the loop, one never learning of it, kept it alive), or, where waits are
    decided from direct knowledge only (``not em.transitive``), where no access of the
    loop's iterations meets it (:func:`_out_of_the_way`)."""
    s1, s2 = snaps[-2:]
    if set(s1.history) != set(s2.history):
        return False
    before = snaps[0].start
    starts = [s.start for s in snaps]
    same: dict[int, bool] = {}  # iteration -> is it the iteration before the last, moved

    def like_last(t: int) -> bool:
        if t not in same:
            same[t] = _moved_back(em, snaps, t, deltas)
        return same[t]

    users = _users(em, s2)
    for buf, recs in s1.history.items():
        moved, still = [], []
        for (u, idx, lo, hi, w, by) in recs:
            if by < before and (not em.transitive or all(
                    s1.clock[x][u] >= idx for x in users.get(buf, ()) if x != u)):
                still.append((u, idx, lo, hi, w, by))
                continue
            t = bisect.bisect_right(starts, by) - 1
            if t < 0 or t < len(snaps) - 2 - HISTORY_ITERATIONS or by >= s1.end or not like_last(t):
                return False
            d = deltas[by - snaps[t].start] if buf in _SHIFTING_BUFFERS else 0
            moved.append((u, idx + c[u], lo + d, hi + d, w, by + L))
        if still and not em.transitive and not _out_of_the_way(em, s2, deltas, buf, still, i, n):
            return False
        if sorted(moved + still) != s2.history[buf]:
            return False
    return True


def _users(em: Emitter, s2: _Snap) -> dict[str, set[int]]:
    """Per buffer: the units whose words in the steady iteration ``s2`` access it."""
    users: dict[str, set[int]] = {}
    for at in range(s2.start, s2.end):
        unit = em.p.instrs[at].unit
        for a in em.trace.get(at, ()):
            if unit is not None and a.hi > a.lo:
                users.setdefault(a.buf, set()).add(int(unit))
    return users


def _out_of_the_way(em: Emitter, s2: _Snap, deltas: list[int], buf: str, recs: list[tuple],
                    i: int, n: int) -> bool:
    """Do records ``recs`` of ``buf`` (made before the loop) stay clear of every access of
    another unit to ``buf`` in the steady iteration ``i`` and the ones after it, up to
    ``n - 1`` (where one side writes)?"""
    for o, d in enumerate(deltas):
        at = s2.start + o
        unit = em.p.instrs[at].unit
        u = -1 if unit is None else int(unit)
        d = d if buf in _SHIFTING_BUFFERS else 0
        for a in em.trace.get(at, ()):
            if a.buf != buf or a.hi <= a.lo:
                continue
            lo, hi = a.lo + min(0, (n - 1 - i) * d), a.hi + max(0, (n - 1 - i) * d)
            for (v, _, rlo, rhi, w, _) in recs:
                if v != u and (w or a.write) and lo < rhi and rlo < hi:
                    return False
    return True


def _moving_ranges_apart(em: Emitter, s2: _Snap, deltas: list[int], i: int, n: int) -> bool:
    """External ranges moving by different steps never overlap (over iterations 0..n-1)
    where one of them is written."""
    hulls: dict[int, list[tuple[int, int, bool]]] = {}
    for o, d in enumerate(deltas):
        for a in em.trace.get(s2.start + o, ()):
            if a.buf in _SHIFTING_BUFFERS and a.hi > a.lo:
                lo = a.lo + min(-i * d, (n - 1 - i) * d)
                hi = a.hi + max(-i * d, (n - 1 - i) * d)
                hulls.setdefault(d, []).append((lo, hi, a.write))
    steps = sorted(hulls)
    for x, d1 in enumerate(steps):
        for d2 in steps[x + 1:]:
            for lo1, hi1, w1 in hulls[d1]:
                for lo2, hi2, w2 in hulls[d2]:
                    if (w1 or w2) and lo1 < hi2 and lo2 < hi1:
                        return False
    return True


def _moved_back(em: Emitter, snaps: list[_Snap], t: int, deltas: list[int]) -> bool:
    """Are iteration ``t``'s instructions (final now) those of the iteration before the
    last, moved back by the iterations between?"""
    st, s1 = snaps[t], snaps[-2]
    back = len(snaps) - 2 - t
    return st.end - st.start == s1.end - s1.start and all(
        _like(x, y, back * d) for x, y, d in zip(em.p.instrs[st.start:st.end], em.p.instrs[s1.start:s1.end], deltas))


def _carried(em: Emitter, s1: _Snap, s2: _Snap) -> dict[tuple[int, int], int] | None:
    """The tokens a steady iteration gives the next one (its words' signals in their
    final form, those of the iteration before the last, less the signals the last
    iteration's words have now): how many per channel ``(v, u)``.  ``None`` where the last
    iteration cannot give them too and stay in the loop: on a channel where it gives one
    of its own tokens after a carried one (tokens of a channel are given in program
    order), or where the carried tokens would fill more than half of what a channel holds
    beside the two tokens double buffering keeps in flight, until a later wait takes them.
    ``None`` as well unless the emitter folds loops (``fold``)."""
    if not em.fold:
        return None
    fin = em.p.instrs[s1.start:s1.end]
    carried: dict[tuple[int, int], int] = {}
    for ins, now in zip(fin, s2.cur):
        if not ins.signal:
            continue
        v = int(ins.unit)
        for t in ins.signal:
            u = int(t)
            if t not in now.signal:
                carried[(v, u)] = carried.get((v, u), 0) + 1
            elif carried.get((v, u)):
                return None
    room = (em.cfg.token_depth - 2) // 2  # double buffering keeps up to 2 tokens in flight
    for (v, u), x in carried.items():
        if em.signals[v][u] - em.waits[v][u] + x > room:
            return None
    return carried


def _fast_forward(em: Emitter, snaps: list[_Snap], plan: _Plan, m: int) -> None:
    """Replace the steady iteration (the last of ``snaps``, i) by a ``loop`` over it and
    the iterations after it (i..n-1); the loop also takes in the iterations before i that
    are the steady one moved (their words are final).  The last iteration gives the
    tokens its next one would have taken (:func:`_carried`): later waits take them, and the
    loop's words are sealed (later tokens from them come from carriers, see
    :mod:`.emit`).  Where it cannot, the last iteration (n-1) stays flat after the loop,
    taking the signals later code adds.  Move the emitter's state to after the last
    iteration."""
    p = em.p
    s1, s2 = snaps[-2:]
    L, sB = s2.end - s2.start, s2.start
    deltas, c, s = plan.deltas, plan.c, plan.s
    carried = _carried(em, s1, s2)
    fold = int(carried is not None)
    first = len(snaps) - 2  # the loop's first iteration
    while first > 0 and _moved_back(em, snaps, first - 1, deltas) \
            and m + len(snaps) - first + fold <= _MAX_COUNT:
        first -= 1
    s0 = snaps[first]

    def moved(ins: Instr, d: int, k: int, walk: int | None = None) -> Instr:
        if not d:
            return ins
        args = {**ins.args, "ext": (ins.args["ext"] + k * d) & 0xFFFFFFFF}
        if walk is not None:
            args["walk"] = walk
        return Instr(ins.op, args, ins.wait, ins.signal)

    body = [moved(ins, d, 0, walk=1) for ins, d in zip(p.instrs[s0.start:s0.start + L], deltas)]
    last = [] if fold else [moved(ins, d, m) for ins, d in zip(p.instrs[sB:sB + L], deltas)]
    count = m + len(snaps) - 1 - first + fold  # iterations first .. n-2, or .. n-1
    head = isa.make("loop", count=count, body=L, **{f: plan.incs[st] for st, f in STREAMS.items()})
    tags = p.tags[sB:sB + L]
    p.instrs[s0.start:] = [head] + body + last
    p.tags[s0.start:] = [tags[0]] + tags + (tags if last else [])
    # B's word -> the word standing for it in the last iteration: the last copy's, or the body's
    new = lambda idx: s0.start + 1 + (0 if fold else L) + (idx - sB)  # noqa: E731

    pending = {(v, u): k for (v, u), k in s2.pending.items() if k is not None and c[v]}
    for idx in range(s0.start, s2.end):  # the words replaced
        for u in range(NU):
            em.signal_of.pop((idx, u), None)
    if not fold:
        for (v, u), k in pending.items():
            em.signal_of[(new(s2.last[v]), u)] = k + m * s[v][u]
    for (v, u), lst in em.sig_list.items():
        sv = s[v][u]
        tail = lst.items[-sv:] if sv else []
        # tokens before the channel's latest wait are not read again (emit.TokenLog)
        lst.extend_moved(tail, c, m, keep_from=em.waits[v][u] + (m - 2) * sv - 1)
        if fold and carried.get((v, u)):  # the last iteration's carried tokens: the ones the
            # iteration before gave (they open its block of tokens), one iteration on
            for e in tail[:carried[(v, u)]]:
                lst.append(_shift(e, c, m + 1))
            em.signals[v][u] += carried[(v, u)]
            _note_credits(em, v, u, body)
    for u in range(NU):
        em.count[u] += m * c[u]
        em.direct[u] = [x + m * d if mv else x for x, d, mv in zip(em.direct[u], c, plan.moving[u])]
        if c[u]:
            em.clock[u] = list(_shift(em.clock[u], c, m))
            em.last[u] = new(em.last[u])
            em.last_snap[u] = _shift(em.last_snap[u], c, m)
        for v in range(NU):
            em.signals[u][v] += m * s[u][v]
            em.waits[u][v] += m * s[u][v]
            if s[u][v]:  # v took a token from u in every iteration
                em.took_at[u][v] += m * c[u]
    em.nops += m * (s2.nops - s1.nops)
    em.sealed = s0.start + 1 + L  # the body's words take no further signals
    for v in range(NU):  # the body's words take no early waits either (emit._early_waits)
        for u in range(NU):
            words = em.unwaited[v][u]
            if any(ins.unit == isa.Unit(u) and isa.Unit(v) in ins.wait for ins in body):
                words.clear()
            else:
                words[:] = [w for w in words if w[0] < s0.start]
    if fold:
        for v in range(NU):  # the tokens the latest word of each unit gives: the last ones
            if c[v]:
                for t in p.instrs[em.last[v]].signal:
                    em.signal_of[(em.last[v], int(t))] = em.signals[v][int(t)]
    starts = [x.start for x in snaps]
    snap_at = [dict() for _ in range(NU)]  # the clocks after the words the records name
    for buf, recs in em.history.items():
        out = []
        for (u, idx, lo, hi, w, by) in recs:  # made by iterations the check found moved
            if by < starts[0]:  # or before the loop, out of its way
                out.append((u, idx, lo, hi, w, by))
                continue
            o = by - snaps[bisect.bisect_right(starts, by) - 1].start
            d = deltas[o] * m if buf in _SHIFTING_BUFFERS else 0
            out.append((u, idx + m * c[u], lo + d, hi + d, w, new(by) if by >= sB else -1))
            snap = em.snap_at[u].get(idx)
            if snap is not None:  # the word m iterations on knows what it knew, moved
                snap_at[u][idx + m * c[u]] = _shift(snap, c, m)
        em.history[buf] = out
    for u in range(NU):
        em.snap_at[u].update(snap_at[u])
