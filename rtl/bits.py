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


def lowest_set(value: Value) -> Value:
    """``value & -value``: only the lowest set bit of ``value`` remains."""
    return (value & (~value + 1))[:len(value)]


#: Bits of a saturating set-bit count (:func:`set_count_flags`' per-slice field).
COUNT_BITS = 2


def _sat_add(m: Module, a: tuple, b: tuple, name: str) -> tuple:
    """``min(a + b, 3)`` of two 2-bit saturating counts ``(low, high)``, as plain logic (two
    LUTs of four inputs, no carry chain), into two signals (an expression of expressions
    would repeat its inputs at every level of a tree)."""
    (a0, a1), (b0, b1) = a, b
    low, high = Signal(name=f"{name}_low"), Signal(name=f"{name}_high")
    ge3 = (a1 & (a0 | b0 | b1)) | (b1 & (a0 | b0))
    m.d.comb += [low.eq((~a1 & ~b1 & (a0 ^ b0)) | ge3), high.eq(a1 | b1 | (a0 & b0))]
    return low, high


def _sat_count(m: Module, level: list, name: str) -> tuple:
    """The 2-bit saturating count (0, 1, 2, 3 or more set) of parts' counts, as a tree."""
    depth = 0
    while len(level) > 1:
        level = [_sat_add(m, level[k], level[k + 1], f"{name}_{depth}_{k // 2}")
                 if k + 1 < len(level) else level[k] for k in range(0, len(level), 2)]
        depth += 1
    return level[0]


def _bit_count(m: Module, value: Value, name: str) -> tuple:
    """``min(popcount(value), 3)`` as ``(low, high)`` bits: a tree of 2-bit saturating
    adders (about two LUTs per two bits counted, no carry chain)."""
    return _sat_count(m, [(value[k], C(0)) for k in range(len(value))], name)


def at_most_two(m: Module, value: Value, name: str = "at_most_two") -> Value:
    """Whether ``value`` has at most two bits set (a saturating count tree, no carry
    chain)."""
    low, high = _bit_count(m, value, name)
    return ~(low & high)


def set_count_flags(m: Module, value: Value, parts: int, name: str = "count") -> Value:
    """Each of ``parts`` equal slices of ``value``: its set bits counted up to three
    (:data:`COUNT_BITS` bits per slice, ``Cat`` of them).  Register these, then
    :func:`at_most_flags`: a 64-bit "at most one / two set" in two short stages."""
    width = len(value) // parts
    return Cat(*[Cat(*_bit_count(m, value[p * width:(p + 1) * width], f"{name}{p}"))
                 for p in range(parts)])


def at_most_flags(m: Module, flags: Value, name: str = "counts") -> tuple[Value, Value]:
    """From :func:`set_count_flags`' slices: (at most one bit set, at most two set) in the
    whole value."""
    low, high = _sat_count(m, [(flags[COUNT_BITS * p], flags[COUNT_BITS * p + 1])
                               for p in range(len(flags) // COUNT_BITS)], name)
    return ~high, ~(low & high)


def at_most_one(value: Value) -> Value:
    """Whether ``value`` has at most one bit set (a tree of any / several flags, no carry
    chain)."""
    level = [(value[k], C(0)) for k in range(len(value))]  # (any set, several set)
    while len(level) > 1:
        pairs = []
        for k in range(0, len(level), 2):
            if k + 1 == len(level):
                pairs.append(level[k])
                continue
            (a_any, a_many), (b_any, b_many) = level[k], level[k + 1]
            pairs.append((a_any | b_any, a_many | b_many | (a_any & b_any)))
        level = pairs
    return ~level[0][1]


def lowest_set_index(value: Value) -> Value:
    """Index of the lowest set bit of ``value`` (``len(value) - 1`` when none is set), for a
    power-of-two width: a tree of 2:1 multiplexers on the halves' any-bits, no carry
    chain."""
    if len(value) & (len(value) - 1):
        raise ValueError(f"width {len(value)} is not a power of two")

    def tree(lo: int, hi: int):  # (any bit set, index of the lowest) of value[lo:hi]
        if hi - lo == 1:
            return value[lo], C(0, 0)
        mid = (lo + hi) // 2
        (a_any, a_idx), (b_any, b_idx) = tree(lo, mid), tree(mid, hi)
        return a_any | b_any, Mux(a_any, Cat(a_idx, C(0, 1)), Cat(b_idx, C(1, 1)))

    return tree(0, len(value))[1]


def _halves(width: int) -> tuple[int, int, int]:
    """The bits of a position in ``width`` bits, split into a low and a high half (the
    decoded halves of :func:`one_hots` and :func:`thermometer`)."""
    bits = (width - 1).bit_length()
    return bits, bits // 2, bits - bits // 2


def one_hots(m: Module, offsets: list[Value], enables: Value, width: int,
             name: str = "one_hots") -> Value:
    """The OR of one bit per enabled offset: bit ``b`` is set when some ``enables[k]`` is set
    with ``offsets[k] == b``.

    Each offset is split into a high and a low half and each half decoded alone (a few small
    decoders per offset instead of one wide comparison per output bit), the high half's
    decode gated by the enable; an output bit is then the OR over offsets of two decoded
    bits: two LUT levels after the decoders."""
    bits, lo_bits, hi_bits = _halves(width)
    out = Signal(width, name=name)
    terms = [[] for _ in range(width)]
    for k, off in enumerate(offsets):
        lo = Signal(1 << lo_bits, name=f"{name}_lo{k}")
        hi = Signal(1 << hi_bits, name=f"{name}_hi{k}")
        m.d.comb += [lo.eq(Cat(*[off[:lo_bits] == j for j in range(1 << lo_bits)])),
                     hi.eq(Cat(*[enables[k] & (off[lo_bits:bits] == j)
                                 for j in range(1 << hi_bits)]))]
        for b in range(width):
            terms[b].append(hi[b >> lo_bits] & lo[b & ((1 << lo_bits) - 1)])
    m.d.comb += out.eq(Cat(*[Cat(*t).any() for t in terms]))
    return out


def thermometer(m: Module, value: Value, width: int, name: str = "thermometer") -> Value:
    """``width`` bits, bit ``b`` set when ``b <= value``.

    Each bit is one LUT of three decoded flags (the value's high half above the bit's, or
    equal to it with the low half at or above the bit's), every flag a function of half the
    value: no comparison chain per bit (a comparison with a constant is a carry chain in
    the ECP5 flow)."""
    bits, lo_bits, hi_bits = _halves(width)
    lo, hi = value[:lo_bits], value[lo_bits:bits]
    lo_ge = Signal(1 << lo_bits, name=f"{name}_lo_ge")   # lo >= j
    hi_gt = Signal(1 << hi_bits, name=f"{name}_hi_gt")   # hi > j
    hi_eq = Signal(1 << hi_bits, name=f"{name}_hi_eq")   # hi == j
    m.d.comb += [
        lo_ge.eq(Cat(*[Cat(*[lo == i for i in range(j, 1 << lo_bits)]).any()
                       for j in range(1 << lo_bits)])),
        hi_gt.eq(Cat(*[Cat(*[hi == i for i in range(j + 1, 1 << hi_bits)]).any()
                       for j in range(1 << hi_bits)])),
        hi_eq.eq(Cat(*[hi == j for j in range(1 << hi_bits)])),
    ]
    out = Signal(width, name=name)
    lo_mask = (1 << lo_bits) - 1
    m.d.comb += out.eq(Cat(*[hi_gt[b >> lo_bits] | (hi_eq[b >> lo_bits] & lo_ge[b & lo_mask])
                             for b in range(width)]))
    return out


def below(value: Value, k: int) -> Value:
    """``value < k`` for a narrow unsigned ``value`` (up to 6 bits), as a lookup of the
    constant's truth table: one LUT level, where a comparison would be mapped to a carry
    chain."""
    width = len(value)
    if width > 6:
        raise ValueError(f"below() is for values of up to 6 bits, got {width}")
    table = sum(1 << v for v in range(min(k, 1 << width)) if v >= 0)
    return Const(table, 1 << width).bit_select(value, 1)


def sum_below(base: Value, ones: list[Value], k: int) -> Value:
    """``base + sum(ones) < k`` for a narrow unsigned ``base`` and one-bit ``ones``, with no
    adder: comparisons of ``base`` with constants (:func:`below`), chosen by the one-bit
    terms last -- so late terms (a handshake) reach the result through multiplexers only.
    A term that is subtracted goes in as its complement with ``k`` one higher."""
    if not ones:
        return below(base, k)
    rest = ones[1:]
    return Mux(ones[0], sum_below(base, rest, k - 1), sum_below(base, rest, k))
