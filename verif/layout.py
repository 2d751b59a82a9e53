"""On-chip data layouts: how an fc weight tile lives in the lanes' banks.

Row ``r`` of a weight tile belongs to lane ``r % P``; inside a lane its rows follow each other
in increasing ``r`` (local row ``k = r // P``).  Each lane has a value bank (``wbuf``) and an
index bank (``widx``); the ``fc`` instruction gives the same start offsets for every lane.

========  =========================================  =========================================
format    widx bank (per row, back to back)          wbuf bank (per row, back to back)
========  =========================================  =========================================
dense     nothing                                    all ``n_in`` weights
direct    ``ceil(n_in / B) * B / 8`` bytes of bits   the kept weights, in input order
stride    uint16 entry count + entries               the kept weights, in input order
========  =========================================  =========================================

``B`` is the core's ``chunk_bits``.  Kept weights are those whose index bit is set (a kept
weight may be zero).  Neurons use the same encodings in ``nidx`` (see the ISA).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import index as ix


@dataclass
class LaneBank:
    """The bytes of one lane's share of a weight tile."""

    wbuf: bytes
    widx: bytes


def lane_rows(rows: int, lanes: int, lane: int) -> range:
    """Global row numbers held by ``lane``."""
    return range(lane, rows, lanes)


def encode_weight_tile(w: np.ndarray, fmt: str, lanes: int, chunk_bits: int,
                       mask: np.ndarray | None = None) -> list[LaneBank]:
    """Encode ``w[rows, n_in]`` (int8) for ``fmt`` into one :class:`LaneBank` per lane.

    ``mask`` selects the kept weights (default: the nonzero ones); ignored for dense.
    """
    w = np.asarray(w)
    if w.ndim != 2:
        raise ValueError(f"weight tile must be 2-D, got shape {w.shape}")
    w = w.astype(np.int8)
    rows, n_in = w.shape
    if fmt not in ix.FORMATS:
        raise ValueError(f"unknown weight format {fmt!r}")
    if mask is None:
        mask = w != 0
    banks = []
    for lane in range(lanes):
        vals, idx = [], []
        for r in lane_rows(rows, lanes, lane):
            if fmt == "dense":
                vals.append(w[r].tobytes())
                continue
            bits = np.asarray(mask[r], dtype=bool)
            vals.append(w[r][bits].tobytes())
            if fmt == "direct":
                idx.append(ix.encode_direct(bits, chunk_bits))
            else:
                idx.append(ix.encode_stride(ix.direct_to_stride(bits)))
        banks.append(LaneBank(b"".join(vals), b"".join(idx)))
    return banks


@dataclass
class DecodedTile:
    """A weight tile read back from the banks: masks, dense values and bytes walked."""

    mask: np.ndarray  #: bool [rows, n_in]
    values: np.ndarray  #: int8 [rows, n_in], zero where not kept
    wbuf_end: list[int]  #: per lane: one past the last wbuf byte read (relative to base)
    widx_end: list[int]  #: per lane: one past the last widx byte read (relative to base)


def decode_weight_tile(wbuf: np.ndarray, widx: np.ndarray, wbase: int, ibase: int, n_in: int,
                       rows: int, fmt: str, chunk_bits: int) -> DecodedTile:
    """Read a tile back from lane banks ``wbuf[lane, bytes]`` / ``widx[lane, bytes]``.

    Raises :class:`snpu.errors.IndexFormatError` (or ``IndexError`` for reads past the bank)
    on malformed data; the golden model turns those into execution errors.
    """
    lanes, wsize = wbuf.shape
    mask = np.zeros((rows, n_in), dtype=bool)
    values = np.zeros((rows, n_in), dtype=np.int8)
    wend, iend = [0] * lanes, [0] * lanes
    row_bytes = ix.direct_row_bytes(n_in, chunk_bits)
    for lane in range(lanes):
        wp, ip = wbase, ibase
        for r in lane_rows(rows, lanes, lane):
            if fmt == "dense":
                bits = np.ones(n_in, dtype=bool)
            elif fmt == "direct":
                bits = ix.decode_direct(widx[lane], n_in, ip)
                ip += row_bytes
            else:
                strides, used = ix.decode_stride(widx[lane], ip)
                bits = ix.stride_to_direct(strides, n_in)
                ip += used
            k = int(bits.sum())
            if wp + k > wsize:
                raise IndexError(f"lane {lane} row {r}: weights [{wp}, {wp + k}) run past the "
                                 f"{wsize}-byte wbuf bank")
            mask[r] = bits
            values[r, bits] = wbuf[lane, wp:wp + k].view(np.int8)
            wp += k
        wend[lane], iend[lane] = wp - wbase, ip - ibase
    return DecodedTile(mask, values, wend, iend)
