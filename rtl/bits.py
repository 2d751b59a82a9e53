"""Small combinational helpers: popcount trees, priority encoding, lowest-set-bit select."""

from amaranth import *


def popcount(m: Module, value: Value, name: str = "popcount") -> Value:
    """Population count as a balanced adder tree (a left-leaning chain would be slow)."""
    terms = [value[k] for k in range(len(value))]
    if not terms:
        return Const(0, 1)
    while len(terms) > 1:
        nxt = []
        for k in range(0, len(terms) - 1, 2):
            nxt.append(terms[k] + terms[k + 1])
        if len(terms) % 2:
            nxt.append(terms[-1])
        terms = nxt
    out = Signal(range(len(value) + 1), name=name)
    m.d.comb += out.eq(terms[0])
    return out


def encode_onehot(m: Module, onehot: Value, name: str = "position") -> Value:
    """Index of the set bit of a one-hot value (OR trees, no priority chain)."""
    n = len(onehot)
    out = Signal(range(max(n, 2)), name=name)
    for b in range(len(out)):
        m.d.comb += out[b].eq(Cat(onehot[k] for k in range(n) if k >> b & 1).any())
    return out


def lowest_set(value: Value) -> Value:
    """``value & -value``: only the lowest set bit of ``value`` remains."""
    return (value & (~value + 1))[:len(value)]
