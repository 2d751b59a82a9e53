"""Compressed activations: the executable specification of the format a swapped activation
takes in far memory (issue 13, seed 001's "reduction ... and/or compress").

ReLU activations are sparse, so a tensor is stored with the core's own index formats
(:mod:`.index`), row by row, a row being one pixel's channel vector (``c`` int8 values,
channels-last as every activation in memory).  One format holds for the whole tensor (as
for a layer's weights, the instruction that moves it will name it; the compiler picks the
smallest): each row is

* ``dense``: its ``c`` values;
* ``direct``: its direct index (:func:`~.index.encode_direct`, ``chunk_bits`` padding), then
  its non-zero values in channel order;
* ``stride``: its stride index (:func:`~.index.encode_stride`: a uint16 entry count, then
  the entries), then its non-zero values in channel order.

Rows follow each other without padding.  A row in direct or stride form is what the LD unit
can place straight into ``nbuf`` / ``nidx`` with its index attached (claim 21):
:func:`decode_rows` returns each row's direct index too.

The hardware form (``stc`` / ``ldc``, reserved in the ISA) is still to be built; the
compiler's benchmark measures the ratio this format gives on real activations.
"""

from __future__ import annotations

import numpy as np

from snpu.errors import IndexFormatError

from . import index as ix

_CODE = ix.FORMAT_CODES


def encode_row(row: np.ndarray, fmt: str, chunk_bits: int = 64) -> bytes:
    """One row in format ``fmt``."""
    row = np.asarray(row, np.int8).reshape(-1)
    if fmt == "dense":
        return row.tobytes()
    bits = row != 0
    values = row[bits].tobytes()
    if fmt == "direct":
        return ix.encode_direct(bits, chunk_bits) + values
    if fmt == "stride":
        return ix.encode_stride(ix.direct_to_stride(bits)) + values
    raise ValueError(f"format {fmt!r}: expected one of {ix.FORMATS}")


def _matrix(rows) -> np.ndarray:
    """``[n, c]`` rows (a higher-rank array: rows of its trailing axes)."""
    rows = np.asarray(rows)
    return rows if rows.ndim == 2 else rows.reshape(rows.shape[0], -1)


def sizes(rows: np.ndarray, chunk_bits: int = 64) -> dict[str, int]:
    """Bytes of the rows ``[n, c]`` in each format."""
    rows = _matrix(rows)
    n, c = rows.shape
    bits = rows != 0
    k = int(bits.sum())
    stride = sum(ix.encoded_size(b, "stride") for b in bits)
    return {"dense": n * c, "direct": n * ix.direct_row_bytes(c, chunk_bits) + k,
            "stride": stride + k}


def choose_format(rows: np.ndarray, chunk_bits: int = 64) -> str:
    """The format that stores ``rows`` in the fewest bytes (ties: dense, direct, stride)."""
    s = sizes(rows, chunk_bits)
    return min(ix.FORMATS, key=lambda f: (s[f], _CODE[f]))


def encode_rows(rows: np.ndarray, fmt: str | None = None, chunk_bits: int = 64) -> bytes:
    """Rows ``[n, c]`` of int8 in format ``fmt`` (default: :func:`choose_format`)."""
    rows = _matrix(np.asarray(rows, np.int8))
    fmt = fmt or choose_format(rows, chunk_bits)
    return b"".join(encode_row(r, fmt, chunk_bits) for r in rows)


def decode_rows(buf: bytes, n: int, c: int, fmt: str, chunk_bits: int = 64
                ) -> tuple[np.ndarray, np.ndarray, int]:
    """Rows in format ``fmt`` -> (rows ``[n, c]`` int8, their direct indices ``[n, c]``
    bool, bytes read).

    A malformed row is an :class:`~snpu.errors.IndexFormatError` naming the row and its
    byte offset: a row running past the buffer, a stride index reaching past ``c``, index
    bits set in a direct index's padding."""
    if fmt not in _CODE:
        raise ValueError(f"format {fmt!r}: expected one of {ix.FORMATS}")
    raw = np.frombuffer(bytes(buf), np.uint8)
    rows = np.zeros((n, c), np.int8)
    kept = np.zeros((n, c), bool)
    at = 0
    for r in range(n):
        start = at

        def need(k: int, what: str) -> None:
            if at + k > raw.size:
                raise IndexFormatError(f"compressed row {r} at byte {start}: {what} runs past "
                                       f"the {raw.size} bytes given")

        if fmt == "dense":
            need(c, "the dense values")
            rows[r] = raw[at:at + c].view(np.int8)
            kept[r] = True
            at += c
            continue
        if fmt == "direct":
            nb = ix.direct_row_bytes(c, chunk_bits)
            need(nb, "the direct index")
            padded = np.unpackbits(raw[at:at + nb], bitorder="little").astype(bool)
            if padded[c:].any():
                raise IndexFormatError(f"compressed row {r} at byte {start}: direct index bits "
                                       f"set past the row's {c} values")
            bits = padded[:c]
            at += nb
        else:
            need(2, "the stride count")
            try:
                strides, used = ix.decode_stride(raw, at)
                pos = ix.positions_from_stride(strides)
            except IndexFormatError as e:
                raise IndexFormatError(f"compressed row {r} at byte {start}: {e}") from None
            if pos.size and pos[-1] >= c:
                raise IndexFormatError(f"compressed row {r} at byte {start}: the stride index "
                                       f"reaches position {int(pos[-1])} of a row of {c}")
            bits = np.zeros(c, bool)
            bits[pos] = True
            at += used
        k = int(bits.sum())
        need(k, f"the {k} non-zero values")
        rows[r, bits] = raw[at:at + k].view(np.int8)
        kept[r] = bits
        at += k
    return rows, kept, at
