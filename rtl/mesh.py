"""The mesh network on its own: ``width x height`` routers linked to their neighbours."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from snpu.verif.isa import MESH_BITS

from .noc import EAST, LOCAL, NORTH, SOUTH, WEST, flit_layout
from .router import PORTS, Router

MAX_SIDE = 1 << MESH_BITS

#: the neighbour across each side, and the side a link enters it by
STEP = {EAST: (1, 0), WEST: (-1, 0), NORTH: (0, 1), SOUTH: (0, -1)}
OPPOSITE = {EAST: WEST, WEST: EAST, NORTH: SOUTH, SOUTH: NORTH}


def node_index(x: int, y: int, width: int) -> int:
    """The index of node (x, y) in per-node port arrays: row-major from (0, 0)."""
    return y * width + x


class RouterMesh(wiring.Component):
    """``width x height`` :class:`~.router.Router` s; router (x, y) sits at column x, row y
    (north is y + 1) and its output on each side feeds the neighbour's input on the
    opposite side.  Sides on the mesh's edge are tied off: XY routing never sends a packet
    off the mesh when its destination is inside it (the NET unit faults on any other).

    Latency: a head flit takes 2 cycles through each router (input stage, output stage:
    :data:`~snpu.verif.timing.HOP_CYCLES`) and one more in the first (the local port's
    routing stage: :data:`~snpu.verif.timing.INJECT_CYCLES`); a link carries one flit per
    cycle in each direction.

    ``data_bits``: the flit payload width (64 in the array).

    Members
    -------
    inject : In(stream(FLIT)).array(n)
        Into node k's router, from its core (``n = width * height``, :func:`node_index`).
    eject : Out(stream(FLIT)).array(n)
        Out of node k's router, to its core.
    flits : Out(32).array(n, 5)
        Flits each router has sent out of each port (:data:`.noc.PORT_NAMES`).
    """

    def __init__(self, width: int, height: int, data_bits: int = 64):
        if not (1 <= width <= MAX_SIDE and 1 <= height <= MAX_SIDE):
            raise ValueError(f"a mesh is 1..{MAX_SIDE} nodes on a side, got {width} x {height}")
        self.width, self.height = width, height
        n = width * height
        self.routers = [Router(data_bits) for _ in range(n)]
        flit = flit_layout(data_bits)
        super().__init__({
            "inject": In(stream.Signature(flit)).array(n),
            "eject": Out(stream.Signature(flit)).array(n),
            "flits": Out(32).array(n, PORTS),
        })

    def elaborate(self, platform):
        m = Module()
        w, h = self.width, self.height
        for y in range(h):
            for x in range(w):
                k = node_index(x, y, w)
                r = self.routers[k]
                m.submodules[f"router_{x}_{y}"] = r
                m.d.comb += [r.x.eq(x), r.y.eq(y)]
                inject, eject = self.inject[k], self.eject[k]
                m.d.comb += [r.i[LOCAL].valid.eq(inject.valid), inject.ready.eq(r.i[LOCAL].ready),
                             r.i[LOCAL].payload.flit.eq(inject.payload),
                             eject.valid.eq(r.o[LOCAL].valid), r.o[LOCAL].ready.eq(eject.ready),
                             eject.payload.eq(r.o[LOCAL].payload.flit)]
                for p in range(PORTS):
                    m.d.comb += self.flits[k][p].eq(r.flits[p])
                for side, (dx, dy) in STEP.items():
                    nx, ny = x + dx, y + dy
                    if 0 <= nx < w and 0 <= ny < h:
                        other = self.routers[node_index(nx, ny, w)]
                        wiring.connect(m, r.o[side], other.i[OPPOSITE[side]])
                    else:
                        m.d.comb += [r.i[side].valid.eq(0), r.o[side].ready.eq(0)]
        return m
