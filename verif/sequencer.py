"""The program sequencer and the instruction cache: which word is dispatched next.

This is the specification the RTL sequencer (``rtl/sequencer.py``) and instruction cache
(``rtl/icache.py``) implement; the golden model dispatches through it.

Sequencing
----------
Words are dispatched from ROM word 0 on.  A ``loop count body ld_inc st_inc`` word pushes a
*frame* (first word, last word, iterations left, iteration number, increments) and is not
dispatched to a unit; with ``count = 0`` its body is skipped.  The first iteration starts
``entry`` words into the body (a loop word it skips pushes no frame: the words of that inner
body it reaches run once, as plain words).  After the last word of the innermost frame's
body, the sequencer jumps back to the body's first word while iterations remain, else pops
the frame (and the enclosing frame may end on the same word).  A ``ld`` / ``st`` with ``walk
= 1`` is dispatched with ``ext`` plus, for every frame, the frame's iteration number times
its increment for the instruction's stream (:func:`stream`), modulo 2**32.  A loop with
a ``flip`` mask dispatches its body's words on its odd iterations with every ping-pong operand
(:func:`ping_pong`) of the flipped kinds -- bit 0 activations (nbuf, nidx, acc, obuf), bit 1
weights (wbuf, widx): :data:`FLIP_BITS` -- in the other half of its buffer
(:func:`flipped`); with nested flipping loops, a kind flips when an odd number of the loops
flipping it are on odd iterations.

Faults (``ILLEGAL`` at the word): dispatching at or past ``rom_words`` (running off the end
without ``halt``); an illegal word; a ``loop`` whose body would reach ``rom_words``, leave
its enclosing body, or nest deeper than :data:`~snpu.verif.isa.LOOP_DEPTH`.  (``body = 0``
is already an illegal word.)

Instruction cache
-----------------
Direct-mapped, ``lines`` lines of :data:`LINE_WORDS` words.  Every word the sequencer
presents (dispatched words and ``loop`` words alike) is one access: a *hit* if its line is
in the cache, else a *miss* that fills the line.  After each access, if the next line of
the ROM is not in the cache it is *prefetched* (filled in the background).  Hits, misses
and prefetches are exact counts the RTL reports too; each fill reads one line (64 bytes) of
external memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from snpu.errors import ExecutionError, IllegalInstruction

from . import isa, timing
from .isa import LOOP_DEPTH, Instr

LINE_WORDS = 4
LINE_BYTES = LINE_WORDS * 16


#: the address streams a loop walks, and the loop field holding each one's increment
STREAMS = {"in": "in_inc", "w": "w_inc", "out": "out_inc"}
_WEIGHT_BUFFERS = {isa.BUFFERS[b] for b in ("wbuf", "widx", "param")}


def stream(ins: Instr) -> str | None:
    """The address stream a ``ld`` / ``st`` walks: ``"in"`` (activations loaded into nbuf,
    nidx or acc), ``"w"`` (weights and parameters: wbuf, widx, param) or ``"out"`` (st)."""
    if ins.op == "st":
        return "out"
    if ins.op == "ld":
        return "w" if ins.args["buf"] in _WEIGHT_BUFFERS else "in"
    return None


#: per opcode, its ping-pong operands and the buffer each addresses (a load's ``dst``: by
#: the buffer it loads, :data:`PING_PONG_LOADS`)
PING_PONG = {"fc": {"nbuf": "nbuf", "nidx": "nidx", "acc": "acc", "wbuf": "wbuf", "widx": "widx"},
             "vred": {"dst": "acc", "src": "acc"}, "vew": {"dst": "acc", "a": "acc", "b": "acc"},
             "vewp": {"dst": "acc", "a": "acc", "b": "acc"},
             "req": {"src": "acc", "dst": "obuf"}, "st": {"src": "obuf"}, "stc": {"src": "obuf"}}
PING_PONG_LOADS = {isa.BUFFERS[b]: b for b in ("nbuf", "nidx", "acc", "wbuf", "widx")}
#: the bit of a loop's ``flip`` mask that moves each ping-pong buffer: the activations'
#: double buffers alternate tile by tile, the weights' weight tile by weight tile
FLIP_BITS = {"nbuf": 1, "nidx": 1, "acc": 1, "obuf": 1, "wbuf": 2, "widx": 2}


def ping_pong(ins: Instr) -> dict[str, str]:
    """The operands of ``ins`` a ``flip`` loop moves to the other half of their buffer, and
    each one's buffer (``nbuf``, ``nidx``, ``acc`` or ``obuf``)."""
    if ins.op in ("ld", "ldc"):
        b = PING_PONG_LOADS.get(ins.args["buf"])
        return {"dst": b} if b is not None else {}
    return PING_PONG.get(ins.op, {})


def half_sizes(config) -> dict[str, int]:
    """The size of half of each ping-pong buffer, in its operands' units (a power of two):
    what :func:`flipped` inverts."""
    return {"nbuf": config.nbuf_bytes // 2, "nidx": config.nbuf_bytes // 16,
            "acc": config.acc_elems // 2, "obuf": config.obuf_bytes // 2,
            "wbuf": config.wbuf_bytes // 2, "widx": config.widx_bytes // 2}


def flipped(ins: Instr, halves: dict[str, int], mask: int = 1) -> Instr:
    """``ins`` with every ping-pong operand of the kinds in ``mask`` (:data:`FLIP_BITS`) in
    the other half of its buffer (``halves``: :func:`half_sizes`)."""
    ops = {f: b for f, b in ping_pong(ins).items() if FLIP_BITS[b] & mask}
    if not ops:
        return ins
    return Instr(ins.op, {**ins.args, **{f: ins.args[f] ^ halves[b] for f, b in ops.items()}},
                 ins.wait, ins.signal)


def flip_now(frames: list["Frame"]) -> int:
    """The kinds of ping-pong operands (a :data:`FLIP_BITS` mask) the loops ``frames``
    dispatch in the other half now: those an odd number of them flip on odd iterations."""
    mask = 0
    for f in frames:
        if f.iteration % 2:
            mask ^= f.flip
    return mask


@dataclass
class Frame:
    start: int          #: first word of the body
    end: int            #: last word of the body
    left: int           #: iterations after the current one
    inc: dict[str, int]  #: bytes per iteration, per stream
    flip: int = 0       #: the kinds of ping-pong operands odd iterations flip (FLIP_BITS)
    iteration: int = 0


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    prefetches: int = 0

    @property
    def fill_bytes(self) -> int:
        return (self.misses + self.prefetches) * LINE_BYTES


@dataclass
class InstructionCache:
    """Direct-mapped cache state and the time each line's fill completes (the estimate)."""

    lines: int
    rom_words: int
    tags: list[int] = field(init=False)
    ready_at: list[int] = field(init=False)
    #: the external-memory port the fills share (with LD, and with other cores)
    bus: timing.SharedBus = field(default_factory=timing.SharedBus)
    #: the core whose fills these are (the port shares its time between cores)
    owner: object = None
    stats: CacheStats = field(default_factory=CacheStats)

    def __post_init__(self) -> None:
        self.tags = [-1] * self.lines
        self.ready_at = [0] * self.lines

    def _fill(self, line: int, t: int) -> None:
        k = line % self.lines
        self.tags[k] = line
        start = self.bus.read(t + timing.FETCH_LATENCY, timing.LINE_FILL_BEATS, self.owner,
                              lambda d: self._delayed(k, line, d))
        self.ready_at[k] = start + timing.LINE_FILL_BEATS + timing.FILL_WRITE_CYCLES

    def _delayed(self, k: int, line: int, d: int) -> None:
        """Another core's transfer took ``d`` cycles of the port while ``line`` filled."""
        if self.tags[k] == line:
            self.ready_at[k] += d

    def access(self, addr: int, t: int) -> int:
        """Present word ``addr`` at time ``t``; returns when it is available."""
        line = addr // LINE_WORDS
        k = line % self.lines
        if self.tags[k] == line:
            self.stats.hits += 1
        else:
            self.stats.misses += 1
            self._fill(line, t)
        nxt = line + 1
        if nxt * LINE_WORDS < self.rom_words and self.tags[nxt % self.lines] != nxt:
            self.stats.prefetches += 1
            self._fill(nxt, t)
        return max(t, self.ready_at[k])


class Sequencer:
    """Presents the words of a decoded ROM in dispatch order (see the module docstring).

    ``prog`` holds an :class:`~snpu.verif.isa.Instr` per word, or the
    :class:`~snpu.errors.IllegalInstruction` its word raised.  ``halves``
    (:func:`half_sizes`): what a ``flip`` loop inverts; needed once one flips a word.
    """

    def __init__(self, prog: list, cache_lines: int | None,
                 halves: dict[str, int] | None = None):
        self.prog = prog
        self.halves = halves
        self.rom_words = len(prog)
        self.pc = 0
        self.frames: list[Frame] = []
        #: ``None``: no cache model (every word available at once)
        self.cache = InstructionCache(cache_lines, self.rom_words) if cache_lines else None
        self._current: tuple[int, Instr, int] | None = None

    def _fault(self, addr: int, message: str) -> ExecutionError:
        return ExecutionError(message, address=addr, fault="ILLEGAL")

    def current(self, t: int) -> tuple[int, Instr, int]:
        """The word to dispatch: (ROM word, instruction with walk offsets applied, the time
        it is available).  The cache access happens once per presented word."""
        if self._current is not None:
            return self._current
        addr = self.pc
        if addr >= self.rom_words:
            raise self._fault(addr, f"dispatch reached word {addr}, past the ROM "
                                    f"({self.rom_words} words): no halt")
        ready = self.cache.access(addr, t) if self.cache is not None else t
        ins = self.prog[addr]
        if isinstance(ins, IllegalInstruction):
            raise ExecutionError(str(ins), address=addr, fault="ILLEGAL")
        if ins.op == "loop":
            end = addr + ins.body
            if end >= self.rom_words:
                raise self._fault(addr, f"loop body [{addr + 1}, {end}] runs past the ROM "
                                        f"({self.rom_words} words)")
            if self.frames and end > self.frames[-1].end:
                raise self._fault(addr, f"loop body [{addr + 1}, {end}] leaves its enclosing "
                                        f"body, which ends at word {self.frames[-1].end}")
            if len(self.frames) == LOOP_DEPTH:
                raise self._fault(addr, f"loops nest deeper than {LOOP_DEPTH}")
        else:
            if ins.op in ("ld", "st") and ins.args["walk"] and self.frames:
                s = stream(ins)
                off = sum(f.iteration * f.inc[s] for f in self.frames)
                if off:
                    ins = Instr(ins.op, {**ins.args, "ext": (ins.args["ext"] + off) & 0xFFFFFFFF},
                                ins.wait, ins.signal)
            mask = flip_now(self.frames)
            if mask and ping_pong(ins):
                if self.halves is None:
                    raise ValueError("a flip loop's words need the buffer sizes (halves)")
                ins = flipped(ins, self.halves, mask)
        self._current = (addr, ins, ready)
        return self._current

    def advance(self) -> None:
        """The current word was dispatched (or executed, for ``loop``)."""
        addr, ins, _ = self._current
        self._current = None
        if ins.op == "loop":
            if ins.count == 0:
                self._finish(addr + ins.body)
                return
            self.frames.append(Frame(addr + 1, addr + ins.body, ins.count - 1,
                                     {s: ins.args[f] for s, f in STREAMS.items()},
                                     ins.args["flip"]))
            self.pc = addr + 1 + ins.args["entry"]
            return
        self._finish(addr)

    def _finish(self, last: int) -> None:
        """Word ``last`` is done: go on after it, or back to the start of a body it ends."""
        self.pc = last + 1
        while self.frames and self.frames[-1].end == last:
            f = self.frames[-1]
            if f.left:
                f.left -= 1
                f.iteration += 1
                self.pc = f.start
                return
            self.frames.pop()


def unroll(prog: list, *, limit: int | None = None,
           halves: dict[str, int] | None = None) -> list[tuple[int, Instr]]:
    """The dynamic instruction stream of a decoded ROM: every word the sequencer dispatches
    (``loop`` words excluded), with walk offsets and flips (``halves``) applied, up to and
    including ``halt``.  Faults as :meth:`Sequencer.current`; ``limit`` bounds the stream's
    length."""
    seq = Sequencer(prog, None, halves)
    out = []
    while True:
        addr, ins, _ = seq.current(0)
        if ins.op != "loop":
            out.append((addr, ins))
            if ins.op == "halt":
                return out
            if limit is not None and len(out) > limit:
                raise ExecutionError(f"the program dispatches more than {limit} instructions",
                                     address=addr)
        seq.advance()


def dispatch_arrays(prog: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The dispatched stream of a well-formed ROM (as :func:`unroll`, ``loop`` words
    excluded) as three arrays: the ROM word of every dispatched instruction, its ``ext``
    with walk offsets applied (0 for instructions without one), and the kinds of its
    ping-pong operands ``flip`` loops dispatch in the other half (a :data:`FLIP_BITS` mask;
    0: as written).  Vectorised: for checking long programs
    against each other."""
    n = len(prog)
    ext = np.zeros(n, np.int64)
    inc_of = {s: np.zeros(n, np.int64) for s in STREAMS}  # per word: what it adds per stream
    for k, ins in enumerate(prog):
        if ins.op in ("ld", "st"):
            ext[k] = ins.args["ext"]
            if ins.args["walk"]:
                inc_of[stream(ins)][k] = 1
    empty = np.zeros(0, np.int64)

    def expand(lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        idx_parts, ext_parts, flip_parts, k, run = [], [], [], lo, lo
        while k < hi:
            ins = prog[k]
            if ins.op != "loop":
                k += 1
                continue
            if run < k:
                idx_parts.append(np.arange(run, k))
                ext_parts.append(ext[run:k])
                flip_parts.append(np.zeros(k - run, np.int64))
            body, c, entry = ins.args["body"], ins.args["count"], ins.args["entry"]
            if c and entry:  # the first iteration, from word `entry` of the body
                fi, fe, ff = expand(k + 1 + entry, k + 1 + body)
                idx_parts.append(fi)
                ext_parts.append(fe)
                flip_parts.append(ff)
            bi, be, bf = expand(k + 1, k + 1 + body)
            step = sum(inc_of[s][bi] * ins.args[f] for s, f in STREAMS.items())
            first = int(bool(entry))  # iterations run in full: first .. c-1
            full = max(0, c - first)
            iteration = np.repeat(np.arange(first, first + full), len(bi))
            idx_parts.append(np.tile(bi, full))
            ext_parts.append(np.tile(be, full) + iteration * np.tile(step, full))
            flip_parts.append(np.tile(bf, full) ^ ((iteration & 1) * ins.args["flip"]))
            k = run = k + 1 + body
        if run < hi:
            idx_parts.append(np.arange(run, hi))
            ext_parts.append(ext[run:hi])
            flip_parts.append(np.zeros(hi - run, np.int64))
        if not idx_parts:
            return empty, empty, empty
        return np.concatenate(idx_parts), np.concatenate(ext_parts), np.concatenate(flip_parts)

    idx, e, f = expand(0, n)
    return idx, e & 0xFFFFFFFF, f


def loop_depth(prog: list) -> int:
    """How many loops deep the words of ``prog`` nest (from its loop words alone)."""
    deepest, ends = 0, []
    for k, w in enumerate(prog):
        while ends and ends[-1] < k:
            ends.pop()
        if w.op == "loop":
            ends.append(k + w.args["body"])
            deepest = max(deepest, len(ends))
    return deepest


def dispatch_count(prog: list) -> int:
    """How many instructions a well-formed ROM dispatches (``loop`` words excluded), from
    its loop structure alone: the length of :func:`unroll`'s stream without building it."""
    def count(lo: int, hi: int) -> int:
        n, k = 0, lo
        while k < hi:
            ins = prog[k]
            if ins.op == "loop":
                body, c, entry = ins.args["body"], ins.args["count"], ins.args["entry"]
                if c and entry:
                    n += count(k + 1 + entry, k + 1 + body) + (c - 1) * count(k + 1, k + 1 + body)
                else:
                    n += c * count(k + 1, k + 1 + body)
                k += 1 + body
            else:
                n += 1
                k += 1
        return n
    return count(0, len(prog))
