"""Mesh router: five ports, dimension-order routing, wormhole switching."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from snpu.verif.isa import MESH_BITS

from .noc import EAST, HEAD, LOCAL, NORTH, SOUTH, WEST, flit_layout
from .skid import PipeRegister, SkidBuffer

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


def link_layout(data_bits: int = 64) -> data.StructLayout:
    """What a link between routers carries: a flit and, with a head flit, the output it
    takes in the router it enters (one-hot over the ports; zero with a data flit)."""
    return data.StructLayout({"flit": flit_layout(data_bits), "route": PORTS})


class Router(wiring.Component):
    """A 5-port router of the 2-D mesh (ports: local, north, east, south, west).

    Routing is X first, then Y (east if the destination column is larger, west if
    smaller; then north / south; local when both match), which cannot deadlock on a mesh.
    It is computed a router ahead (*lookahead routing*): a head flit arrives with the
    output it takes here, and as it enters, the output it will take in the next router is
    computed and sent along with it.  (A head from the local port is routed in a register
    stage of its own first.)  Only the turns XY routing makes are wired (:data:`TURNS`: an
    east or west output has two possible requesters, a north or south output four, the
    local output five).

    Switch allocation and traversal are a cycle apart, so no combinational path runs from
    the requests through the crossbar, and the allocation overlaps the head's arrival:

    * *Allocation*: an output that is free (or frees this cycle) is granted to one of the
      inputs whose head asks for it, round-robin after the last winner (one-hot), into its
      ``owner`` register.  A head asks from the front of its input stage, or as it
      arrives (the output it takes comes with it), so a granted head crosses in the cycle
      after it arrives.  A head that was granted as it arrived but did not reach the front
      (the packet ahead of it has not left) loses the grant a cycle later and asks again
      from the front: an output is only ever held for the head at an input's front, as in
      plain wormhole switching, so the early grant adds no way to deadlock.
    * *Traversal*: the owner's flits pass through the crossbar (selected by ``owner``
      alone) to the output stage, the head first, until the packet's ``last`` flit has
      (wormhole).  An output is granted again in the cycle its last flit passes.

    Every input has a two-entry stage (front and skid, ``ready`` from a register); every
    output to a neighbour a :class:`~.skid.PipeRegister` (the neighbour's ``ready`` is a
    register), the output to the core a :class:`~.skid.SkidBuffer`.  Flow control is valid
    / ready on every port; nothing is dropped.

    Latency and throughput: a head flit leaves an idle router 2 cycles after it arrives
    (input stage, output stage; one more from the local port); every output moves one flit
    per cycle, packets back to back, also from one input.

    Parameters
    ----------
    data_bits:
        Flit payload width (:func:`~.noc.flit_layout`; 64 in the array).

    Members
    -------
    x, y : In(MESH_BITS)
        This router's column and row.
    i, o : In / Out(stream(LINK)), one per port
        ``i[p]`` comes from the neighbour on side ``p``; ``o[p]`` goes to it
        (:func:`link_layout`).  At the local port only the flit counts: ``i[LOCAL]`` from
        the core is routed here, ``o[LOCAL]`` carries no route.
    flits : Out(32), one per output
        Flits sent on each output since reset.
    """

    def __init__(self, data_bits: int = 64):
        self.flit = flit = flit_layout(data_bits)
        self.link = link = link_layout(data_bits)
        self._local = SkidBuffer(link)     # the local port's routing stage
        # the output stages: to a neighbour, whose input stage's ready is a register, a
        # plain register; to the core, a skid buffer
        self._out = [SkidBuffer(link) if p == LOCAL else PipeRegister(link)
                     for p in range(PORTS)]
        super().__init__({
            "x": In(MESH_BITS), "y": In(MESH_BITS),
            "i": In(stream.Signature(link)).array(PORTS),
            "o": Out(stream.Signature(link)).array(PORTS),
            "flits": Out(32).array(PORTS),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.local = self._local
        for p in range(PORTS):
            m.submodules[f"out{p}"] = self._out[p]
            wiring.connect(m, self._out[p].o, wiring.flipped(self.o[p]))
            with m.If(self.o[p].valid & self.o[p].ready):
                m.d.sync += self.flits[p].eq(self.flits[p] + 1)

        # ---- The local port's routing stage: the route of a head from the core.
        loc = self.i[LOCAL]
        at_head = Signal(init=1)   # the next flit from the core is a head
        with m.If(loc.valid & loc.ready):
            m.d.sync += at_head.eq(loc.payload.flit.last)
        m.d.comb += [self._local.i.valid.eq(loc.valid), loc.ready.eq(self._local.i.ready),
                     self._local.i.payload.flit.eq(loc.payload.flit),
                     self._local.i.payload.route.eq(
                         Mux(at_head, self._route_at(loc.payload.flit, self.x, self.y), 0))]
        arriving = [self._local.o if p == LOCAL else self.i[p] for p in range(PORTS)]

        # ---- Input stages (skid buffers: `main` is the front; an arriving flit is accepted
        # while the skid entry is free), each entry a flit, its route here (one-hot over
        # the input's turns) and its route in the next router.
        entry = data.StructLayout({"flit": self.flit, "route": PORTS, "next": PORTS})
        stages = [SkidBuffer(entry) for _ in range(PORTS)]
        main = [s.o.payload for s in stages]
        main_v = [s.o.valid for s in stages]
        free = [s.i.ready for s in stages]     # the skid entry is free
        in_route = []   # per input: the arriving flit's route here, its turns only
        for p in range(PORTS):
            m.submodules[f"in{p}"] = stages[p]
            a = arriving[p]
            r = Signal(PORTS, name=f"in_route{p}")
            m.d.comb += r.eq(Cat(*[a.payload.route[o] if o in TURNS[p] else C(0)
                                   for o in range(PORTS)]))
            in_route.append(r)
            m.d.comb += [stages[p].i.valid.eq(a.valid), a.ready.eq(free[p]),
                         stages[p].i.payload.flit.eq(a.payload.flit),
                         stages[p].i.payload.route.eq(r),
                         stages[p].i.payload.next.eq(self._next_route(p, a.payload.flit, r))]

        def route_of(p, o):
            return main[p].route[o]

        moved = {p: [] for p in range(PORTS)}
        for o in range(PORTS):
            srcs = REQUESTERS[o]
            n = len(srcs)
            busy = Signal(name=f"busy{o}")
            owner = Signal(n, name=f"owner{o}")     # one-hot: who holds the output
            passed = Signal(name=f"passed{o}")      # its packet's head has passed
            early = Signal(name=f"early{o}")        # granted last cycle to an arriving head
            # ---- Allocation requests: a head in the input stage not granted this output
            # yet, or one arriving (accepted this cycle: the skid entry is free).  Both may
            # ask at once, for different outputs; an output both ask for goes to the older
            # one, in the stage.
            from_main = Signal(n, name=f"from_main{o}")
            req = Signal(n, name=f"req{o}")
            m.d.comb += [
                from_main.eq(Cat(*[main_v[p] & route_of(p, o) & ~(busy & owner[k] & ~passed)
                                   for k, p in enumerate(srcs)])),
                req.eq(from_main | Cat(*[arriving[p].valid & free[p] & in_route[p][o]
                                         for p in srcs]))]
            prio = Signal(n, name=f"prio{o}", init=(1 << n) - 2)
            pick = Signal(n, name=f"pick{o}")
            hi = req & prio
            m.d.comb += pick.eq(Mux(hi.any(), _lowest(hi), _lowest(req)))
            # the owner's front flit is its packet's: a data flit once the head has
            # passed, else the head routed here (a head behind another packet waits)
            front = Cat(*[main_v[p] & (passed | route_of(p, o)) for p in srcs])
            move = Signal(name=f"move{o}")
            ending = Signal(name=f"ending{o}")
            grant = Signal(name=f"grant{o}")
            # a grant to an arriving head holds only if the head went straight to the front
            # (the packet ahead of it left as it arrived); else it is withdrawn a cycle
            # later: an output is never held for a head waiting behind another packet
            # (that could deadlock), only ever for one at the front
            at_front = Cat(*[main_v[p] & route_of(p, o) for p in srcs])
            cancel = Signal(name=f"cancel{o}")
            m.d.comb += [move.eq(busy & (owner & front).any() & self._out[o].i.ready),
                         ending.eq(move & (owner & Cat(*[main[p].flit.last for p in srcs])).any()),
                         cancel.eq(early & ~(owner & at_front).any()),
                         grant.eq((~busy | ending | cancel) & req.any())]
            payload = 0
            for k, p in enumerate(srcs):
                payload = payload | Mux(owner[k], Cat(main[p].flit.as_value(), main[p].next), 0)
            out = self._out[o].i
            m.d.comb += [out.valid.eq(move), out.payload.eq(payload)]
            if o == LOCAL:
                m.d.comb += out.payload.route.eq(0)
            for k, p in enumerate(srcs):
                moved[p].append(busy & owner[k] & front[k] & self._out[o].i.ready)
            m.d.sync += early.eq(grant & ~(pick & from_main).any())
            with m.If(grant):
                m.d.sync += [busy.eq(1), owner.eq(pick), prio.eq(~((pick << 1) - 1)[:n]),
                             passed.eq(0)]
            with m.Else():
                with m.If(ending | cancel):
                    m.d.sync += busy.eq(0)
                with m.If(move):
                    m.d.sync += passed.eq(1)

        # ---- The front pops when its output takes it.
        for p in range(PORTS):
            m.d.comb += stages[p].o.ready.eq(Cat(*moved[p]).any())
        return m

    def _route_at(self, flit, x, y) -> Value:
        """The output a head flit takes in the router at (x, y), one-hot over the ports."""
        h = data.View(HEAD, flit.data[:HEAD.size])
        port = Mux(h.x > x, EAST, Mux(h.x < x, WEST,
                   Mux(h.y > y, NORTH, Mux(h.y < y, SOUTH, LOCAL))))
        return Cat(*[port == o for o in range(PORTS)])

    def _next_route(self, side: int, flit, route) -> Value:
        """The output a head flit entering by ``side`` and leaving by ``route`` (one-hot)
        takes in the next router: for each way out, XY routing from that neighbour."""
        h = data.View(HEAD, flit.data[:HEAD.size])
        ydir = Mux(h.y > self.y, NORTH, Mux(h.y < self.y, SOUTH, LOCAL))
        nx_e, nx_w = (self.x + 1)[:MESH_BITS], (self.x - 1)[:MESH_BITS]
        ny_n, ny_s = (self.y + 1)[:MESH_BITS], (self.y - 1)[:MESH_BITS]
        ways = {EAST: Mux(h.x != nx_e, EAST, ydir), WEST: Mux(h.x != nx_w, WEST, ydir),
                NORTH: Mux(h.y != ny_n, NORTH, LOCAL), SOUTH: Mux(h.y != ny_s, SOUTH, LOCAL)}
        out = 0
        for o, port in ways.items():
            if o in TURNS[side]:
                out = out | Mux(route[o], Cat(*[port == q for q in range(PORTS)]), 0)
        return out


def _lowest(v: Value) -> Value:
    """One-hot of the lowest set bit of ``v`` (two logic levels for a few bits)."""
    return Cat(*[v[k] & ~v[:k].any() if k else v[0] for k in range(len(v))])
