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

These three are the software forms (the smallest of them is what the benchmark reports as
the format's ratio).  The hardware moves a simpler form, chunked and word aligned:
:func:`encode_stream` / :func:`decode_stream` specify what ``stc`` writes and ``ldc``
reads.
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


# --------------------------------------------------------------------------------------------
# The hardware stream (``stc`` / ``ldc``)
# --------------------------------------------------------------------------------------------

#: values covered by one chunk of the hardware stream (one 64-bit mask word)
CHUNK = 64


def stream_chunk_bytes(chunk: np.ndarray) -> int:
    """Bytes one chunk (at most :data:`CHUNK` int8 values) takes in the hardware stream."""
    k = int(np.count_nonzero(chunk))
    return 8 + 8 * -(-k // 8)


#: bytes of the stream's header (the length of the chunks that follow)
HEADER = 8


def encode_stream(rows: np.ndarray) -> bytes:
    """Rows ``[n, c]`` of int8 as the ``stc`` instruction writes them (the executable
    specification of the hardware's compressed form).

    The stream is a header word, the little-endian uint64 count of the bytes that follow it,
    then the chunks: each row is cut into chunks of :data:`CHUNK` values (the last one may
    be shorter); each chunk is an 8-byte little-endian mask (bit ``i``: value ``i`` of the
    chunk is non-zero; bits past the row's end are 0), then the chunk's non-zero values in
    order, then zero bytes up to a multiple of 8.  Every chunk starts on an 8-byte
    boundary: the units move whole bus words, and a chunk's mask is one word, the direct
    index of its 64 values.  The header lets ``ldc`` read exactly the stream."""
    rows = _matrix(np.asarray(rows, np.int8))
    out = bytearray()
    for row in rows:
        for lo in range(0, row.size, CHUNK):
            chunk = row[lo:lo + CHUNK]
            bits = chunk != 0
            mask = int(np.packbits(np.pad(bits, (0, CHUNK - bits.size)),
                                   bitorder="little").view("<u8")[0])
            vals = chunk[bits].tobytes()
            out += mask.to_bytes(8, "little") + vals + bytes(-len(vals) % 8)
    return len(out).to_bytes(HEADER, "little") + bytes(out)


def chunk_nonzeros(rows: np.ndarray) -> np.ndarray:
    """Non-zero values per chunk of the stream form of ``rows`` ``[n, c]``: ``[n, chunks]``
    (what a stream's length and the units' timing depend on)."""
    rows = _matrix(np.asarray(rows))
    n, c = rows.shape
    return np.count_nonzero(np.pad(rows, ((0, 0), (0, (-c) % CHUNK))).reshape(n, -1, CHUNK),
                            axis=2)


def stream_size(rows: np.ndarray) -> int:
    """Bytes of :func:`encode_stream` of ``rows`` (without encoding them)."""
    k = chunk_nonzeros(rows)
    return HEADER + int((8 + 8 * -(-k // 8)).sum())


def stream_bound(n: int, c: int) -> int:
    """The most bytes ``n`` rows of ``c`` values can take in the stream, header included
    (every value non-zero): what the compiler reserves for a compressed tensor, and the
    longest header ``ldc`` accepts."""
    return HEADER + n * (8 * -(-c // CHUNK) + 8 * -(-c // 8))


def decode_stream(buf: bytes, n: int, c: int) -> tuple[np.ndarray, int]:
    """The stream of ``n`` rows of ``c`` values at the start of ``buf`` -> (rows ``[n, c]``
    int8, bytes read: the header and the length it gives), as ``ldc`` expands it.

    Decoding is what the hardware does: a chunk's length follows from all 64 mask bits (a
    bit set past the row's end still owns a value, which is dropped), the values are taken
    as they come (a zero value stays zero), padding bytes are skipped unread, and bytes the
    header counts beyond the last row are read and ignored.  A header that is not a
    multiple of 8, exceeds :func:`stream_bound` or counts fewer bytes than the chunks take,
    or a stream running past ``buf``, is an :class:`~snpu.errors.IndexFormatError`."""
    raw = np.frombuffer(bytes(buf), np.uint8)
    if raw.size < HEADER:
        raise IndexFormatError(f"compressed stream: its header needs {HEADER} bytes, "
                               f"{raw.size} given")
    length = int(raw[:HEADER].view("<u8")[0])
    if length % 8 or length > stream_bound(n, c) - HEADER:
        raise IndexFormatError(f"compressed stream: the header's length {length} is not a "
                               f"multiple of 8 or exceeds the {stream_bound(n, c) - HEADER} "
                               f"bytes {n} rows of {c} values can take")
    end = HEADER + length
    if end > raw.size:
        raise IndexFormatError(f"compressed stream: the header's {length} bytes run past the "
                               f"{raw.size} bytes given")
    rows = np.zeros((n, c), np.int8)
    at = HEADER
    for r in range(n):
        for lo in range(0, c, CHUNK):
            width = min(CHUNK, c - lo)
            if at + 8 > end:
                raise IndexFormatError(f"compressed stream: row {r}, chunk {lo // CHUNK}: the "
                                       f"mask at byte {at} is past the header's length {length}")
            bits = np.unpackbits(raw[at:at + 8], bitorder="little").astype(bool)
            k = int(bits.sum())
            at += 8
            if at + 8 * -(-k // 8) > end:
                raise IndexFormatError(f"compressed stream: row {r}, chunk {lo // CHUNK}: its "
                                       f"{k} values at byte {at} run past the header's length "
                                       f"{length}")
            inside = bits[:width]
            rows[r, lo:lo + width][inside] = raw[at:at + int(inside.sum())].view(np.int8)
            at += 8 * -(-k // 8)
    return rows, end
