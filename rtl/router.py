"""Mesh router: five ports, dimension-order routing, wormhole switching."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from snpu.verif.isa import MESH_BITS

from .noc import EAST, HEAD, LOCAL, NORTH, SOUTH, WEST, flit_layout
from .skid import SkidBuffer

PORTS = 5


class Router(wiring.Component):
    """A 5-port router of the 2-D mesh (ports: local, north, east, south, west).

    Every input and every output has a :class:`~.skid.SkidBuffer` (a register stage; no
    combinational path crosses the router).  The head flit of a packet at an input is
    routed X first, then Y (east if the destination column is larger, west if smaller;
    then north / south; local when both match), which cannot deadlock on a mesh.  An idle
    output is granted to one of the inputs whose head wants it, round-robin after the last
    winner, and the head moves in the same cycle; the output stays with that input until
    the packet's ``last`` flit has passed (wormhole).  Flow control is valid / ready on
    every port; nothing is dropped.

    Latency and throughput: a head flit leaves an idle router 2 cycles after it enters
    (input stage, output stage); every output moves one flit per cycle.

    Parameters
    ----------
    data_bits:
        Flit payload width (:func:`~.noc.flit_layout`; 64 in the array).

    Members
    -------
    x, y : In(MESH_BITS)
        This router's column and row.
    i, o : In / Out(stream(FLIT)), one per port
        ``i[p]`` comes from the neighbour on side ``p`` (``i[LOCAL]`` from the core);
        ``o[p]`` goes to it.
    flits : Out(32), one per output
        Flits sent on each output since reset.
    """

    def __init__(self, data_bits: int = 64):
        self.flit = flit = flit_layout(data_bits)
        self._in = [SkidBuffer(flit) for _ in range(PORTS)]
        self._out = [SkidBuffer(flit) for _ in range(PORTS)]
        super().__init__({
            "x": In(MESH_BITS), "y": In(MESH_BITS),
            "i": In(stream.Signature(flit)).array(PORTS),
            "o": Out(stream.Signature(flit)).array(PORTS),
            "flits": Out(32).array(PORTS),
        })

    def elaborate(self, platform):
        m = Module()
        for p in range(PORTS):
            m.submodules[f"in{p}"] = self._in[p]
            m.submodules[f"out{p}"] = self._out[p]
        ins = [b.o for b in self._in]       # each input's flit at the head of its stage
        outs = [b.i for b in self._out]
        for p in range(PORTS):
            wiring.connect(m, wiring.flipped(self.i[p]), self._in[p].i)
            wiring.connect(m, self._out[p].o, wiring.flipped(self.o[p]))
            with m.If(self.o[p].valid & self.o[p].ready):
                m.d.sync += self.flits[p].eq(self.flits[p] + 1)

        # ---- Routing of each input's head flit (meaningful when the input is between packets).
        route = [Signal(range(PORTS), name=f"route{p}") for p in range(PORTS)]
        in_packet = Signal(PORTS)  # the input's packet holds an output
        for p in range(PORTS):
            h = Signal(HEAD, name=f"head_fields{p}")
            m.d.comb += h.eq(ins[p].payload.data[:HEAD.size])
            with m.If(h.x > self.x):
                m.d.comb += route[p].eq(EAST)
            with m.Elif(h.x < self.x):
                m.d.comb += route[p].eq(WEST)
            with m.Elif(h.y > self.y):
                m.d.comb += route[p].eq(NORTH)
            with m.Elif(h.y < self.y):
                m.d.comb += route[p].eq(SOUTH)
            with m.Else():
                m.d.comb += route[p].eq(LOCAL)

        # ---- Per output: grant (round-robin), forwarding until the packet's last flit.
        busy = Signal(PORTS)
        owner = [Signal(range(PORTS), name=f"owner{o}") for o in range(PORTS)]
        last_won = [Signal(range(PORTS), name=f"last_won{o}") for o in range(PORTS)]
        pop = [Signal(name=f"pop{p}") for p in range(PORTS)]
        valid = Array([ins[p].valid for p in range(PORTS)])
        flits = Array([ins[p].payload for p in range(PORTS)])
        for o in range(PORTS):
            req = Cat(*[ins[p].valid & ~in_packet[p] & (route[p] == o) for p in range(PORTS)])
            # the first requester after the last winner, cyclically
            pick = Signal(range(PORTS), name=f"pick{o}")
            for k in reversed(range(1, PORTS + 1)):
                for lw in range(PORTS):
                    cand = (lw + k) % PORTS
                    with m.If((last_won[o] == lw) & req[cand]):
                        m.d.comb += pick.eq(cand)
            grant = Signal(name=f"grant{o}")   # a new packet takes the idle output now
            src = Signal(range(PORTS), name=f"src{o}")
            move = Signal(name=f"move{o}")
            m.d.comb += [grant.eq(~busy[o] & req.any()),
                         src.eq(Mux(busy[o], owner[o], pick)),
                         move.eq((busy[o] | grant) & valid[src] & outs[o].ready),
                         outs[o].valid.eq(move), outs[o].payload.eq(flits[src])]
            # (no two outputs take one input in a cycle: an input's head routes to one output)
            for p in range(PORTS):
                with m.If(move & (src == p)):
                    m.d.comb += pop[p].eq(1)
            with m.If(grant):
                m.d.sync += [busy[o].eq(1), owner[o].eq(pick), last_won[o].eq(pick),
                             in_packet.bit_select(pick, 1).eq(1)]
            with m.If(move & flits[src].last):   # (after the grant: a lone head frees it)
                m.d.sync += [busy[o].eq(0), in_packet.bit_select(src, 1).eq(0)]
        for p in range(PORTS):
            m.d.comb += ins[p].ready.eq(pop[p])
        return m
