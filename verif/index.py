"""Connection-index formats: the executable specification of seed 000, claims 5-11, 16-22.

A *connection index* says which elements of a vector take part in the computation.

Direct index
    A 0/1 string: bit ``i`` is 1 iff ``|x[i]| > t`` (for weights: iff input neuron ``i`` is
    connected to the output neuron).  For a weight matrix it exists in two orders: one string
    per output neuron over all inputs (``order="out"``, what the hardware reads) or one per
    input neuron over all outputs (``order="in"``).
Stride index
    The distance of each kept element from the previous kept one, the first measured from
    position 0.  Kept positions 0, 3, 4, 9 give strides 0, 3, 1, 5.

Combining a neuron index with a weight index (claims 7-10):

* both direct: bitwise AND (:func:`and_direct`);
* both stride: prefix-sum each to absolute positions, intersect, sort, re-difference
  (:func:`merge_stride`);
* mixed: convert the stride side to direct and AND (claim 9), or convert the direct side to
  stride and merge (claim 10).  :func:`combine` implements both; they always agree.

The combined index selects the (neuron, weight) pairs that need multiplying
(:func:`compact`).  Group pruning (claims 11, 16) deletes a whole group of elements when more
than ``t4`` of them are small (``|x| <= t3``) (:func:`group_prune`).

In-memory encodings used by the ISA (``docs/formats.md``):

* direct: bit ``i`` at byte ``i // 8``, bit ``i % 8`` (LSB first); a row is padded with zero
  bits to a multiple of the core's ``chunk_bits`` (:func:`encode_direct`);
* stride: a little-endian uint16 count of entry bytes, then one byte per entry.  An entry
  ``e < 255`` moves the cursor ``e`` positions forward and keeps the element there; ``255``
  (escape) moves it 255 positions without keeping anything.  A stride ``s >= 255`` is written
  as ``s // 255`` escapes followed by ``s % 255`` (:func:`encode_stride`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from snpu.errors import IndexFormatError

Format = Literal["dense", "direct", "stride"]
#: the index formats and their codes in the ISA (``mx.nfmt`` / ``mx.wfmt``): defined here
#: once; the ISA tables, the compiler, the program generator and the RTL read them from here
FORMAT_CODES: dict[Format, int] = {"dense": 0, "direct": 1, "stride": 2}
FORMATS: tuple[Format, ...] = tuple(sorted(FORMAT_CODES, key=FORMAT_CODES.get))
#: a stride entry that moves 255 positions without keeping anything
STRIDE_ESCAPE = 255


# --------------------------------------------------------------------------------------------
# Building indices
# --------------------------------------------------------------------------------------------


def magnitude(x: np.ndarray) -> np.ndarray:
    """|x| without int8 overflow (|-128| = 128)."""
    return np.abs(np.asarray(x).astype(np.int64))


def threshold(x: np.ndarray, t: int | float = 0) -> np.ndarray:
    """Direct index of ``x`` (claim 5): ``bits[i] = |x[i]| > t``."""
    x = np.asarray(x)
    if (x.dtype.kind == "i" or x.dtype.kind == "u" and x.dtype.itemsize < 8) and t >= 0:
        # |x| > t without widening: x < -t holds for the most negative value too
        return (x > t) | (x < -t)
    return magnitude(x) > t if x.dtype.kind in "iu" else np.abs(x) > t


def direct_matrix(w: np.ndarray, t: int | float = 0, order: str = "out") -> np.ndarray:
    """Direct index of a weight matrix ``w[out, in]``: one string per output neuron
    (``order="out"``, shape ``(out, in)``) or per input neuron (``order="in"``, shape
    ``(in, out)``)."""
    bits = threshold(w, t)
    if order == "out":
        return bits
    if order == "in":
        return np.ascontiguousarray(bits.T)
    raise ValueError(f"order must be 'out' or 'in', got {order!r}")


def group_prune(x: np.ndarray, group_size: int, t3: int | float, t4: int) -> np.ndarray:
    """Group pruning (claims 11, 16): split ``x`` into consecutive groups of ``group_size``
    (the last may be shorter) and delete a group when the count of its elements with
    ``|x| <= t3`` is greater than ``t4``.  Returns the per-element mask of surviving groups."""
    x = np.asarray(x)
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    n = x.shape[-1]
    if n == 0:
        return np.zeros(x.shape, dtype=bool)
    small = ~threshold(x, t3)
    pad = (-n) % group_size
    if pad:
        small = np.concatenate([small, np.zeros(small.shape[:-1] + (pad,), bool)], axis=-1)
    counts = small.reshape(small.shape[:-1] + (-1, group_size)).sum(axis=-1)
    keep = counts <= t4
    return np.repeat(keep, group_size, axis=-1)[..., :n]


def sparse_unit_mask(x: np.ndarray, t: int, group: tuple[int, int, int] | None = None) -> np.ndarray:
    """The neuron index the sparse processing unit derives from neurons ``x`` (groups run
    along the last axis): ``|x| > t`` (claim 5), and with ``group = (size, t3, t4)`` only
    in groups that survive :func:`group_prune` (claim 11)."""
    keep = threshold(x, t)
    if group:
        keep &= group_prune(x, *group)
    return keep


# --------------------------------------------------------------------------------------------
# Format conversion
# --------------------------------------------------------------------------------------------


def direct_to_stride(bits: np.ndarray) -> np.ndarray:
    """Direct index -> stride index."""
    pos = np.flatnonzero(np.asarray(bits, dtype=bool))
    return stride_from_positions(pos)


def stride_from_positions(pos: np.ndarray) -> np.ndarray:
    pos = np.asarray(pos, dtype=np.int64)
    if pos.size == 0:
        return pos
    return np.diff(pos, prepend=0)


def positions_from_stride(strides: np.ndarray) -> np.ndarray:
    """Prefix sum of a stride index: the absolute kept positions."""
    s = np.asarray(strides, dtype=np.int64)
    if s.size and (s[0] < 0 or (s[1:] <= 0).any()):
        raise IndexFormatError("stride index must start >= 0 and continue with strides >= 1 "
                               f"(got {s[:8].tolist()}{'...' if s.size > 8 else ''})")
    return np.cumsum(s)


def stride_to_direct(strides: np.ndarray, n: int) -> np.ndarray:
    """Stride index -> direct index of length ``n``."""
    pos = positions_from_stride(strides)
    if pos.size and pos[-1] >= n:
        raise IndexFormatError(f"stride index reaches position {int(pos[-1])} >= length {n}",
                               fault="INDEX")
    bits = np.zeros(n, dtype=bool)
    bits[pos] = True
    return bits


# --------------------------------------------------------------------------------------------
# Combining (the connection processing unit)
# --------------------------------------------------------------------------------------------


def and_direct(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Claim 7: both direct -> bitwise AND."""
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"direct indices of different lengths {a.shape} and {b.shape}")
    return a & b


def merge_stride(sa: np.ndarray, sb: np.ndarray) -> np.ndarray:
    """Claim 8: both stride -> prefix-sum each, intersect, sort ascending, re-difference."""
    pa, pb = positions_from_stride(sa), positions_from_stride(sb)
    common = np.intersect1d(pa, pb, assume_unique=True)  # sorted ascending
    return stride_from_positions(common)


@dataclass(frozen=True)
class Index:
    """A connection index of a length-``n`` vector in one of the three formats.

    ``data`` is ``None`` (dense: every element kept), a bool array (direct) or an int array
    of strides (stride).
    """

    fmt: Format
    n: int
    data: np.ndarray | None = None

    @classmethod
    def dense(cls, n: int) -> "Index":
        return cls("dense", n)

    @classmethod
    def direct(cls, bits: np.ndarray) -> "Index":
        bits = np.asarray(bits, dtype=bool)
        return cls("direct", bits.size, bits)

    @classmethod
    def stride(cls, strides: np.ndarray, n: int) -> "Index":
        s = np.asarray(strides, dtype=np.int64)
        stride_to_direct(s, n)  # validates
        return cls("stride", n, s)

    def to_direct(self) -> np.ndarray:
        if self.fmt == "dense":
            return np.ones(self.n, dtype=bool)
        if self.fmt == "direct":
            return self.data
        return stride_to_direct(self.data, self.n)

    def to_stride(self) -> np.ndarray:
        if self.fmt == "stride":
            return self.data
        return direct_to_stride(self.to_direct())

    def positions(self) -> np.ndarray:
        if self.fmt == "stride":
            return positions_from_stride(self.data)
        return np.flatnonzero(self.to_direct())

    @property
    def count(self) -> int:
        return self.n if self.fmt == "dense" else len(self.positions())


def combine(a: Index, b: Index, mixed: Literal["to_direct", "to_stride"] = "to_direct") -> Index:
    """Combine two connection indices over the same ``n`` (claims 7-10).

    Dense is treated as direct with every bit set.  Both direct -> AND (claim 7); both stride ->
    stride merge (claim 8); mixed -> ``"to_direct"``: convert the stride side and AND
    (claim 9), or ``"to_stride"``: convert the direct side and merge (claim 10).
    """
    if a.n != b.n:
        raise ValueError(f"cannot combine indices of lengths {a.n} and {b.n}")
    sa, sb = a.fmt == "stride", b.fmt == "stride"
    if sa and sb:
        return Index("stride", a.n, merge_stride(a.data, b.data))
    if not sa and not sb:
        if a.fmt == "dense" and b.fmt == "dense":
            return Index.dense(a.n)
        return Index.direct(and_direct(a.to_direct(), b.to_direct()))
    if mixed == "to_direct":
        return Index.direct(and_direct(a.to_direct(), b.to_direct()))
    if mixed == "to_stride":
        return Index("stride", a.n, merge_stride(a.to_stride(), b.to_stride()))
    raise ValueError(f"mixed must be 'to_direct' or 'to_stride', got {mixed!r}")


def ranks(index: Index, positions: np.ndarray) -> np.ndarray:
    """Rank of each kept position within ``index``'s kept elements (its slot in packed data)."""
    if index.fmt == "dense":
        return np.asarray(positions, dtype=np.int64)
    kept = index.positions()
    r = np.searchsorted(kept, positions)
    if r.size and ((r >= kept.size) | (kept[np.minimum(r, kept.size - 1)] != positions)).any():
        raise ValueError("a selected position is not kept by the index")
    return r


def compact(x: np.ndarray, x_index: Index, w: np.ndarray, w_index: Index,
            combined: Index | None = None, *, x_packed: bool = False, w_packed: bool = False
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The data processing unit: select the neuron/weight pairs named by the combined index.

    ``x`` / ``w`` are either dense (element ``i`` at offset ``i``) or packed (only the kept
    elements, in order).  Returns ``(positions, processed_neurons, processed_weights)``.
    """
    if combined is None:
        combined = combine(x_index, w_index)
    pos = combined.positions()
    xs = np.asarray(x)[ranks(x_index, pos) if x_packed else pos]
    ws = np.asarray(w)[ranks(w_index, pos) if w_packed else pos]
    return pos, xs, ws


# --------------------------------------------------------------------------------------------
# Encodings
# --------------------------------------------------------------------------------------------


def direct_row_bytes(n: int, chunk_bits: int) -> int:
    """Bytes of one encoded direct-index row of length ``n`` (padded to whole chunks)."""
    return -(-n // chunk_bits) * chunk_bits // 8


def encode_direct(bits: np.ndarray, chunk_bits: int = 8) -> bytes:
    """Direct index -> bytes, LSB first, padded with zero bits to a multiple of ``chunk_bits``."""
    bits = np.asarray(bits, dtype=bool)
    nbytes = direct_row_bytes(bits.size, chunk_bits)
    packed = np.packbits(bits, bitorder="little")
    return packed.tobytes() + bytes(nbytes - packed.size)


def decode_direct(buf: bytes | np.ndarray, n: int, offset: int = 0) -> np.ndarray:
    """Bytes -> direct index of length ``n`` starting at byte ``offset``."""
    raw = np.frombuffer(bytes(buf), dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    need = -(-n // 8)
    if offset < 0 or offset + need > raw.size:
        raise IndexFormatError(f"direct index of {n} bits at byte {offset} runs past the end "
                               f"of a {raw.size}-byte buffer")
    return np.unpackbits(raw[offset:offset + need].astype(np.uint8), bitorder="little")[:n].astype(bool)


def stride_entries(strides: np.ndarray) -> np.ndarray:
    """Stride index -> entry bytes with escapes (no count prefix)."""
    s = np.asarray(strides, dtype=np.int64)
    positions_from_stride(s)  # validates
    if s.size == 0:
        return np.zeros(0, dtype=np.uint8)
    esc, rem = np.divmod(s, STRIDE_ESCAPE)
    lengths = esc + 1
    out = np.full(int(lengths.sum()), STRIDE_ESCAPE, dtype=np.uint8)
    out[np.cumsum(lengths) - 1] = rem
    return out


def encode_stride(strides: np.ndarray) -> bytes:
    """Stride index -> uint16 LE entry count + entries (see module docstring)."""
    entries = stride_entries(strides)
    if entries.size > 0xFFFF:
        raise IndexFormatError(f"stride index needs {entries.size} entries; the limit is 65535")
    return int(entries.size).to_bytes(2, "little") + entries.tobytes()


def strides_from_entries(entries: np.ndarray) -> np.ndarray:
    """Entry bytes (escapes included) -> strides; rejects non-canonical encodings."""
    e = np.asarray(entries, dtype=np.int64)
    if e.size == 0:
        return e
    if e[-1] == STRIDE_ESCAPE:
        raise IndexFormatError("stride index ends with an escape entry (255) keeping nothing")
    is_elem = e != STRIDE_ESCAPE
    elem_idx = np.flatnonzero(is_elem)
    # Each element's stride = its entry + 255 * number of escapes since the previous element.
    csum = np.cumsum(np.where(is_elem, e, STRIDE_ESCAPE))
    pos = csum[elem_idx]
    strides = np.diff(pos, prepend=0)
    zero_after_elem = (e[elem_idx[1:]] == 0) & (~np.isin(elem_idx[1:] - 1, np.flatnonzero(~is_elem)))
    if zero_after_elem.any():
        k = int(elem_idx[1:][zero_after_elem][0])
        raise IndexFormatError(f"stride entry {k} is 0 after a kept element: it repeats a position")
    return strides


def decode_stride(buf: bytes | np.ndarray, offset: int = 0) -> tuple[np.ndarray, int]:
    """Bytes at ``offset`` -> (strides, bytes consumed including the count)."""
    raw = np.frombuffer(bytes(buf), dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    if offset < 0 or offset + 2 > raw.size:
        raise IndexFormatError(f"stride index count at byte {offset} runs past the end of a "
                               f"{raw.size}-byte buffer")
    count = int(raw[offset]) | int(raw[offset + 1]) << 8
    if offset + 2 + count > raw.size:
        raise IndexFormatError(f"stride index at byte {offset} has {count} entries but only "
                               f"{raw.size - offset - 2} bytes follow")
    return strides_from_entries(raw[offset + 2:offset + 2 + count]), 2 + count


def encoded_size(bits: np.ndarray, fmt: Format, chunk_bits: int = 8) -> int:
    """Bytes needed to store the index ``bits`` in ``fmt`` (dense needs none)."""
    if fmt == "dense":
        return 0
    if fmt == "direct":
        return direct_row_bytes(np.asarray(bits).size, chunk_bits)
    return 2 + stride_entries(direct_to_stride(bits)).size
