"""Dependency-token channels between the units (the ISA's ``wait`` / ``signal`` bits)."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .microcode import UNITS


class TokenChannels(wiring.Component):
    """One counter per ordered pair of units ``a -> b`` (capacity ``depth``).

    Unit ``b``'s ``wait_ok`` is high when every channel ``a -> b`` named in its
    ``wait_mask`` holds a token; ``take`` removes one from each.  Unit ``a``'s ``signal_ok``
    is high when every channel ``a -> b`` named in its ``signal_mask`` has room; ``give``
    adds one to each.  A channel may be given to and taken from in the same cycle.  ``empty``
    is high when every channel is empty.

    ``wait_ok`` and ``signal_ok`` come from registers: each unit also says what its masks
    will be in the next cycle (``wait_mask_next``, ``signal_mask_next``), and the flags are
    computed a cycle ahead from those masks and the counts after this cycle's gives and
    takes.  So they equal the definitions above in every cycle, and a unit's ``take`` /
    ``give`` (and the executor start behind it) begins at a register, not at the counters'
    comparisons.
    """

    def __init__(self, depth: int):
        if depth < 1:
            raise ValueError(f"token depth must be at least 1, got {depth}")
        self._depth = depth
        n = len(UNITS)
        super().__init__({
            "wait_mask": In(n).array(n), "wait_mask_next": In(n).array(n),
            "wait_ok": Out(1, init=1).array(n), "take": In(1).array(n),
            "signal_mask": In(n).array(n), "signal_mask_next": In(n).array(n),
            "signal_ok": Out(1, init=1).array(n), "give": In(1).array(n),
            "empty": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = len(UNITS)
        D = self._depth
        count = {(a, b): Signal(range(D + 1), name=f"tokens_{UNITS[a].name}_{UNITS[b].name}")
                 for a in range(n) for b in range(n) if a != b}
        # per channel, after this cycle: holds a token / is full (from the count and this
        # cycle's give and take; a take needs a token, so an empty channel is never taken from)
        has_next, full_next = {}, {}
        for (a, b), c in count.items():
            inc = self.give[a] & self.signal_mask[a][b]
            dec = self.take[b] & self.wait_mask[b][a]
            with m.If(inc & ~dec):
                m.d.sync += c.eq(c + 1)
            with m.Elif(dec & ~inc):
                m.d.sync += c.eq(c - 1)
            keeps = inc | ~dec  # the count does not fall
            has_next[a, b] = Signal(name=f"has_next_{UNITS[a].name}_{UNITS[b].name}")
            full_next[a, b] = Signal(name=f"full_next_{UNITS[a].name}_{UNITS[b].name}")
            m.d.comb += [
                has_next[a, b].eq((c > 1) | ((c == 1) & keeps) | (inc & ~dec)),
                full_next[a, b].eq(((c == D) & keeps) | ((c == D - 1) & inc & ~dec)),
            ]
        for u in range(n):
            m.d.sync += self.wait_ok[u].eq(Cat(*[~self.wait_mask_next[u][a] | has_next[a, u]
                                                 for a in range(n) if a != u]).all())
            m.d.sync += self.signal_ok[u].eq(Cat(*[~self.signal_mask_next[u][b] |
                                                   ~full_next[u, b]
                                                   for b in range(n) if b != u]).all())
        m.d.comb += self.empty.eq(Cat(*[c == 0 for c in count.values()]).all())
        return m
