"""Payload layouts shared by the datapath blocks.

Every stream between blocks carries one of these ``data.StructLayout``s; fields have names,
never bit ranges.  ``CHUNK`` is the index chunk width ``B`` (one 64-bit buffer word).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Value
from amaranth.lib import data

CHUNK = 64  #: index bits per chunk (CoreConfig.chunk_bits)
ADDR = 16  #: byte address width inside nbuf / wbuf / nidx / widx


def chunk_layout() -> data.StructLayout:
    """One side's index chunk: its bits and where its first element lives in value storage.

    ``base`` is the value address of position 0 of the chunk (unpacked storage) or of the
    chunk's first kept element (packed storage)."""
    return data.StructLayout({"bits": CHUNK, "base": ADDR, "last": 1})


def entry_layout() -> data.StructLayout:
    """One stride-index entry of a row.  ``none`` marks the end of an empty list."""
    return data.StructLayout({"value": 8, "base": ADDR, "none": 1, "last": 1})


def entry_in_chunk(chunk) -> Value:
    """The stride entry carried in a chunk-layout item (``chunk``, a view or signal of
    :func:`chunk_layout`), as a value of :func:`entry_layout`.

    The matrix unit hands the shared neuron side to its lanes as one stream of chunk-layout
    items: chunks on the AND path, stride entries on the merge path (an fc uses one of the
    two), so each lane keeps one queue, not one per path.  An entry travels as
    :func:`chunk_in_entry` packs it: its value in ``bits[0:8]``, ``none`` in ``bits[8]``,
    its ``base`` and ``last`` in the chunk's own -- the fields line up, so packing and
    unpacking cost no logic."""
    return Cat(chunk.bits[:8], chunk.base, chunk.bits[8], chunk.last)


def chunk_in_entry(entry) -> dict:
    """The chunk-layout fields that carry ``entry`` (:func:`entry_in_chunk`'s inverse):
    ``{"bits", "base", "last"}``, the bits above ``bits[8]`` zero."""
    return {"bits": Cat(entry.value, entry.none), "base": entry.base, "last": entry.last}


def combined_layout() -> data.StructLayout:
    """The connection unit's output: either a combined chunk (``stride = 0``: its combined
    bits are ``n_bits & w_bits``, formed by the compactor) or one entry of the merged stride
    index (``stride = 1``) with its pair's addresses in the bases.  A stride item's chunk
    fields (``n_bits``, ``w_bits``, ``pairs_le1``, ``pairs_le2``) are unspecified: the
    compactor never reads them (the connection unit leaves whatever chunk it last joined
    there rather than put a multiplexer in front of them)."""
    return data.StructLayout({
        "stride": 1,
        "n_bits": CHUNK,    # neuron-side bits (chunk; also for ranks in packed storage)
        "w_bits": CHUNK,    # weight-side bits
        "n_base": ADDR,
        "w_base": ADDR,
        "pair": 1,          # stride item: 1 if it is a pair, 0 for an empty row's end marker
        "last": 1,          # last item of the row
        # chunk item: n_bits & w_bits has at most one / at most two bits set (worked out
        # as the item is made, so the compactor's "last pick" decisions start at registers)
        "pairs_le1": 1,
        "pairs_le2": 1,
    })


def pair_count_flags(n_bits: int, w_bits: int) -> dict:
    """A chunk item's ``pairs_le1`` and ``pairs_le2`` (what the connection unit sets)."""
    k = bin(n_bits & w_bits).count("1")
    return {"pairs_le1": int(k <= 1), "pairs_le2": int(k <= 2)}


def pairs_layout(lanes: int) -> data.StructLayout:
    """Up to ``lanes`` processed pairs (addresses of the neuron and the weight)."""
    return data.StructLayout({
        "n_addr": data.ArrayLayout(ADDR, lanes),
        "w_addr": data.ArrayLayout(ADDR, lanes),
        "valid": lanes,
        "last": 1,
    })
