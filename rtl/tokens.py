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
    """

    def __init__(self, depth: int):
        self._depth = depth
        n = len(UNITS)
        super().__init__({
            "wait_mask": In(n).array(n), "wait_ok": Out(1).array(n), "take": In(1).array(n),
            "signal_mask": In(n).array(n), "signal_ok": Out(1).array(n), "give": In(1).array(n),
            "empty": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = len(UNITS)
        count = {(a, b): Signal(range(self._depth + 1), name=f"tokens_{UNITS[a].name}_{UNITS[b].name}")
                 for a in range(n) for b in range(n) if a != b}
        for u in range(n):
            m.d.comb += self.wait_ok[u].eq(Cat(*[~self.wait_mask[u][a] | (count[(a, u)] != 0)
                                                 for a in range(n) if a != u]).all())
            m.d.comb += self.signal_ok[u].eq(Cat(*[~self.signal_mask[u][b] |
                                                   (count[(u, b)] != self._depth)
                                                   for b in range(n) if b != u]).all())
        for (a, b), c in count.items():
            inc = self.give[a] & self.signal_mask[a][b]
            dec = self.take[b] & self.wait_mask[b][a]
            with m.If(inc & ~dec):
                m.d.sync += c.eq(c + 1)
            with m.Elif(dec & ~inc):
                m.d.sync += c.eq(c - 1)
        m.d.comb += self.empty.eq(Cat(*[c == 0 for c in count.values()]).all())
        return m
