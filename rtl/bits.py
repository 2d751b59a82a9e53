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


def popcount_bytes(m: Module, value: Value, name: str = "pc") -> list[Value]:
    """Population counts of each 8-bit group of ``value`` (two LUT levels each).

    Register these, then add them with :func:`sum_tree`: a 64-bit popcount in two short
    pipeline stages instead of one long one."""
    parts = []
    for k in range(0, len(value), 8):
        s = Signal(4, name=f"{name}{k // 8}")
        m.d.comb += s.eq(sum(value[j] for j in range(k, min(k + 8, len(value)))))
        parts.append(s)
    return parts


def sum_tree(values: list[Value]) -> Value:
    """Balanced adder tree."""
    terms = list(values)
    while len(terms) > 1:
        terms = [terms[k] + terms[k + 1] if k + 1 < len(terms) else terms[k]
                 for k in range(0, len(terms), 2)]
    return terms[0]


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
