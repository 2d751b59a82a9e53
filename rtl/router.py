"""Mesh router: five ports, dimension-order routing, wormhole switching."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from snpu.verif.isa import MESH_BITS

from .noc import EAST, HEAD, LOCAL, NORTH, SOUTH, WEST, flit_layout
from .skid import SkidBuffer

PORTS = 5

#: the outputs a flit entering by each input can ask for under XY routing: a flit never
#: turns back, and once it moves along Y it never turns to X (north is y + 1, so a flit
#: entering from the south is moving north)
TURNS = {
    LOCAL: (LOCAL, NORTH, EAST, SOUTH, WEST),
    WEST: (LOCAL, NORTH, EAST, SOUTH),
    EAST: (LOCAL, NORTH, SOUTH, WEST),
    SOUTH: (LOCAL, NORTH),
    NORTH: (LOCAL, SOUTH),
}
#: for each output, the inputs that can ask for it (in port order)
REQUESTERS = {o: tuple(p for p in range(PORTS) if o in TURNS[p]) for o in range(PORTS)}


class Router(wiring.Component):
    """A 5-port router of the 2-D mesh (ports: local, north, east, south, west).

    Every input and every output has a :class:`~.skid.SkidBuffer` (a register stage; no
    combinational path crosses the router).  The head flit of a packet at an input is
    routed X first, then Y (east if the destination column is larger, west if smaller;
    then north / south; local when both match), which cannot deadlock on a mesh.  The
    route is computed as the flit enters the input stage, one-hot, and only for head
    flits (an input counts its flits as they enter, so a data flit's route is empty): the
    requests the arbiters see come straight from registers.  Only the turns XY routing
    makes are wired (:data:`TURNS`: an east or west output has two possible requesters, a
    north or south output four, the local output five).

    Each output allocates and forwards in two steps a cycle apart, so no combinational
    path runs from the requests through the crossbar.  *Allocation*: a free output is
    granted to one of the inputs whose head wants it, round-robin after the last winner
    (one-hot), into the ``owner`` register; the input stops asking.  *Traversal*: from the
    next cycle the owner's flits pass through the crossbar (selected by ``owner`` alone)
    until the packet's ``last`` flit has (wormhole).  An output is granted again in the
    cycle its last flit passes.  Flow control is valid / ready on every port; nothing is
    dropped.

    Latency and throughput: a head flit leaves an idle router 3 cycles after it enters
    (input stage, grant, output stage); every output moves one flit per cycle, packets
    back to back (from different inputs; an input's next head asks for its output once
    the last packet's last flit has left, a cycle later).

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
        # an input stage holds the flit and, for a head, the output it asks for (one-hot
        # over the input's turns)
        self._in = [SkidBuffer(data.StructLayout({"flit": flit, "route": len(TURNS[p])}))
                    for p in range(PORTS)]
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
        outs = [b.i for b in self._out]
        for p in range(PORTS):
            stage = self._in[p].i
            # the next flit to enter is a head (the last one to enter ended its packet)
            at_head = Signal(init=1, name=f"at_head{p}")
            with m.If(stage.valid & stage.ready):
                m.d.sync += at_head.eq(self.i[p].payload.last)
            m.d.comb += [stage.valid.eq(self.i[p].valid), self.i[p].ready.eq(stage.ready),
                         stage.payload.flit.eq(self.i[p].payload),
                         stage.payload.route.eq(Mux(at_head, self._route(p, self.i[p].payload), 0))]
            wiring.connect(m, self._out[p].o, wiring.flipped(self.o[p]))
            with m.If(self.o[p].valid & self.o[p].ready):
                m.d.sync += self.flits[p].eq(self.flits[p] + 1)

        valid = [b.o.valid for b in self._in]
        last = [b.o.payload.flit.last for b in self._in]
        flit = [b.o.payload.flit.as_value() for b in self._in]
        # the input's head has been granted an output and has not left yet
        alloc = Signal(PORTS)
        pop = Signal(PORTS)

        # ---- Per output, two steps a cycle apart: allocation (a round-robin grant, from
        # registers, into the `owner` register), then traversal (the owner's flits through
        # the crossbar, from `owner` alone, until the packet's last flit has passed).  An
        # output is granted again in the cycle its packet's last flit passes, so packets
        # follow each other without a bubble.
        granted = {p: [] for p in range(PORTS)}    # per input: the outputs granting it now
        taken_from = {p: [] for p in range(PORTS)}  # per input: its flit moves out of o now
        for o in range(PORTS):
            srcs = REQUESTERS[o]
            n = len(srcs)
            req = Signal(n, name=f"req{o}")
            m.d.comb += req.eq(Cat(*[valid[p] & self._in[p].o.payload.route[TURNS[p].index(o)]
                                     & ~alloc[p] for p in srcs]))
            # requesters after the last winner come first (a thermometer mask, registered)
            prio = Signal(n, name=f"prio{o}", init=(1 << n) - 2)
            pick = Signal(n, name=f"pick{o}")       # one-hot round-robin winner
            hi = req & prio
            m.d.comb += pick.eq(Mux(hi.any(), _lowest(hi), _lowest(req)))
            busy = Signal(name=f"busy{o}")
            owner = Signal(n, name=f"owner{o}")     # one-hot: who holds the output
            move = Signal(name=f"move{o}")          # the owner's flit passes now
            ending = Signal(name=f"ending{o}")      # ... and it is its packet's last
            grant = Signal(name=f"grant{o}")
            m.d.comb += [move.eq(busy & (owner & Cat(*[valid[p] for p in srcs])).any()
                                 & outs[o].ready),
                         ending.eq(move & (owner & Cat(*[last[p] for p in srcs])).any()),
                         grant.eq((~busy | ending) & req.any()),
                         outs[o].valid.eq(move)]
            payload = 0
            for k, p in enumerate(srcs):
                payload = payload | Mux(owner[k], flit[p], 0)
            m.d.comb += outs[o].payload.eq(payload)
            for k, p in enumerate(srcs):
                granted[p].append(grant & pick[k])
                taken_from[p].append(busy & owner[k] & outs[o].ready)
            with m.If(grant):
                m.d.sync += [busy.eq(1), owner.eq(pick), prio.eq(~((pick << 1) - 1)[:n])]
            with m.Elif(ending):
                m.d.sync += busy.eq(0)
        # an input pops when the output its packet holds takes its flit (an input's flits
        # go to one output at a time)
        for p in range(PORTS):
            m.d.comb += [pop[p].eq(valid[p] & Cat(*taken_from[p]).any()),
                         self._in[p].o.ready.eq(pop[p])]
            with m.If(alloc[p]):
                m.d.sync += alloc[p].eq(~pop[p])   # the first flit to leave is the head
            with m.Else():
                m.d.sync += alloc[p].eq(Cat(*granted[p]).any())
        return m

    def _route(self, side: int, flit) -> Value:
        """The output a head flit entering by ``side`` asks for, one-hot over
        ``TURNS[side]``: X first, then Y, then local."""
        h = data.View(HEAD, flit.data[:HEAD.size])
        if side == LOCAL:
            port = Mux(h.x > self.x, EAST, Mux(h.x < self.x, WEST,
                       Mux(h.y > self.y, NORTH, Mux(h.y < self.y, SOUTH, LOCAL))))
        elif side in (WEST, EAST):   # moving along X: on, or turn to Y / local
            port = Mux(h.x != self.x, EAST if side == WEST else WEST,
                       Mux(h.y > self.y, NORTH, Mux(h.y < self.y, SOUTH, LOCAL)))
        else:                        # moving along Y: on, or local
            port = Mux(h.y != self.y, NORTH if side == SOUTH else SOUTH, LOCAL)
        return Cat(*[port == o for o in TURNS[side]])


def _lowest(v: Value) -> Value:
    """One-hot of the lowest set bit of ``v`` (two logic levels for a few bits)."""
    return Cat(*[v[k] & ~v[:k].any() if k else v[0] for k in range(len(v))])
