"""Instruction emission with automatic dependency tokens.

Kernels emit instructions and say which buffer ranges each one reads and writes (its
*footprint*: the same buffers as the golden model's race checker).  The emitter orders
every conflicting pair of accesses on different units with a token:

* it keeps, per unit, a vector clock: for every other unit, the latest of that unit's
  instructions known to have finished before this unit's next instruction starts;
* when a new instruction on unit ``u`` touches bytes that unit ``v``'s instructions
  touched (one of them writing) and ``u``'s clock does not cover the latest such
  instruction ``A``, ``u`` must wait for a token from ``v``.  With *latest* tokens (an
  array's programs, and the fallback below) the token is taken from ``v``'s latest
  instruction ``L`` (``L`` is at or after ``A``, so waiting for it is enough, and adding
  signals only to the newest instruction keeps each channel's token order equal to
  program order);
* with *precise* tokens (the default; :meth:`overlapped` in latest mode, for the fc
  kernel) the token is given by ``A`` itself when no later instruction of ``v`` gives
  ``u`` one yet (a channel's tokens stay in program order), or else by the first
  instruction at or after ``A`` that gives one.  That is what lets double buffering
  overlap: the load into one half waits for the compute two steps back that read it, not
  for the compute of the other half emitted in between, and every tile then waits the
  same way, so one tile is a flip loop's body (:mod:`.passes.reroll`).  It falls back to
  the latest instruction when ``A`` is a word of a hardware loop's body (*sealed*: a
  loop's body words are shared by its iterations, so later code must not add signals to
  them; with latest tokens, any word of a kernel's loop once the loop is over, so that
  emission with loops dispatches what flat emission does) or, inside a loop, before the
  previous iteration (every iteration's words then take signals from the next iteration
  only, which :mod:`.emit_loops` needs to prove a steady state) -- unless, with
  ``pre_loop``, ``A`` lies before the loop altogether: it is no iteration's word, and the
  loop's first iterations then wait as the steady ones do (the previous layer's last
  computes on each half), so the loop takes them in instead of leaving them flat.  Such a
  token may live long; the caller checks that no channel fills
  (:mod:`snpu.verif.token_flow`);
* with precise tokens a loop takes its last iteration in (``fold``): that iteration gives
  the tokens its next one would have taken (*credits*: the compute on each half tells the
  load two tiles on that the half is free); a loop left flat gives them from its last
  iteration just the same (:func:`.emit_loops._carry_flat`).  A write into a
  double-buffered buffer (:data:`CREDIT_BUFFERS`) takes such a token where its channel
  holds one and the instruction waits for nothing from that unit already
  (:meth:`_take_credits`): the next kernel's first tiles then wait as every later tile
  does, instead of waiting for nothing and leaving the credits for a later wait to skip
  with no-ops.  A credit goes only to a write into a buffer the words that would have
  taken it write (:attr:`credit_for`): a convolution's credits for its neuron loads wait
  through a batch norm's loads into the accumulators for the next convolution's; and only
  where the other unit emitted a word since this one last took one of its tokens
  (:attr:`took_at`: a sum's two loads of one tile wait for the same state of VX);
* a kernel about to start asks for credits of its own (:meth:`prime`): where its first
  write into a double-buffered buffer finds its unit knowing that the unit it will wait
  for tile after tile has finished its latest instruction, carriers on that unit leave
  the tokens its first two tiles take, so they wait as every later tile does (free: the
  carriers run after work already known finished) and the kernel is one loop;
* where the latest instruction is a word of a hardware loop's body (*sealed*: it gives
  the same tokens in every iteration) and does not give ``u`` a token already, a
  *carrier* takes its place: a ``cfg`` on ``v`` rewriting a register's value, signalling
  ``u``.  ``v`` runs its queue in order, so the carrier finishes after every earlier
  instruction of ``v``;
* where an instruction conflicts with several units, a wait that another of its waits
  implies is left out (by default, where units know what their tokens tell): the token
  from ``v`` is given after ``v``'s conflicting instruction, whose clock already covers
  ``w``'s conflicting instruction, so the token from ``w`` would order nothing new (a
  ``req`` reading parameters a load wrote and accumulators an fc wrote waits for the fc
  alone when the fc waited for a later load).  Fewer waits, fewer signals, and a layer's
  first tile waits like the later ones;
* a channel's ``k``-th wait takes its ``k``-th signal: if ``u`` has not yet taken the
  earlier signals of that channel, ``u``'s words emitted since its latest wait on the
  channel take them where that costs no time (:meth:`_early_waits`), else ``cfg`` no-ops
  on ``u`` take them first.  A loop's last
  iteration gives the tokens its next iteration would have taken; they stay in their
  channel until a later wait on it takes them, and :meth:`halt` takes every token left, so
  each program ends with its channels empty.

Waits only ever name instructions emitted earlier, so the in-order dispatcher cannot
deadlock on a full queue; the golden model's race checker verifies the result.

Three modes.  By default (``snpu compile --optimize size``, ``Emitter(credits=True)``)
tokens are precise, loops carry their credits out, writes take credits, and a unit knows
everything the tokens it took tell, transitively (a token from ``v`` tells what ``v``
knew), so it leaves out the waits that knowledge covers.  With ``overlap`` (``--optimize
speed``) a unit decides from the tokens it took itself only (``direct``): more waits,
more words, and on the zoo no fewer cycles since the default mode took precise tokens
(the zoo at weight density 0.5, ``bench/compiler.py`` at 736bff9: 0-0.8 % more cycles
and 19-64 % more words; squeezenet 529 words against 413).  With
neither (an array's programs; the default mode's fallback where a segment would deadlock
with precise tokens) every token comes from the other unit's latest instruction: a load
into one half of a double buffer then waits for the compute just issued on every other
tile, so loads and computes overlap less and a loop's body is two tiles (squeezenet at
weight density 0.5, random weights of seed 1: 8 % more cycles and 611 words against 530).
"""

from __future__ import annotations

import bisect
import contextlib
import operator
from dataclasses import dataclass


from snpu.config import CoreConfig
from snpu.verif import act_compress, isa, numerics
from snpu.verif.isa import IMPLEMENTED_UNITS, Instr, Unit
from snpu.verif.program import Program

from .emit_loops import repeat

UNITS = IMPLEMENTED_UNITS
NU = len(UNITS)


class TokenLog:
    """The tokens given on one channel, in order: token ``j`` (from 0) is the clock snapshot
    after the instruction that gives it, ``log[j]``.  A loop's fast-forward adds all its
    iterations' tokens (:meth:`extend_moved`) but keeps only the last ones: a token older
    than the channel's latest wait is never read again (the emitter asks for tokens it has
    not taken, and a loop's steady-state test reads from the latest wait on), so memory
    and time stay proportional to the instructions emitted, not to the iterations run."""

    __slots__ = ("base", "items")

    def __init__(self):
        self.base = 0       #: tokens forgotten (the first kept is token ``base``)
        self.items: list[tuple[int, ...]] = []

    def __len__(self) -> int:
        return self.base + len(self.items)

    def __getitem__(self, j: int) -> tuple[int, ...]:
        if j < 0:
            return self.items[j]
        if j < self.base:
            raise IndexError(f"token {j} was forgotten (the log keeps tokens {self.base} on)")
        return self.items[j - self.base]

    def append(self, snap: tuple[int, ...]) -> None:
        self.items.append(snap)

    def first_at_least(self, v: int, count: int) -> int:
        """The first kept token given after unit ``v``'s instruction ``count``."""
        return self.base + bisect.bisect_left(self.items, count, key=lambda s: s[v])

    def extend_moved(self, tail: list[tuple[int, ...]], c: list[int], m: int,
                     keep_from: int) -> None:
        """Append ``tail`` moved by 1, 2, .. ``m`` iterations (``c``: each unit's
        instructions per iteration), forgetting the tokens before ``keep_from``."""
        s = len(tail)
        if not s or m <= 0:
            return
        new_len = len(self) + m * s
        keep_from = max(self.base, min(keep_from, new_len - s))
        old_len = len(self)
        if keep_from > self.base:
            del self.items[:keep_from - self.base]
            self.base = keep_from
        first_k = 1 if keep_from <= old_len else (keep_from - old_len) // s + 1
        skip = max(0, keep_from - (old_len + (first_k - 1) * s))
        for k in range(first_k, m + 1):
            kc = [k * d for d in c]
            self.items.extend([tuple(map(operator.add, e, kc)) for e in tail[skip:]])
            skip = 0
        assert len(self) == new_len


_NO_TOKENS = TokenLog()


@dataclass
class Access:
    buf: str
    lo: int
    hi: int
    write: bool


#: which units can touch each buffer (the ISA's data paths): a history record of unit v is
#: dropped once every other unit that could touch its buffer knows v's instruction finished
BUFFER_USERS = {
    "ext": (Unit.LD, Unit.ST), "nbuf": (Unit.LD, Unit.MX), "nidx": (Unit.LD, Unit.MX),
    "wbuf": (Unit.LD, Unit.MX), "widx": (Unit.LD, Unit.MX), "param": (Unit.LD, Unit.VX),
    "acc": (Unit.LD, Unit.MX, Unit.VX), "obuf": (Unit.VX, Unit.ST),
    "local": (Unit.LD, Unit.ST, Unit.NET),
}
_UNIT = [Unit(u) for u in range(NU)]
#: the buffers kernels double-buffer tile by tile (a write into one takes a credit,
#: :meth:`Emitter._take_credits`); weights and parameters are loaded once per layer
CREDIT_BUFFERS = ("nbuf", "nidx", "acc", "obuf")
#: a buffer's history records beyond which one unit's records of nearby ranges (at most
#: ``HISTORY_GAP`` bytes apart) are merged (a unit that never learns of the others, such as
#: an idle network unit, would otherwise keep every record: emission time grows with the
#: square of the program)
HISTORY_CAP = 64
HISTORY_GAP = 1024
#: words per channel kept as candidates to take tokens in place of no-ops
UNWAITED_KEPT = 8


class Emitter:
    """Wraps a :class:`~snpu.verif.program.Program`; see the module docstring."""

    def __init__(self, program: Program, net: bool = False, loops: bool = True,
                 overlap: bool = False, pre_loop: bool = False, credits: bool = False):
        """``net``: the program uses the NET unit (``send`` / ``recv`` on an array), which
        reads and writes the same address space as LD and ST.  ``loops``: kernels' loops
        (:meth:`repeat`) may become hardware loops as they are emitted.  ``credits``: the
        default mode's tokens (module docstring: precise, carried out of loops, credits
        taken, units knowing what their tokens tell).  ``overlap``: the same, but units
        decide from the tokens they took themselves only (``--optimize speed``).  Neither:
        every wait from the other unit's latest instruction (an array's programs).
        ``pre_loop``: precise waits inside a loop may also take their tokens from words
        before the loop (module docstring); the caller checks the program for full
        channels (:mod:`snpu.verif.token_flow`)."""
        self.p = program
        self.loops = loops
        #: while a loop is emitted (:mod:`.emit_loops`): instruction index -> its footprint
        self.trace: dict[int, list[Access]] | None = None
        self.users = dict(BUFFER_USERS)
        if net:
            self.users["ext"] = (Unit.LD, Unit.ST, Unit.NET)
        self.cfg: CoreConfig = program.config
        self.count = [0] * NU                 # instructions emitted per unit
        self.last: list[int | None] = [None] * NU  # index in p.instrs of each unit's latest
        self.clock = [[0] * NU for _ in range(NU)]
        #: per unit: for every other unit, its latest instruction this unit took a token from
        self.direct = [[0] * NU for _ in range(NU)]
        self.last_snap: list[tuple[int, ...]] = [(0,) * NU] * NU  # clock after each latest
        self.signals = [[0] * NU for _ in range(NU)]
        self.waits = [[0] * NU for _ in range(NU)]
        self.signal_of: dict[tuple[int, int], int] = {}  # (instr index, consumer) -> k
        #: channel -> the clock snapshot after the instruction that gives each token
        self.sig_list: dict[tuple[int, int], TokenLog] = {}
        #: per buffer: (unit, its instruction count, lo, hi, write, index in p.instrs)
        self.history: dict[str, list[tuple[int, int, int, int, bool, int]]] = {}
        self.nops = 0
        #: per unit: its instruction count -> its clock after that instruction (for the
        #: instructions the history still names; emptied at the end of a kernel's loop, so
        #: the instructions before take no new signals)
        self.snap_at: list[dict[int, tuple[int, ...]]] = [{} for _ in range(NU)]
        #: inside a loop: the previous iteration's first instruction (see above)
        self.loop_floor = 0
        #: inside a loop: the outermost loop's first instruction (words before it are no
        #: iteration's, so a precise token may still come from them)
        self.loop_start: int | None = None
        #: waits take the token from the conflicting instruction (:meth:`overlapped`);
        #: else from the other unit's latest instruction
        self.precise = overlap or credits
        #: precise tokens inside a loop may come from words before it
        self.pre_loop = pre_loop
        #: decide waits from all a unit knows (tokens pass knowledge on), or only from the
        #: tokens it took itself (``overlap``)
        self.transitive = not overlap
        #: loops take their last iteration in, leaving its tokens to later code, and a
        #: write into a double-buffered buffer takes such a token (a credit: module
        #: docstring)
        self.fold = overlap or credits
        #: per channel holding credits: the buffers written by the words that would have
        #: taken them (:func:`.emit_loops._note_credits`)
        self.credit_for: dict[tuple[int, int], set[str]] = {}
        #: per channel ``v -> u``: ``u``'s words since its latest wait on the channel, each
        #: as (index, tokens given before it, what ``u`` knew of ``v`` after it), which may
        #: take tokens in place of no-ops (:meth:`_early_waits`)
        self.unwaited: list[list[list[tuple[int, int, int]]]] = [[[] for _ in range(NU)]
                                                                 for _ in range(NU)]
        #: per channel ``v -> u``: ``v``'s instruction count when ``u`` last took a token
        #: from it (a write with no word of ``v`` since takes no credit: one token covers both)
        self.took_at = [[-1] * NU for _ in range(NU)]
        #: channel ``(v, u)`` -> (buffer, tokens) a kernel about to start asked for
        #: (:meth:`prime`)
        self.priming: dict[tuple[int, int], tuple[str, int]] = {}
        #: inside a loop: the first instruction of the iteration being emitted
        self.iteration_start = 0
        self.in_loop = 0
        #: the words before this index (hardware loops and their bodies) take no new signals
        self.sealed = 0

    # -------------------------------------------------------------------------------------
    def cfgs(self, **values: int) -> None:
        """``cfgs(mx__nvec=4)`` sets ``mx.nvec`` (keyword ``__`` stands for ``.``); emits
        nothing for a register that already holds its value."""
        regs = self.p._regs
        for k, v in values.items():
            reg = _DOTTED.get(k) or _DOTTED.setdefault(k, k.replace("__", "."))
            if regs[reg] != v:
                self._emit_raw("cfg", [], reg=reg, value=int(v))

    def emit(self, op: str, accesses: list[Access], **args) -> Instr:
        return self._emit_raw(op, accesses, **args)

    def halt(self) -> None:
        """End the program, first taking every token still in a channel (a loop's last
        iteration leaves the tokens its next iteration would have taken): the core then
        halts with every channel empty, as it started."""
        for v in range(NU):
            for u in range(NU):
                while self.waits[v][u] < self.signals[v][u]:
                    self._nop(u, v)
        self.p.emit("halt")

    def prime(self, u: Unit, v: Unit, buf: str, n: int = 2) -> None:
        """A double-buffered kernel starts whose writes by ``u`` into ``buf`` wait, tile
        after tile, for ``v``'s access to that half two tiles back: let its first tiles
        wait as every later tile does, so that they join its loop.  At the kernel's first
        such write, where ``u`` then knows that ``v``'s latest instruction finished (the
        waits cost no time), carriers on ``v`` leave ``n`` tokens for the first ``n``
        writes, taken as credits (:meth:`_prime_now`).  Only with credits, and where the
        channel holds no credits for another buffer."""
        if self.fold:
            self.priming[(int(v), int(u))] = (buf, n)

    def _prime_now(self, u: int, accesses: list[Access], waits: list[Unit]) -> None:
        """The credits :meth:`prime` asked for, at the first write into their buffer."""
        for a in accesses:
            if not a.write or a.hi <= a.lo:
                continue
            for v in range(NU):
                plan = self.priming.get((v, u))
                if plan is None or plan[0] != a.buf:
                    continue
                del self.priming[(v, u)]
                have = self.signals[v][u] - self.waits[v][u]
                if have and a.buf not in self.credit_for.get((v, u), ()) \
                        or self.last[v] is None or self.clock[u][v] < self.count[v]:
                    continue
                for _ in range(plan[1] - (_UNIT[v] in waits) - have):
                    self._carrier(v, u)
                    self._signal_latest(v, u)
                self.credit_for[(v, u)] = self.credit_for.get((v, u), set()) | {a.buf}

    @contextlib.contextmanager
    def overlapped(self):
        """Within: waits take their tokens from the conflicting instruction itself (module
        docstring), so a software-pipelined kernel's loads overlap the compute before.
        Tokens are precise everywhere in the default and the speed mode; with latest
        tokens (an array's programs) the fc kernel opts in."""
        was, self.precise = self.precise, True
        try:
            yield
        finally:
            self.precise = was

    def repeat(self, n: int, body, state=lambda: None) -> None:
        """Emit ``body(0..n-1)``, a loop's iterations (differing only in the ``ext`` of
        their loads and stores, moving linearly): see :func:`.emit_loops.repeat`."""
        self.in_loop += 1
        try:
            repeat(self, n, body, state)
        finally:
            self.in_loop -= 1
        if not self.in_loop and not (self.fold and self.transitive):
            # later code takes no precise token from the loop's words (a formed loop's words
            # are sealed either way): with latest tokens, so that emission with loops
            # dispatches the stream flat emission does; in speed mode, whose units know
            # less, so that its tokens live shorter (two-token channels do not fill)
            self.snap_at = [{} for _ in range(NU)]

    # -------------------------------------------------------------------------------------
    def _unit(self, op: str, args: dict) -> Unit:
        if op == "cfg":
            return isa.REGISTER_BY_NAME[args["reg"]].unit if isinstance(args["reg"], str) \
                else isa.REGISTER_BY_NUMBER[args["reg"]].unit
        return isa.OPCODE_BY_NAME[op].unit

    def _learn(self, u: int, v: int, snap: tuple[int, ...]) -> None:
        """Unit ``u`` took a token from ``v`` given after ``v``'s clock was ``snap``: its
        next instruction starts after what ``snap`` knows, and in particular after ``v``'s
        instructions up to that one (``direct``)."""
        cu = self.clock[u]
        for k in range(NU):
            if snap[k] > cu[k]:
                cu[k] = snap[k]
        if snap[v] > self.direct[u][v]:
            self.direct[u][v] = snap[v]

    def _emit_raw(self, op: str, accesses: list[Access], **args) -> Instr:
        u = int(self._unit(op, args))
        need: dict[int, tuple[int, int]] = {}  # unit -> (count, index) of the latest conflict
        cu = self.clock[u] if self.transitive else self.direct[u]
        history = self.history
        for a in accesses:
            alo, ahi, aw = a.lo, a.hi, a.write
            if ahi <= alo:
                continue
            for (v, idx, lo, hi, w, at) in history.get(a.buf, ()):
                if v == u or cu[v] >= idx or hi <= alo or ahi <= lo or not (w or aw):
                    continue
                if idx > need.get(v, (0, 0))[0]:
                    need[v] = (idx, at)
        if len(need) > 1 and self.transitive:
            need = self._reduce(need)
        waits = []
        for v in sorted(need):
            waits.append(_UNIT[v])
            k, snap = self._signal_for(v, u, *need[v])
            self._skip_to(u, v, k - 1)  # take the channel's earlier tokens first
            self.waits[v][u] += 1
            self.took_at[v][u] = self.count[v]
            self._learn(u, v, snap)
        if self.fold and op != "cfg":
            if self.priming:
                self._prime_now(u, accesses, waits)
            self._take_credits(u, accesses, waits)
        if op == "cfg":
            reg = args["reg"]
            instr = self.p.emit("cfg", reg=reg, value=args["value"], wait=waits)
            self.p._regs[reg if isinstance(reg, str) else isa.REGISTER_BY_NUMBER[reg].name] = args["value"]
        else:
            instr = self.p.emit(op, wait=waits, **args)
        self._after(u, accesses)
        return instr

    def _take_credits(self, u: int, accesses: list[Access], waits: list[Unit]) -> None:
        """For each write into a double-buffered buffer (:data:`CREDIT_BUFFERS`): where a
        channel from another unit touching that buffer holds a token no wait took yet, and
        the instruction waits for nothing from that unit already, take it (append to
        ``waits``).  A loop's last iteration leaves such tokens (the ones its next
        iteration would have taken, ``fold``); the next kernel's first tiles take them as
        its steady tiles take theirs, instead of waiting for nothing and leaving them for a
        later wait to skip with no-ops.  The token's signal is on an instruction emitted
        earlier, so the wait cannot deadlock the dispatcher; it makes the instruction start
        after that one finishes (an older compute, done in the steady state)."""
        for a in accesses:
            if not a.write or a.hi <= a.lo or a.buf not in CREDIT_BUFFERS:
                continue
            for unit in self.users.get(a.buf, ()):
                v = int(unit)
                if v != u and unit not in waits and self.signals[v][u] > self.waits[v][u] \
                        and a.buf in self.credit_for.get((v, u), ()) \
                        and self.count[v] > self.took_at[v][u]:
                    waits.append(unit)
                    self._take_next(u, v)

    def _reduce(self, need: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
        """Drop the waits another wait implies: a token from ``v`` is given after ``v``'s
        conflicting instruction, whose clock already covers ``w``'s conflict."""
        need = dict(need)
        for w in sorted(need):
            cw = need[w][0]
            for v, (cv, _) in need.items():
                if v == w:
                    continue
                snap = self.snap_at[v].get(cv)
                if snap is not None and snap[w] >= cw:
                    del need[w]
                    break
        return need

    def _after(self, u: int, accesses: list[Access]) -> None:
        k = len(self.p.instrs) - 1
        self.count[u] += 1
        self.clock[u][u] = self.count[u]
        self.last[u] = k
        self.last_snap[u] = tuple(self.clock[u])
        waits = self.p.instrs[k].wait
        for v in range(NU):
            if v != u:
                words = self.unwaited[v][u]
                if _UNIT[v] in waits:
                    words.clear()
                else:
                    words.append((k, self.signals[v][u], self.clock[u][v]))
                    if len(words) > UNWAITED_KEPT:
                        del words[0]
        self.snap_at[u][self.count[u]] = self.last_snap[u]
        for a in accesses:
            if a.hi > a.lo:
                recs = self.history.setdefault(a.buf, [])
                # an older record of this unit inside the new one's range (and no write where
                # the new one only reads) adds nothing: whoever conflicts with it conflicts
                # with the new record, and waiting for the newer instruction covers the older
                if len(recs) > 8:
                    recs[:] = [r for r in recs if not (r[0] == u and a.lo <= r[2] and r[3] <= a.hi
                                                       and (a.write or not r[4]))]
                recs.append((u, self.count[u], a.lo, a.hi, a.write, k))
        if self.trace is not None:
            self.trace[k] = accesses
        if k % 128 == 0:
            self._prune()

    def _signal_for(self, v: int, u: int, count: int, index: int) -> tuple[int, tuple[int, ...]]:
        """The token ``u`` waits for so that ``v``'s instruction ``count`` (at ``index`` in
        the program) is done: its index ``k`` on the channel and ``v``'s clock after the
        instruction giving it (module docstring)."""
        given = self.sig_list.get((v, u), _NO_TOKENS)
        snap = self.snap_at[v].get(count)
        precise = (self.precise and snap is not None and index >= self.sealed
                   and (index >= self.loop_floor
                        or (self.pre_loop and self.loop_start is not None
                            and index < self.loop_start)))
        if (precise or self.fold) and given and given[-1][v] >= count:
            # an instruction at or after it gives one already (one added for an earlier
            # wait, or with ``fold`` a token a loop's last iteration left): the first such
            k = given.first_at_least(v, count)
            # a token taken already would not order anything new: the unit knows the
            # instruction (and the log forgets such tokens, TokenLog)
            assert k >= self.waits[v][u], f"token {k} on channel {v}->{u} was taken already"
            return k + 1, given[k]
        if not precise:
            return self._signal_latest(v, u), self.last_snap[v]
        old = self.p.instrs[index]
        self.p.instrs[index] = Instr(old.op, old.args, old.wait, old.signal | {_UNIT[u]})
        self.signals[v][u] += 1
        self.signal_of[(index, u)] = self.signals[v][u]
        self.sig_list.setdefault((v, u), TokenLog()).append(snap)
        return self.signals[v][u], snap

    def _signal_latest(self, v: int, u: int) -> int:
        """Index ``k`` of the token ``v``'s latest instruction gives ``u`` (adding it)."""
        li = self.last[v]
        key = (li, u)
        if key not in self.signal_of and li < self.sealed:
            self._carrier(v, u)
            li = self.last[v]
            key = (li, u)
        if key not in self.signal_of:
            old = self.p.instrs[li]
            self.p.instrs[li] = Instr(old.op, old.args, old.wait, old.signal | {_UNIT[u]})
            self.signals[v][u] += 1
            self.signal_of[key] = self.signals[v][u]
            self.sig_list.setdefault((v, u), TokenLog()).append(self.last_snap[v])
        return self.signal_of[key]

    def _token_cfg(self, u: int, wait: tuple[Unit, ...] = ()) -> None:
        """A ``cfg`` on unit ``u`` rewriting a register with the value it holds: it only
        carries tokens (counted in :attr:`nops`)."""
        reg = next(r for r in isa.REGISTERS if int(r.unit) == u)
        self.p.emit("cfg", reg=reg.name, value=self.p.reg(reg.name), wait=wait)
        self.nops += 1

    def _carrier(self, v: int, u: int) -> None:
        """A token ``cfg`` on unit ``v``, to give ``u`` a token after ``v``'s latest
        instruction (a sealed loop word); :meth:`_signal_latest` adds the signal."""
        self._token_cfg(v)
        self._after(v, [])

    def _skip_to(self, u: int, v: int, k: int) -> None:
        """Take the tokens of channel ``v -> u`` before token ``k`` that ``u`` has not taken
        (the next wait takes token ``k``).  Where words of ``u`` emitted since ``u``'s
        latest wait on the channel come after the signals of such tokens, they take them
        (:meth:`_early_waits`); ``cfg`` no-ops take the rest."""
        n = k - self.waits[v][u]
        if n > 0:
            for at in self._early_waits(u, v, n):
                old = self.p.instrs[at]
                self.p.instrs[at] = Instr(old.op, old.args, old.wait | {_UNIT[v]}, old.signal)
                self._take_next(u, v)
        while self.waits[v][u] < k:
            self._nop(u, v)

    def _early_waits(self, u: int, v: int, n: int) -> list[int]:
        """Up to ``n`` words of unit ``u`` to take the next tokens of channel ``v -> u``
        in order, in place of no-ops (:attr:`unwaited`): words after ``u``'s latest word
        taking a token of the channel, each after the word giving the token it takes
        (tokens are given in program order), none in a loop's body or in an earlier
        iteration of a loop being emitted (their words are compared and shared), and
        only where the earlier wait costs no time: ``u`` knew then that ``v``'s
        instruction giving the token had finished, or only words of ``u`` and ``v``
        follow it."""
        words = self.unwaited[v][u]
        first, log = self.waits[v][u], self.sig_list[(v, u)]
        lo, hi = self.loop_start, self.iteration_start
        usable = [w for w in words if lo is None or w[0] < lo or w[0] >= hi]
        chosen = usable[-n:]
        instrs, ours = self.p.instrs, (_UNIT[u], _UNIT[v])
        # from this word on only words of u and v: u runs its words in order and v's come
        # after the token's word in v's queue, so a wait there delays nothing
        own = len(instrs)
        while own > 0 and instrs[own - 1].unit in ours:
            own -= 1
        while chosen:
            if all(first + i < given and (log[first + i][v] <= knew or at >= own)
                   for i, (at, given, knew) in enumerate(chosen)):
                del words[:words.index(chosen[-1]) + 1]
                return [at for at, _, _ in chosen]
            chosen = chosen[1:]  # fewer, later words: each takes an earlier token
        return []

    def _nop(self, u: int, v: int) -> None:
        """A token ``cfg`` on unit ``u`` carrying a wait on ``v``."""
        self._token_cfg(u, (_UNIT[v],))
        self._take_next(u, v)
        self._after(u, [])

    def _take_next(self, u: int, v: int) -> None:
        """Unit ``u`` takes the next token of channel ``v -> u`` that it has not taken:
        it was given after the instruction holding that signal."""
        self.waits[v][u] += 1
        self.took_at[v][u] = self.count[v]
        self._learn(u, v, self.sig_list[(v, u)][self.waits[v][u] - 1])

    def _prune(self) -> None:
        """Drop history records every other unit that could touch their buffer knows; where
        more than ``HISTORY_CAP`` remain, merge each unit's records of nearby ranges."""
        for buf, recs in self.history.items():
            users = [int(x) for x in self.users.get(buf, _UNIT)]
            known = [min(self.clock[x][v] for x in users if x != v) for v in range(NU)]
            recs = [r for r in recs if r[1] > known[r[0]]]
            self.history[buf] = _coalesce(recs) if len(recs) > HISTORY_CAP else recs
        named = [set() for _ in range(NU)]
        for recs in self.history.values():
            for r in recs:
                named[r[0]].add(r[1])
        for v in range(NU):
            self.snap_at[v] = {c: s for c, s in self.snap_at[v].items() if c in named[v]}


def _coalesce(recs: list[tuple]) -> list[tuple]:
    """One record per unit, write flag and run of ranges at most ``HISTORY_GAP`` bytes
    apart: the union range with the newest instruction's count.  As safe as dropping a
    subsumed record (a conflict waits for the unit's latest instruction anyway; a unit's
    instructions finish in order); at worst an access falling in a gap waits needlessly."""
    out, groups = [], {}
    for r in recs:
        groups.setdefault((r[0], r[4]), []).append(r)
    for (u, w), rs in groups.items():
        rs.sort(key=lambda r: r[2])
        cur = list(rs[0])
        for r in rs[1:]:
            if r[2] <= cur[3] + HISTORY_GAP:
                cur[3] = max(cur[3], r[3])
                if r[1] > cur[1]:
                    cur[1], cur[5] = r[1], r[5]
            else:
                out.append(tuple(cur))
                cur = list(r)
        out.append(tuple(cur))
    out.sort(key=lambda r: r[1])
    return out


# ---------------------------------------------------------------------------------------------
# Footprints of the instructions kernels emit (bounding ranges, like the race checker)
# ---------------------------------------------------------------------------------------------


def span(base: int, n3: int, rows: int, cols: int, s3: int, s: int) -> tuple[int, int]:
    if n3 * rows * cols == 0:
        return base, base
    lo = base + min(0, (n3 - 1) * s3) + min(0, (rows - 1) * s)
    hi = base + max(0, (n3 - 1) * s3) + max(0, (rows - 1) * s) + cols
    return lo, hi


def _operands(op: str, **values: int) -> tuple[dict[str, int], dict[str, int]]:
    """How ``op`` reads the register values ``values`` (by operand name, e.g.
    ``src_stride=64``): (its register operands, the register writes left for ``cfgs``).
    A value goes in its operand where it fits (not 0: 0 means "the register"), else the
    operand is 0 and the register is written.  Every instruction of a kind carries its
    values the same way, whatever the registers hold, so a kernel's tiles stay alike (a
    first tile writing the register and later ones leaving it would not join their loop)."""
    fields = _OPERAND_FIELDS[op]
    operands, writes = {}, {}
    for name, value in values.items():
        f = fields[name]
        fits = 0 < value < (1 << f.width)
        operands[name] = value if fits else 0
        if not fits:
            writes[f.overrides.replace(".", "__")] = value
    return operands, writes


_OPERAND_FIELDS = {op: {f.name: f for f in fs} for op, fs in isa.REGISTER_OPERANDS.items()}

#: keyword -> register name for :meth:`Emitter.cfgs` (``mx__nvec`` -> ``mx.nvec``)
_DOTTED: dict[str, str] = {}


class Kernels(Emitter):
    """The emitter plus one method per instruction kind that sets the registers the
    instruction reads and derives its footprint from its operands."""

    P = property(lambda self: self.cfg.lanes)

    def ld(self, buf: str, ext: int, dst: int, cols: int, rows: int = 1, n3: int = 1, *,
           ext_stride: int = 0, dst_stride: int = 0, ext_stride3: int = 0, dst_stride3: int = 0,
           lane: int = 0, threshold: int | None = None,
           group: tuple[int, int, int] | None = None) -> None:
        """A 3-D load; into nbuf with ``threshold`` (and ``group`` = (size, t3, t4)) the
        sparse processing unit writes the neuron index as it loads."""
        if n3 * rows * cols == 0:
            return
        if buf in isa.BANKED_BUFFERS:
            if ext_stride or ext_stride3 or dst_stride3:
                raise ValueError(f"ld {buf}: the lane banks take consecutive bytes, one plane "
                                 "per lane at dst (no external or plane strides)")
            self.cfgs(ld__dst_stride=dst_stride if rows > 1 else self.p.reg("ld.dst_stride"))
        else:
            self.cfgs(ld__ext_stride=ext_stride if rows > 1 else self.p.reg("ld.ext_stride"),
                      ld__dst_stride=dst_stride if rows > 1 else self.p.reg("ld.dst_stride"),
                      ld__ext_stride3=ext_stride3 if n3 > 1 else self.p.reg("ld.ext_stride3"),
                      ld__dst_stride3=dst_stride3 if n3 > 1 else self.p.reg("ld.dst_stride3"))
        if buf == "nbuf":
            self.cfgs(ld__nidx_mode=int(threshold is not None))
            if threshold is not None:
                self.cfgs(ld__thresh=threshold,
                          ld__group_log2=group[0].bit_length() - 1 if group else 0)
                if group:
                    self.cfgs(ld__group_t3=group[1], ld__group_t4=group[2])
        e3, e1, d3, d1 = isa.ld_strides(buf, rows, cols, self.p.reg)
        e_lo, e_hi = span(ext, n3, rows, cols, e3, e1)
        d_lo, d_hi = span(dst, n3, rows, cols, d3, d1)
        acc = [Access("ext", e_lo, e_hi, False), Access(buf, d_lo, d_hi, True)]
        if buf == "nbuf" and threshold is not None:
            acc.append(Access("nidx", d_lo // 8, -(-d_hi // 8), True))
        self.emit("ld", acc, buf=buf, lane=lane, ext=ext, dst=dst, n3=n3, rows=rows, cols=cols)

    def st(self, src: int, ext: int, cols: int, rows: int = 1, n3: int = 1, *,
           src_stride: int = 0, ext_stride: int = 0, src_stride3: int = 0, ext_stride3: int = 0) -> None:
        if n3 * rows * cols == 0:
            return
        ops, writes = _operands("st", src_stride=src_stride) if rows > 1 else ({}, {})
        self.cfgs(**writes,
                  st__ext_stride=ext_stride if rows > 1 else self.p.reg("st.ext_stride"),
                  st__src_stride3=src_stride3 if n3 > 1 else self.p.reg("st.src_stride3"),
                  st__ext_stride3=ext_stride3 if n3 > 1 else self.p.reg("st.ext_stride3"))
        s_lo, s_hi = span(src, n3, rows, cols, self.p.reg("st.src_stride3"),
                          ops.get("src_stride") or self.p.reg("st.src_stride"))
        e_lo, e_hi = span(ext, n3, rows, cols, self.p.reg("st.ext_stride3"), self.p.reg("st.ext_stride"))
        self.emit("st", [Access("obuf", s_lo, s_hi, False), Access("ext", e_lo, e_hi, True)],
                  src=src, ext=ext, n3=n3, rows=rows, cols=cols, **ops)

    def stc(self, src: int, ext: int, cols: int, rows: int = 1, *, src_stride: int = 0) -> None:
        """A compressed store of ``rows`` output-cache rows; the stream's footprint is its
        bound (its length depends on the data)."""
        if rows * cols == 0:
            return
        self.cfgs(st__src_stride=src_stride if rows > 1 else self.p.reg("st.src_stride"))
        s_lo, s_hi = span(src, 1, rows, cols, 0, self.p.reg("st.src_stride"))
        bound = act_compress.stream_bound(rows, cols)
        self.emit("stc", [Access("obuf", s_lo, s_hi, False), Access("ext", ext, ext + bound, True)],
                  src=src, ext=ext, rows=rows, cols=cols)

    def ldc(self, buf: str, ext: int, dst: int, cols: int, rows: int = 1, *,
            dst_stride: int = 0) -> None:
        """Expand a compressed stream into acc, or into nbuf with its neuron index."""
        if rows * cols == 0:
            return
        self.cfgs(ld__dst_stride=dst_stride if rows > 1 else self.p.reg("ld.dst_stride"))
        d_lo, d_hi = span(dst, 1, rows, cols, 0, self.p.reg("ld.dst_stride"))
        bound = act_compress.stream_bound(rows, cols)
        acc = [Access("ext", ext, ext + bound, False), Access(buf, d_lo, d_hi, True)]
        if buf == "nbuf":
            acc.append(Access("nidx", d_lo // 8, -(-d_hi // 8), True))
        self.emit("ldc", acc, buf=buf, dst=dst, ext=ext, rows=rows, cols=cols)

    def fc(self, *, nbuf: int, n_in: int, rows: int, acc: int, wbuf: int, widx: int,
           wbytes: int, ibytes: int, nvec: int = 1, nstride: int = 0, nfmt: int = 1,
           wfmt: int = 1, accumulate: int = 0, acc_stride: int = 0, mixed: int = 0) -> None:
        """``mixed``: with one direct and one stride index, 0 expands the stride one to
        direct and ANDs (claim 9), 1 converts the direct one to stride and merges (claim 10).
        ``nvec`` goes in the fc's register operand where it fits (:func:`_operands`), so
        pixel groups of two sizes write no register between them."""
        nidx = nbuf // 8
        ops, writes = _operands("fc", nvec=nvec)
        self.cfgs(mx__nfmt=nfmt, mx__npacked=0, mx__wfmt=wfmt, **writes,
                  mx__mixed=mixed if {nfmt, wfmt} == {1, 2} else self.p.reg("mx.mixed"),
                  mx__nstride=nstride if nvec > 1 else self.p.reg("mx.nstride"),
                  mx__nidx_stride=nstride // 8 if nvec > 1 else self.p.reg("mx.nidx_stride"),
                  mx__acc_stride=acc_stride if nvec > 1 else self.p.reg("mx.acc_stride"))
        n_hi = nbuf + (nvec - 1) * nstride + n_in
        a_hi = acc + (nvec - 1) * acc_stride + rows
        accs = [Access("nbuf", nbuf, n_hi, False), Access("acc", acc, a_hi, True),
                Access("wbuf", wbuf, wbuf + wbytes, False), Access("widx", widx, widx + ibytes, False)]
        if nfmt:
            accs.append(Access("nidx", nidx, -(-n_hi // 8), False))
        if accumulate:
            accs.append(Access("acc", acc, a_hi, False))
        self.emit("fc", accs, nbuf=nbuf, nidx=nidx, wbuf=wbuf, widx=widx, acc=acc, n_in=n_in,
                  rows=rows, accumulate=accumulate, **ops)

    def _acc_span(self, base, n_o, so, n_i, extra=()):
        P = self.P
        lo = base + min(0, (n_o - 1) * so) + sum(min(0, e) for e in extra)
        hi = base + max(0, (n_o - 1) * so) + (n_i - 1) * P + P + sum(max(0, e) for e in extra)
        return lo, hi

    def vred(self, mode: str, dst: int, src: int, n_o: int, n_i: int, k1: int, k2: int, *,
             src_stride: int, dst_stride: int, k1_stride: int, k2_stride: int) -> None:
        ops, writes = _operands("vred", src_stride=src_stride, dst_stride=dst_stride)
        self.cfgs(**writes, vx__k1_stride=k1_stride, vx__k2_stride=k2_stride)
        s = self._acc_span(src, n_o, src_stride, n_i, ((k1 - 1) * k1_stride, (k2 - 1) * k2_stride))
        d = self._acc_span(dst, n_o, dst_stride, n_i)
        self.emit("vred", [Access("acc", *s, False), Access("acc", *d, True)], mode=mode, dst=dst,
                  src=src, n_o=n_o, n_i=n_i, k1=k1, k2=k2, **ops)

    def vew(self, dst: int, a: int, b: int, n_o: int, n_i: int, ma: int, mb: int, relu: int = 0, *,
            a_stride: int, b_stride: int, dst_stride: int) -> None:
        self._scaled_add("vew", [], dst, a, b, n_o, n_i, relu, a_stride, b_stride, dst_stride,
                         ma=ma, mb=mb)

    def vewp(self, dst: int, a: int, b: int, n_o: int, n_i: int, param: int, relu: int = 0, *,
             a_stride: int, b_stride: int, dst_stride: int) -> None:
        """:meth:`vew` with its multipliers in parameter row ``param``."""
        row = param * self.cfg.param_row_bytes
        multipliers = Access("param", row, row + numerics.EW_MULTIPLIER_BYTES, False)
        self._scaled_add("vewp", [multipliers], dst, a, b, n_o, n_i, relu, a_stride, b_stride,
                         dst_stride, param=param)

    def _scaled_add(self, op: str, reads: list[Access], dst: int, a: int, b: int, n_o: int,
                    n_i: int, relu: int, a_stride: int, b_stride: int, dst_stride: int,
                    **multipliers: int) -> None:
        """``vew`` / ``vewp``: the strides' registers, and the footprint (the two operands,
        ``reads``, the destination)."""
        self.cfgs(vx__src_stride=a_stride, vx__b_stride=b_stride, vx__dst_stride=dst_stride)
        self.emit(op, [Access("acc", *self._acc_span(a, n_o, a_stride, n_i), False),
                       Access("acc", *self._acc_span(b, n_o, b_stride, n_i), False), *reads,
                       Access("acc", *self._acc_span(dst, n_o, dst_stride, n_i), True)],
                  dst=dst, a=a, b=b, n_o=n_o, n_i=n_i, relu=relu, **multipliers)

    def req(self, dst: int, src: int, param: int, n_o: int, n_i: int, relu: int = 0, *,
            src_stride: int, dst_stride: int) -> None:
        """The strides go in the register operands where they fit (:func:`_operands`; so do
        ``vred``'s and ``st``'s): a requantisation then writes no VX register, and the
        batch norms, sums and poolings around it keep theirs."""
        ops, writes = _operands("req", src_stride=src_stride, dst_stride=dst_stride)
        self.cfgs(**writes)
        rb = self.cfg.param_row_bytes
        self.emit("req", [Access("acc", *self._acc_span(src, n_o, src_stride, n_i), False),
                          Access("obuf", *self._acc_span(dst, n_o, dst_stride, n_i), True),
                          Access("param", param * rb, (param + n_i) * rb, False)],
                  dst=dst, src=src, param=param, n_o=n_o, n_i=n_i, relu=relu, **ops)

    # The array's NET unit: addresses here are absolute (``isa.LOCAL_BASE + offset``), so
    # footprints share the "ext" address space with LD / ST and the emitter orders them.
    def send(self, x: int, y: int, src: int, dst: int, nbytes: int, tag: int, *,
             after: tuple[tuple[int, int], ...] = (),
             freed: tuple[tuple[int, int], ...] = ()) -> None:
        """Remote write of local bytes [src, src+nbytes) to core (x, y) at ``dst``, adding to
        its arrival counter ``tag``.  ``after``: further address ranges whose writes must
        be complete before the send starts (a flag for data left in shared memory);
        ``freed``: ranges whose reads and writes must be complete (a flag telling another
        core that it may write there), and that later accesses must not pass."""
        acc = ([Access("ext", src, src + nbytes, False)]
               + [Access("ext", lo, hi, False) for lo, hi in after]
               + [Access("ext", lo, hi, True) for lo, hi in freed])
        self.emit("send", acc, x=x, y=y, src=src - isa.LOCAL_BASE, dst=dst - isa.LOCAL_BASE,
                  bytes=nbytes, tag=tag)

    def recv(self, tag: int, dst: int, nbytes: int, *,
             covers: tuple[tuple[int, int], ...] = ()) -> None:
        """Wait for ``nbytes`` on counter ``tag`` (landing at local ``dst``); ``covers``:
        further address ranges the arrival makes readable (data in shared memory behind a
        flag), which later loads must wait for."""
        acc = [Access("ext", dst, dst + nbytes, True)] + [Access("ext", lo, hi, True)
                                                          for lo, hi in covers]
        self.emit("recv", acc, tag=tag, dst=dst - isa.LOCAL_BASE, bytes=nbytes)
