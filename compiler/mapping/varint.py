"""Varints, vectorised: 7 data bits per byte, least significant group first; the top bit of
a byte is 1 when more bytes of the same number follow and 0 on its last byte (seed 003)."""

from __future__ import annotations

import numpy as np

_MAX_BYTES = 10  # a uint64 needs at most 10 groups of 7 bits


def encode(values: np.ndarray) -> bytes:
    """Non-negative integers -> their varint bytes, concatenated."""
    v = np.asarray(values, dtype=np.uint64).reshape(-1)
    if v.size == 0:
        return b""
    nbytes = np.ones(v.size, np.int64)
    for k in range(1, _MAX_BYTES):
        nbytes += v >= (np.uint64(1) << np.uint64(7 * k))
    total = int(nbytes.sum())
    out = np.empty(total, np.uint8)
    start = np.zeros(v.size, np.int64)
    np.cumsum(nbytes[:-1], out=start[1:])
    for k in range(int(nbytes.max())):
        has = nbytes > k
        pos = start[has] + k
        group = (v[has] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = (nbytes[has] > k + 1).astype(np.uint64) << np.uint64(7)
        out[pos] = (group | more).astype(np.uint8)
    return out.tobytes()


class VarintError(ValueError):
    """A varint stream that ends inside a number, or a number longer than 64 bits.
    ``offset`` is the byte offset of the first byte of the bad number."""

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.offset = offset


def decode(data: bytes | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varint bytes -> (values as uint64, byte offset where each value starts)."""
    b = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data
    if b.size == 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    last = b < 0x80
    ends = np.flatnonzero(last)
    if ends.size == 0 or ends[-1] != b.size - 1:
        off = int(ends[-1]) + 1 if ends.size else 0
        raise VarintError("data ends inside a varint", off)
    starts = np.empty(ends.size, np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    if lengths.max() > _MAX_BYTES:
        k = int(np.flatnonzero(lengths > _MAX_BYTES)[0])
        raise VarintError("varint longer than 64 bits", int(starts[k]))
    owner = np.repeat(np.arange(ends.size), lengths)
    shift = (np.arange(b.size) - starts[owner]).astype(np.uint64) * np.uint64(7)
    parts = (b & 0x7F).astype(np.uint64) << shift
    values = np.add.reduceat(parts, starts)
    return values, starts
