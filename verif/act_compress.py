"""Compressed activations: the executable specification of the format a swapped activation
takes in far memory (issue 13, seed 001's "reduction ... and/or compress").

ReLU activations are sparse, so a tensor is stored with the core's own index formats
(:mod:`.index`), row by row, a row being one pixel's channel vector (``c`` int8 values,
channels-last as every activation in memory).  Each row is one *record*:

====== ===================================================================================
bytes  meaning
====== ===================================================================================
1      the row's format: its :data:`~.index.FORMAT_CODES` code (0 dense, 1 direct, 2 stride)
...    dense: the ``c`` values
...    direct: the direct index (:func:`~.index.encode_direct`, ``chunk_bits`` padding),
       then the non-zero values in channel order
...    stride: the stride index (:func:`~.index.encode_stride`: uint16 entry count, then the
       entries), then the non-zero values in channel order
====== ===================================================================================

Records follow each other without padding.  Each row takes whichever format is smallest
(ties: dense, then direct, then stride).  A row in direct or stride form is what the LD
unit can place straight into ``nbuf`` / ``nidx`` with its index attached (claim 21):
:func:`decode_rows` returns the direct index too.

The hardware form (``stc`` / ``ldc``, reserved in the ISA) is still to be built; the
compiler's benchmark measures the ratio this format gives on real activations.
"""

from __future__ import annotations

import numpy as np

from snpu.errors import IndexFormatError

from . import index as ix

_CODE = ix.FORMAT_CODES
_FORMAT = {v: k for k, v in _CODE.items()}


def encode_row(row: np.ndarray, chunk_bits: int = 64, fmt: str | None = None) -> bytes:
    """One row's record; ``fmt`` forces a format (default: the smallest)."""
    row = np.asarray(row, np.int8).reshape(-1)
    bits = row != 0
    values = row[bits].tobytes()
    forms = {
        "dense": row.tobytes(),
        "direct": ix.encode_direct(bits, chunk_bits) + values,
        "stride": ix.encode_stride(ix.direct_to_stride(bits)) + values,
    }
    if fmt is None:
        fmt = min(ix.FORMATS, key=lambda f: (len(forms[f]), _CODE[f]))
    elif fmt not in forms:
        raise ValueError(f"format {fmt!r}: expected one of {ix.FORMATS}")
    return bytes([_CODE[fmt]]) + forms[fmt]


def encode_rows(rows: np.ndarray, chunk_bits: int = 64, fmt: str | None = None) -> bytes:
    """Rows ``[n, c]`` of int8 -> their records, concatenated."""
    rows = np.asarray(rows, np.int8)
    return b"".join(encode_row(r, chunk_bits, fmt) for r in rows.reshape(len(rows), -1))


def decode_rows(buf: bytes, n: int, c: int, chunk_bits: int = 64
                ) -> tuple[np.ndarray, np.ndarray, int]:
    """Records -> (rows ``[n, c]`` int8, their direct indices ``[n, c]`` bool, bytes read).

    A malformed record is an :class:`~snpu.errors.IndexFormatError` naming the row and its
    byte offset: an unknown format code, a record running past the buffer, a stride index
    reaching past ``c``, index bits set in a direct index's padding."""
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

        need(1, "the format code")
        code = int(raw[at])
        at += 1
        if code not in _FORMAT:
            raise IndexFormatError(f"compressed row {r} at byte {start}: format code {code} is "
                                   f"not one of {sorted(_FORMAT)}")
        fmt = _FORMAT[code]
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


def compressed_bytes(rows: np.ndarray, chunk_bits: int = 64) -> int:
    """Bytes of :func:`encode_rows` without building them."""
    rows = np.asarray(rows).reshape(len(rows), -1)
    c = rows.shape[1]
    direct = 1 + ix.direct_row_bytes(c, chunk_bits)
    total = 0
    for r in rows:
        bits = r != 0
        k = int(bits.sum())
        total += min(1 + c, direct + k, 1 + ix.encoded_size(bits, "stride") + k)
    return total
