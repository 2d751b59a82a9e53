"""The mesh network's flits and packet format (what routers and NET units exchange).

A packet is a head flit followed by ``ceil(bytes / 8)`` data flits, the last one marked
``last`` (a packet of no data is a head flit marked ``last``).  Routers take the flit width
as a parameter (:func:`flit_layout`); the array uses 64-bit flits.  The head carries, in
the low bits of its data:

=======  =====  ================================================================
field    bits   meaning
=======  =====  ================================================================
``x``    4      destination column
``y``    4      destination row
``addr`` 20     destination local-memory byte address (8-aligned)
``tag``  4      destination arrival counter
``bytes``16     payload bytes (the last data flit may be partly used)
=======  =====  ================================================================
"""

from amaranth.lib import data

from snpu.verif.isa import MESH_BITS

HEAD = data.StructLayout({"x": MESH_BITS, "y": MESH_BITS, "addr": 20, "tag": 4, "bytes": 16})


def flit_layout(data_bits: int = 64) -> data.StructLayout:
    """A flit of ``data_bits`` (at least the head's 48 bits) plus the ``last`` flag."""
    if data_bits < HEAD.size:
        raise ValueError(f"flits of {data_bits} bits cannot carry the {HEAD.size}-bit head")
    return data.StructLayout({"data": data_bits, "last": 1})


#: the flit of the array (the NET unit moves 64-bit local-memory words)
FLIT = flit_layout(64)

#: router ports
LOCAL, NORTH, EAST, SOUTH, WEST = range(5)
PORT_NAMES = ("local", "north", "east", "south", "west")
