"""Pass: re-roll a segment's instruction stream into hardware loops (ISA ``loop``).

The kernels emit every tile and pixel group; this pass finds the repetitions and turns
them into ``loop`` bodies, so the ROM grows with the network, not with its tiles.

A run of ``r >= 2`` consecutive copies of a block of ``L`` items becomes one loop when the
copies are identical -- opcode, operands, tokens -- except for the ``ext`` of loads and
stores, and those change by the same amount from one copy to the next: one increment per
address stream (activations in, weights and parameters, activations out) for every load or
store of that stream that moves (the ``walk=1`` ones).  Copies followed by the first items
of one more copy (a row of ping-pong pixel-group pairs ending on the first half) become a
*rotated* loop: its body starts with the other items, and its first iteration enters the
body at the items the copy is cut to (ISA ``entry``).
Items are instructions or loops found by an earlier pass, so loops nest (up to
``LOOP_DEPTH``): each pass turns, at every position, the shortest repeating block into a
loop, and the next pass finds the repetitions of those loops; the passes allow bodies of
growing size, so the innermost repetitions everywhere are rolled up first.  Where that
leaves a repeating block with loops too deep to nest in another, the copies' innermost
loops are written out again and the copies rolled, if that saves words
(:func:`_shallow_loop`).  These choices are greedy, and so is rolling the innermost
repetitions to the deepest level everywhere (it can take the level a repetition of whole
blocks needed: shufflenet's units around their weight tiles, rows and pixel groups), so the
stream is also rolled without them, and with one level fewer; wherever the rollings are all
outside every loop having dispatched the same words, the shortest stretch between two such
points is kept (:func:`_splice`).

The result is exact by construction: the sequencer (:func:`snpu.verif.sequencer.unroll`)
dispatches the very instructions of the input, in order, tokens included, so the program's
behaviour is unchanged.  :func:`reroll` checks that before returning.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from snpu.verif import isa
from snpu.verif.isa import LOOP_DEPTH, Instr
from snpu.verif.sequencer import (FLIP_BITS, STREAMS, dispatch_arrays, dispatch_count, flipped,
                                  loop_depth, ping_pong, stream)

MAX_BODY = (1 << isa.OPCODE_BY_NAME["loop"].field("body").width) - 1
MAX_COUNT = (1 << isa.OPCODE_BY_NAME["loop"].field("count").width) - 1
MAX_ENTRY = (1 << isa.OPCODE_BY_NAME["loop"].field("entry").width) - 1
_INC = isa.OPCODE_BY_NAME["loop"].field("in_inc").width
INC_MIN, INC_MAX = -(1 << (_INC - 1)), (1 << (_INC - 1)) - 1
#: how many later occurrences of an item are tried as the period of a run starting at it
CANDIDATES = 12
#: the body-size limits of the successive passes
BODY_CAPS = (8, 32, 128, 512, 2048, MAX_BODY)
#: the emitter's loops that dispatch at most this many words are re-rolled from flat words
UNROLL_LIMIT = 1024


@dataclass
class Item:
    """A plain instruction, or a loop word with its body (``words``)."""

    words: list[Instr]
    key: int                     #: structure: equal keys mean equal but for ld / st ext and
    #: the halves of ping-pong operands
    exts: list[int]              #: ext of every ld / st word, in order
    depth: int                   #: loops nested in the item
    #: every ping-pong operand's kind and half, in order: ``kind << 1 | half``, the kind
    #: its bit of a ``flip`` mask (:data:`~snpu.verif.sequencer.FLIP_BITS`)
    halves: tuple[int, ...] = ()

    @property
    def size(self) -> int:
        return len(self.words)


class _Keys:
    """Structure keys: equal for instructions equal but for a load's or store's ext and,
    given ``halves`` (:func:`~snpu.verif.sequencer.half_sizes`), the halves of their
    ping-pong operands (which a ``flip`` loop alternates).  Also the run's settings:
    ``shallow``, whether inner loops too deep may be written out (:func:`_shallow_loop`),
    and how many loops were made so (``written_out``)."""

    def __init__(self, halves: dict[str, int] | None = None, shallow: bool = True):
        self.ids: dict = {}
        self.halves = halves
        self.shallow = shallow
        self.written_out = 0

    def of(self, token) -> int:
        return self.ids.setdefault(token, len(self.ids))


def _plain(ins: Instr, keys: _Keys) -> Item:
    halves = _halves_of([ins], keys.halves)
    if halves:
        ops = ping_pong(ins)
        ins_key = Instr(ins.op, {k: v & ~keys.halves[ops[k]] if k in ops else v
                                 for k, v in ins.args.items()}, ins.wait, ins.signal)
    else:
        ins_key = ins
    if ins.op in ("ld", "st"):
        args = tuple(v for k, v in ins_key.args.items() if k != "ext")
        return Item([ins], keys.of((ins.op, args, ins.wait, ins.signal)), [ins.args["ext"]], 0,
                    halves)
    return Item([ins], keys.of((ins.op, tuple(ins_key.args.values()), ins.wait, ins.signal)),
                [], 0, halves)


def _halves_of(words: list[Instr], halves: dict[str, int] | None) -> tuple[int, ...]:
    """The kind and half of every ping-pong operand of ``words``, in order (:attr:`Item.halves`;
    none without ``halves``)."""
    if halves is None:
        return ()
    return tuple(FLIP_BITS[b] << 1 | int(bool(w.args[f] & halves[b]))
                 for w in words for f, b in ping_pong(w).items())


def _flip_half(h: int, mask: int) -> int:
    """Kind and half ``h`` (:attr:`Item.halves`) after a flip of the kinds in ``mask``."""
    return h ^ int(bool(h >> 1 & mask))


def _flip_between(a: list[int], b: list[int]) -> int | None:
    """Halves ``b`` after halves ``a``: the ``flip`` mask of the kinds whose every operand
    alternates (the others' all stay); ``None`` if some of a kind do and some do not."""
    if a == b:
        return 0
    moved: dict[int, int] = {}
    for x, y in zip(a, b):
        if moved.setdefault(x >> 1, (x ^ y) & 1) != (x ^ y) & 1:
            return None
    return sum(kind for kind, m in moved.items() if m)


def _flips(items: list[Item], p: int, L: int, r: int) -> tuple[int, int]:
    """For ``r`` copies of ``items[p:p+L]``: how many leading copies keep the halves of
    their ping-pong operands as the first copy's, or alternate every one of them from copy
    to copy (a ``flip`` loop), and the kinds that alternate (a ``flip`` mask)."""
    def halves(k):
        return [h for it in items[p + k * L:p + (k + 1) * L] for h in it.halves]

    first = halves(0)
    if r < 2 or not first:
        return r, 0
    second = halves(1)
    flip = _flip_between(first, second)
    if flip is None:
        return 1, 0
    for k in range(2, r):
        if halves(k) != (second if k % 2 and flip else first):
            return k, flip
    return r, flip


def _steps(items: list[Item], p: int, L: int, r: int) -> tuple[int, list[int]]:
    """For ``r`` copies of ``items[p:p+L]``: how many leading copies keep every ld / st ext
    stepping by the same amount from one copy to the next, and those steps."""
    def exts(k):
        return [e for it in items[p + k * L:p + (k + 1) * L] for e in it.exts]

    prev, steps = exts(0), None
    for k in range(1, r):
        cur = exts(k)
        d = [c - q for c, q in zip(cur, prev)]
        if steps is None:
            steps = d
        elif d != steps:
            return k, steps
        prev = cur
    return r, steps or []


def _plan(body: list[Instr], steps: list[int]):
    """The increment of every stream and the walk flag of every ld / st word of ``body`` (in
    order) for a loop whose copies move them by ``steps``; ``None`` if no increments can.

    A word walks when it moves (its step is its stream's increment); a word that walks
    already (an inner loop moves it) must step by the increment too; a word under an inner
    loop that moves its stream cannot start walking (it would move with the inner loop)."""
    inner = _inner_moves(body)
    mem = [(k, w, stream(w)) for k, w in enumerate(body) if w.op in ("ld", "st")]
    inc: dict[str, int | None] = {s: None for s in STREAMS}
    for (k, w, s), d in zip(mem, steps):
        if d or w.args["walk"]:
            if inc[s] is not None and inc[s] != d:
                return None
            inc[s] = d
    walks = {}
    for (k, w, s), d in zip(mem, steps):
        if w.args["walk"]:
            walks[k] = 1
        elif d == 0:
            walks[k] = 0
        elif s in inner[k]:
            return None
        else:
            walks[k] = 1
    incs = {s: v or 0 for s, v in inc.items()}
    if not all(INC_MIN <= v <= INC_MAX for v in incs.values()):
        return None
    return incs, walks


def _inner_moves(body: list[Instr]) -> list[frozenset[str]]:
    """For every word of ``body``: the streams a loop of ``body`` enclosing it moves."""
    out, stack = [], []  # stack of (last word index, streams moved)
    moved: frozenset[str] = frozenset()  # the union over the stack
    for k, w in enumerate(body):
        if stack and stack[-1][0] < k:
            while stack and stack[-1][0] < k:
                stack.pop()
            moved = frozenset().union(*(m for _, m in stack))
        out.append(moved)
        if w.op == "loop":
            stack.append((k + w.body, frozenset(s for s, f in STREAMS.items() if w.args[f])))
            moved = moved | stack[-1][1]
    return out


def _loop(body_items: list[Item], r: int, steps: list[int], keys: _Keys,
          tail: int = 0, flip: int = 0) -> Item | None:
    """A loop running ``body_items`` ``r`` times, its lds / sts moving by ``steps`` per
    copy, with ``flip`` its ping-pong operands alternating halves; ``None`` if the
    increments cannot express the steps.  With ``tail``: the copies are followed by the
    first ``tail`` items of one more copy, which the loop runs too -- as a rotated loop
    whose first iteration enters at them (ISA ``entry``): its body is the other items (at
    the addresses and halves of the copy before the first), then those."""
    if tail:
        n_ext = sum(len(it.exts) for it in body_items[:tail])
        body_items = body_items[tail:] + body_items[:tail]
        steps = steps[n_ext:] + steps[:n_ext]
    body = [w for it in body_items for w in it.words]
    plan = _plan(body, steps)
    if plan is None:
        return None
    incs, walks = plan
    skipped = sum(it.size for it in body_items[:len(body_items) - tail]) if tail else 0
    if skipped > MAX_ENTRY:
        return None
    words = []
    for k, w in enumerate(body):
        if k in walks and (w.args["walk"] != walks[k] or (k < skipped and walks[k])):
            ext = w.args["ext"]
            if k < skipped and walks[k]:  # the first iteration skips it: one copy back
                ext = (ext - incs[stream(w)]) & 0xFFFFFFFF
            w = Instr(w.op, {**w.args, "ext": ext, "walk": walks[k]}, w.wait, w.signal)
        if k < skipped and flip:  # in the other half, one copy back
            w = flipped(w, keys.halves, flip)
        words.append(w)
    head = isa.make("loop", count=r + bool(tail), body=len(words), entry=skipped, flip=flip,
                    **{f: incs[s] for s, f in STREAMS.items()})
    key = keys.of(("loop", r, tuple(sorted(incs.items())), tuple(it.key for it in body_items),
                   tuple(sorted(walks.items())), skipped, flip))
    exts = [w.args["ext"] for w in words if w.op in ("ld", "st")]
    return Item([head] + words, key, exts, 1 + max(it.depth for it in body_items),
                _halves_of(words, keys.halves))


def _tail(items: list[Item], p: int, L: int, r: int, steps: list[int] | None = None,
          flip: int = 0) -> tuple[int, list[int] | None, int]:
    """How many items after ``r`` copies of ``items[p:p+L]`` (moving by ``steps``, their
    halves alternating with ``flip``) are the first items of one more copy (its lds / sts
    moved on by the same steps, its halves flipped again with ``flip``): the most fewer
    than ``L``, the steps and the flip; ``(0, None, 0)`` if none.

    With one copy (``steps`` unknown) the start of the next must be at least two words (a
    loop saves one) and fixes each stream's step and the flip; the rest of the block runs
    once, and only what walks already (under an inner loop) moves with it.  ``(0, None,
    0)`` as well if its loads and stores do not move by one step per stream, or its halves
    neither stay nor all alternate."""
    e = p + r * L
    last = items[e - L:e]
    for k in range(min(L - 1, len(items) - e), 0, -1):
        if [it.key for it in items[e:e + k]] != [it.key for it in last[:k]]:
            continue
        now = [x for it in items[e:e + k] for x in it.exts]
        before = [x for it in last[:k] for x in it.exts]
        h_now = [h for it in items[e:e + k] for h in it.halves]
        h_before = [h for it in last[:k] for h in it.halves]
        if steps is not None:
            if all(a == b + d for a, b, d in zip(now, before, steps)) \
                    and all(a == _flip_half(b, flip) for a, b in zip(h_now, h_before)):
                return k, steps, flip
            continue
        if sum(it.size for it in items[e:e + k]) < 2:
            break
        f = _flip_between(h_before, h_now)
        if f is None:
            return 0, None, 0
        mem = [w for it in last for w in it.words if w.op in ("ld", "st")]
        inc: dict[str, int] = {}
        for w, a, b in zip(mem, now, before):
            if (a - b or w.args["walk"]) and inc.setdefault(stream(w), a - b) != a - b:
                return 0, None, 0
        return k, ([a - b for a, b in zip(now, before)]
                   + [inc.get(stream(w), 0) if w.args["walk"] else 0 for w in mem[len(now):]]), f
    return 0, None, 0


def _compress(items: list[Item], depth_left: int, keys: _Keys, max_body: int,
              pairs: bool = False) -> list[Item]:
    """One pass: at every position, the shortest block of at most ``max_body`` words that
    repeats (with constant ext steps) becomes a loop, if that saves words; loops at most
    ``depth_left`` deep.  With ``pairs``, where no block repeats, one copy followed by the
    start of another becomes a rotated loop of two iterations (:func:`_tail`)."""
    ids = [it.key for it in items]
    where: dict[int, list[int]] = {}
    for k, i in enumerate(ids):
        where.setdefault(i, []).append(k)
    size_upto = [0]   # words of items[:k]
    deep_upto = [0]   # items of items[:k] too deep to nest in another loop here
    for it in items:
        size_upto.append(size_upto[-1] + it.size)
        deep_upto.append(deep_upto[-1] + (it.depth >= depth_left))
    out: list[Item] = []
    p, n = 0, len(items)
    while p < n:
        loop, span = None, 1
        fallback = None
        deep = None  # (L, r): the first block that repeats but holds loops too deep to nest
        occ = where[ids[p]]
        start = bisect.bisect_right(occ, p)
        for q in occ[start:start + CANDIDATES]:
            L = q - p
            words = size_upto[q] - size_upto[p]
            if (2 * L > n - p and not pairs) or L >= n - p or words > max_body:
                break
            block = ids[p:q]
            r = 1
            while (r < MAX_COUNT and p + (r + 1) * L <= n
                   and ids[p + r * L:p + (r + 1) * L] == block):
                r += 1
            if deep_upto[q] != deep_upto[p]:
                if keys.shallow and (r >= 2 or pairs) \
                        and (deep is None or (r >= 2 and deep[1] < 2)):
                    deep = (L, r)
                continue
            if r < 2:  # one copy and the start of another: a rotated loop of two iterations,
                # if no longer block repeats
                if pairs and fallback is None:
                    fallback = _pair(items, p, L, keys)
                continue
            run = _run(items, p, L, r, keys)
            if run is not None:
                loop, span = run
                break
        # where nothing else repeats: a too-deep block's copies with inner loops written
        # out, before a rotated pair; a too-deep rotated pair after one
        if loop is None and deep is not None and deep[1] >= 2:
            loop, span = _shallow_loop(items, p, *deep, depth_left, keys, max_body) or (None, 1)
        if loop is None and fallback is not None:
            loop, span = fallback
        if loop is None and deep is not None and deep[1] < 2:
            loop, span = _shallow_loop(items, p, *deep, depth_left, keys, max_body) or (None, 1)
        out.append(loop or items[p])
        p += span
    return out


def _run(items: list[Item], p: int, L: int, r: int, keys: _Keys,
         cut_ok=lambda span: True) -> tuple[Item, int] | None:
    """A loop over the leading copies of ``r`` copies of ``items[p:p+L]`` that step alike
    (:func:`_steps`, :func:`_flips`), with the start of one more copy where it follows
    (:func:`_tail`) and ``cut_ok`` accepts the items the loop would then span; returns the
    loop and how many items it spans, or ``None`` if fewer than two copies step alike or a
    loop would not save a word."""
    r, steps = _steps(items, p, L, r)
    r, flip = _flips(items, p, L, r)
    if r < 2 or (r - 1) * sum(it.size for it in items[p:p + L]) <= 1:
        return None
    tail = _tail(items, p, L, r, steps, flip)[0] if r < MAX_COUNT else 0
    loop = _loop(items[p:p + L], r, steps, keys, tail, flip) \
        if tail and cut_ok(r * L + tail) else None
    if loop is None:
        tail = 0
        loop = _loop(items[p:p + L], r, steps, keys, 0, flip)
    return (loop, r * L + tail) if loop is not None else None


def _pair(items: list[Item], p: int, L: int, keys: _Keys,
          cut_ok=lambda span: True) -> tuple[Item, int] | None:
    """One copy of ``items[p:p+L]`` and the start of another as a rotated loop of two
    iterations (:func:`_tail`), where ``cut_ok`` accepts the items it spans; returns the
    loop and how many items it spans, or ``None``."""
    tail, steps, flip = _tail(items, p, L, 1)
    two = _loop(items[p:p + L], 1, steps, keys, tail, flip) \
        if tail and cut_ok(L + tail) else None
    return (two, L + tail) if two is not None else None


def _shallow_loop(items: list[Item], p: int, L: int, r: int, depth_left: int, keys: _Keys,
                  max_body: int) -> tuple[Item, int] | None:
    """A loop over ``r`` copies of ``items[p:p+L]`` (one copy and the start of another:
    a rotated loop of two iterations) that hold loops too deep to nest in another loop (an
    inner repetition was rolled up first, and the blocks around it repeat too): the
    too-deep items with their innermost loops written out (:func:`_shallower`), if the
    loop then has fewer words than what it replaces.  Returns the loop and how many items
    it replaces, or ``None``."""
    flat: list[Item] = []
    ends = {0: 0}  # flat items -> the items they write out (at the items' boundaries)
    for j in range(min(len(items) - p, (r + 1) * L)):
        it = items[p + j]
        try:
            flat += _shallower(it, depth_left - 1, keys) if it.depth >= depth_left else [it]
        except _EntryInside:
            return None
        ends[len(flat)] = j + 1
    Lf = next(f for f, j in ends.items() if j == L)
    if any([it.key for it in flat[k * Lf:(k + 1) * Lf]] != [it.key for it in flat[:Lf]]
           for k in range(1, r)) or sum(it.size for it in flat[:Lf]) > max_body:
        return None
    made = (_run(flat, 0, Lf, r, keys, ends.__contains__) if r >= 2
            else _pair(flat, 0, Lf, keys, ends.__contains__))
    if made is None:
        return None
    loop, span = made[0], ends[made[1]]
    if loop.size >= sum(it.size for it in items[p:p + span]):
        return None
    keys.written_out += 1
    return loop, span


def _shallower(it: Item, depth: int, keys: _Keys) -> list[Item]:
    """Item ``it`` at most ``depth`` loops deep: its innermost loops written out (each
    iteration's words as the loop dispatches them, walk flags kept), as often as needed;
    the result's items (plain instructions or one loop)."""
    words = it.words
    while loop_depth(words) > depth:
        words = _expand_innermost(words, keys.halves)
    out, k = [], 0
    while k < len(words):
        w = words[k]
        n = 1 + w.body if w.op == "loop" else 1
        part = words[k:k + n]
        if w.op == "loop":
            out.append(Item(part, keys.of(("shallow", tuple(_plain(x, keys).key for x in part))),
                            [x.args["ext"] for x in part if x.op in ("ld", "st")],
                            loop_depth(part), _halves_of(part, keys.halves)))
        else:
            out.append(_plain(w, keys))
        k += n
    return out


class _EntryInside(Exception):
    """A loop enters its body inside an inner loop (:func:`_expand_innermost`)."""


def _expand_innermost(words: list[Instr], halves: dict[str, int] | None) -> list[Instr]:
    """``words`` with every loop that holds no loop written out: its iterations' words as
    dispatched (the first from its entry), walk flags kept, so that the loops around them
    still move them; an enclosing loop's entry is moved to the same word."""
    out, k = [], 0
    while k < len(words):
        w = words[k]
        if w.op != "loop":
            out.append(w)
            k += 1
            continue
        body = words[k + 1:k + 1 + w.body]
        if any(x.op == "loop" for x in body):
            inner, entry = [], None
            j = 0
            while j < len(body):  # expand item by item, to find where the entry lands
                if j == w.args["entry"]:
                    entry = len(inner)
                n = 1 + body[j].body if body[j].op == "loop" else 1
                inner += _expand_innermost(body[j:j + n], halves)
                j += n
            if w.args["entry"] and entry is None:
                raise _EntryInside()  # (the re-roller's entries start items: not met)
            args = {**w.args, "body": len(inner), "entry": entry or 0}
            out.append(Instr("loop", args, w.wait, w.signal))
            out += inner
        else:
            out += _iterations(w, body, halves)
        k += 1 + w.body
    return out


def _iterations(loop: Instr, body: list[Instr], halves: dict[str, int] | None) -> list[Instr]:
    """The words ``loop`` dispatches from its flat ``body`` (the first iteration from its
    entry), each as :func:`_walked` gives it (walk flag kept)."""
    inc = {s: loop.args[f] for s, f in STREAMS.items()}
    return [_walked(x, inc, t, loop.args["flip"], halves)
            for t in range(loop.args["count"])
            for x in body[loop.args["entry"] if t == 0 else 0:]]


def reroll(instrs: list[Instr], *, max_depth: int = LOOP_DEPTH,
           halves: dict[str, int] | None = None) -> list[Instr]:
    """Instruction stream (ending in ``halt``; it may hold loops already, e.g. the ones
    :func:`~snpu.compiler.emit_loops.repeat` emits, entered at their first word) -> the same
    stream with hardware loops.  Given ``halves`` (the core's,
    :func:`~snpu.verif.sequencer.half_sizes`), copies whose ping-pong operands alternate
    halves become ``flip`` loops."""
    for k, w in enumerate(instrs):
        if w.op == "loop" and w.args["entry"]:
            raise ValueError(f"reroll: the loop at word {k} has an entry (the input's loops "
                             "are the emitter's, entered at their first word)")
    words = _absorb_copies(_unroll_small(instrs, halves=halves), halves)
    out: list[Instr] | None = None
    # the choices are greedy: a loop made so can cost a better one, and the deepest loops
    # everywhere can take the level a repetition of whole blocks needed; where another
    # choice rolled a stretch into fewer words, that stretch is taken from it
    for depth in sorted({max(1, max_depth - 1), max_depth}):
        for shallow in (True, False):
            keys = _Keys(halves, shallow)
            got = [w for it in _roll(_items(words, keys, depth), depth, keys) for w in it.words]
            out = got if out is None else _splice(out, got)
            if not keys.written_out:
                break  # no loop was written out: without that choice it is the same
    if not same_stream(out, instrs, halves):
        raise AssertionError("re-rolled program does not unroll to the original stream")
    return out


def _top_level(words: list[Instr]) -> dict[int, int]:
    """For every word of ``words`` outside every loop body, and for the end: how many
    instructions the words before it dispatch -> its index (the first, where loops that
    dispatch nothing share a count)."""
    out: dict[int, int] = {}
    n = k = 0
    while k < len(words):
        out.setdefault(n, k)
        span = 1 + (words[k].args["body"] if words[k].op == "loop" else 0)
        n += dispatch_count(words[k:k + span])
        k += span
    out.setdefault(n, k)
    return out


def _splice(a: list[Instr], b: list[Instr]) -> list[Instr]:
    """Two re-rollings of one stream -> the shorter of the two between every two points
    where both are outside every loop, having dispatched the same instructions (a layer
    where the one rolled better, the next where the other did).  Exact: a word outside
    every loop is dispatched as written, and a loop with all of its body."""
    ta, tb = _top_level(a), _top_level(b)
    common = sorted(set(ta) & set(tb))
    out: list[Instr] = []
    for n0, n1 in zip(common, common[1:]):
        out += min(a[ta[n0]:ta[n1]], b[tb[n0]:tb[n1]], key=len)
    return out


def _roll(items: list[Item], max_depth: int, keys: _Keys) -> list[Item]:
    # bodies of growing size: every inner repetition is rolled up before the blocks that
    # contain it are compared (a row's pixel groups before the rows)
    # then, once nothing repeats, a copy followed by the start of another is a rotated loop
    # of two iterations (taken earlier, such pairs would cut runs that start a little later)
    for cap, pairs in [(c, False) for c in BODY_CAPS] + [(MAX_BODY, True)]:
        while True:
            smaller = _compress(items, max_depth, keys, cap, pairs)
            if len(smaller) == len(items):
                break
            items = smaller
    return items


def _unroll_small(words: list[Instr], limit: int | None = None,
                  halves: dict[str, int] | None = None) -> list[Instr]:
    """Write out the flat-bodied loops that dispatch at most ``limit`` words: the emitter
    starts its loops on iteration boundaries, once its tokens are steady; re-rolled from
    the flat words, the loop can start where the repetition does (often a few words into
    the first iteration), and the code around it can join it."""
    limit = UNROLL_LIMIT if limit is None else limit
    out, k = [], 0
    while k < len(words):
        w = words[k]
        body = words[k + 1:k + 1 + w.body] if w.op == "loop" else []
        if w.op != "loop" or w.args["count"] * w.body > limit or any(x.op == "loop" for x in body):
            out.append(w)
            k += 1
            continue
        out += [_unwalked(x) for x in _iterations(w, body, halves)]
        k += 1 + w.body
    return out


def _absorb_copies(words: list[Instr], halves: dict[str, int] | None = None) -> list[Instr]:
    """Loops with a flat body (the emitter's, :mod:`~snpu.compiler.emit_loops`) take in
    the copies of their body written out right before or after them: a copy equal to the
    body moved back by one iteration, or on by ``count`` iterations (walking loads and
    stores at ``ext`` plus that many increments, everything else the same)."""
    out, k = [], 0
    while k < len(words):
        w = words[k]
        if w.op != "loop" or any(x.op == "loop" for x in words[k + 1:k + 1 + w.body]):
            out.append(w)
            k += 1
            continue
        L, count = w.body, w.args["count"]
        body = list(words[k + 1:k + 1 + L])
        inc = {s: w.args[f] for s, f in STREAMS.items()}
        flip = w.args["flip"]
        while count < MAX_COUNT and len(out) >= L \
                and _is_copy(out[len(out) - L:], body, inc, -1, flip, halves):
            del out[len(out) - L:]
            body = [_walked(x, inc, -1, flip, halves) for x in body]
            count += 1
        k += 1 + L
        while count < MAX_COUNT and _is_copy(words[k:k + L], body, inc, count, flip, halves):
            k += L
            count += 1
        out.append(Instr("loop", {**w.args, "count": count}, w.wait, w.signal))
        out += body
    return out


def _walked(x: Instr, inc: dict[str, int], t: int, flip: int = 0,
            halves: dict[str, int] | None = None) -> Instr:
    """Body word ``x`` as iteration ``t`` of a loop with increments ``inc`` (and ``flip``)
    dispatches it (walk flag kept)."""
    if flip and t % 2:
        x = flipped(x, halves, flip)
    if x.op not in ("ld", "st") or not x.args["walk"]:
        return x
    return Instr(x.op, {**x.args, "ext": (x.args["ext"] + t * inc[stream(x)]) & 0xFFFFFFFF},
                 x.wait, x.signal)


def _is_copy(copy: list[Instr], body: list[Instr], inc: dict[str, int], t: int,
             flip: int = 0, halves: dict[str, int] | None = None) -> bool:
    """Is ``copy`` (flat words) iteration ``t`` of a flat loop ``body``?"""
    return len(copy) == len(body) and all(
        c == _unwalked(_walked(b, inc, t, flip, halves)) for c, b in zip(copy, body))


def _items(words: list[Instr], keys: _Keys, max_depth: int) -> list[Item]:
    """Items of ``words``: plain instructions, and each loop with its body re-rolled."""
    out, k = [], 0
    while k < len(words):
        w = words[k]
        if w.op != "loop":
            out.append(_plain(w, keys))
            k += 1
            continue
        body = _roll(_items(words[k + 1:k + 1 + w.body], keys, max_depth - 1), max_depth - 1, keys)
        one = _merged(w, body, keys)
        if one is not None:
            out.append(one)
            k += 1 + w.body
            continue
        inner = [x for it in body for x in it.words]
        head = Instr("loop", {**w.args, "body": len(inner)}, w.wait, w.signal)
        walks = tuple((j, x.args["walk"]) for j, x in enumerate(inner) if x.op in ("ld", "st"))
        key = keys.of(("loop", w.args["count"], tuple(w.args[f] for f in STREAMS.values()),
                       tuple(it.key for it in body), walks, w.args["flip"]))
        out.append(Item([head] + inner, key, [e for it in body for e in it.exts],
                        1 + max((it.depth for it in body), default=0),
                        tuple(h for it in body for h in it.halves)))
        k += 1 + w.body
    return out


def _merged(outer: Instr, body: list[Item], keys: _Keys) -> Item | None:
    """A loop whose re-rolled body is one loop of ``c`` iterations run from its start, each
    outer iteration moving its streams by ``c`` inner increments (an emitter's loop over
    row pairs around a flip loop over the two rows): one loop of ``count * c`` iterations,
    a nesting level fewer; ``None`` where it is not that."""
    if len(body) != 1 or body[0].words[0].op != "loop":
        return None
    inner = body[0].words[0]
    a, b = outer.args, inner.args
    c = b["count"]
    if (a["entry"] or b["entry"] or a["flip"] or not c or (b["flip"] and c % 2)
            or a["count"] * c > MAX_COUNT or any(a[f] != c * b[f] for f in STREAMS.values())):
        return None
    head = Instr("loop", {**b, "count": a["count"] * c}, inner.wait, inner.signal)
    return Item([head] + body[0].words[1:], keys.of(("merged", body[0].key, a["count"])),
                body[0].exts, body[0].depth, body[0].halves)


def same_stream(a: list[Instr], b: list[Instr], halves: dict[str, int] | None = None) -> bool:
    """Do programs ``a`` and ``b`` dispatch the same instructions (walk offsets and, with
    ``halves``, flips applied)?"""
    keys: dict = {}

    def key_of(w):
        return keys.setdefault(_plain_key(w), len(keys))

    def stream_of(words):
        key = np.array([key_of(w) for w in words], np.int64)
        idx, ext, flip = dispatch_arrays(words)
        if flip.any():
            if halves is None:
                raise ValueError("same_stream: flip loops need the buffer halves")
            out = key[idx]
            for mask in set(np.unique(flip).tolist()) - {0}:
                other = np.array([key_of(flipped(w, halves, mask)) for w in words], np.int64)
                out = np.where(flip == mask, other[idx], out)
            return out, ext
        return key[idx], ext

    (ka, ea), (kb, eb) = stream_of(a), stream_of(b)
    return len(ka) == len(kb) and bool(np.array_equal(ka, kb)) and bool(np.array_equal(ea, eb))


def _plain_key(w: Instr) -> tuple:
    return (w.op, tuple((k, v) for k, v in w.args.items() if k not in ("ext", "walk")),
            w.wait, w.signal)


def _unwalked(ins: Instr) -> Instr:
    """The instruction as dispatched, whatever its walk flag."""
    if ins.op in ("ld", "st") and ins.args["walk"]:
        return Instr(ins.op, {**ins.args, "walk": 0}, ins.wait, ins.signal)
    return ins


HALT = isa.make("halt")
