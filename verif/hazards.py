"""Race detector for programs: are conflicting buffer accesses ordered by dependency tokens?

Units run concurrently, so two instructions on different units that touch the same bytes
(at least one writing) must be ordered by a chain of tokens (or a ``sync``).  Otherwise the
result depends on timing and the RTL may disagree with the golden model.  This checker keeps
a vector clock per unit (the number of instructions each unit is known to have finished),
passes clocks along token channels, and flags any unordered conflicting pair.

Footprints are conservative: each instruction reports one interval per buffer (the bounding
range of what it touches), so a program that interleaves two units inside one range is
reported even if the individual bytes never collide.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from snpu.errors import ExecutionError

from .isa import IMPLEMENTED_UNITS, Unit

NU = len(IMPLEMENTED_UNITS)


@dataclass
class Access:
    buf: str  #: buffer name, e.g. "nbuf", "wbuf3", "ext"
    lo: int
    hi: int  #: exclusive
    write: bool


@dataclass
class _Record:
    unit: int
    seq: int
    lo: int
    hi: int
    write: bool
    address: int
    text: str


class HazardChecker:
    def __init__(self) -> None:
        self.clock = np.zeros((NU, NU), dtype=np.int64)
        self.tokens: dict[tuple[int, int], deque] = {}
        self.history: dict[str, list[_Record]] = {}
        self._since_prune = 0

    def start(self, unit: Unit, waits: list[Unit]) -> int:
        """An instruction starts on ``unit`` after taking tokens from ``waits``; returns its
        sequence number on that unit."""
        u = int(unit)
        for w in waits:
            q = self.tokens.get((int(w), u))
            if q:
                np.maximum(self.clock[u], q.popleft(), out=self.clock[u])
        self.clock[u, u] += 1
        return int(self.clock[u, u])

    def finish(self, unit: Unit, signals: list[Unit]) -> None:
        u = int(unit)
        for s in signals:
            self.tokens.setdefault((u, int(s)), deque()).append(self.clock[u].copy())

    def barrier(self) -> None:
        """``sync``/``halt``: everything before is ordered before everything after."""
        top = self.clock.max(axis=0)
        self.clock[:] = top
        self.history.clear()

    def access(self, unit: Unit, seq: int, accesses: list[Access], address: int, text: str) -> None:
        u = int(unit)
        for a in accesses:
            if a.hi <= a.lo:
                continue
            recs = self.history.setdefault(a.buf, [])
            for r in recs:
                if r.unit == u or r.hi <= a.lo or a.hi <= r.lo or not (r.write or a.write):
                    continue
                if self.clock[u, r.unit] >= r.seq:
                    continue  # r happens-before this instruction
                kind = "write/write" if (r.write and a.write) else (
                    "write/read" if r.write else "read/write")
                raise ExecutionError(
                    f"race ({kind}) on {a.buf}[{max(a.lo, r.lo)}:{min(a.hi, r.hi)}] with ROM "
                    f"word {r.address} ({r.text}) on {Unit(r.unit).name}: no dependency token "
                    "orders the two instructions", address=address, text=text)
            recs.append(_Record(u, seq, a.lo, a.hi, a.write, address, text))
        self._since_prune += 1
        if self._since_prune >= 256:
            self._prune()

    def _prune(self) -> None:
        # A record is retired once every unit's clock has passed it: no future access by any
        # unit can be unordered with it.
        self._since_prune = 0
        known = self.clock.min(axis=0)
        for buf, recs in self.history.items():
            self.history[buf] = [r for r in recs if r.seq > known[r.unit]]
