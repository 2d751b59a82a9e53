"""Mesh router: five ports, dimension-order routing, wormhole switching."""

from amaranth import *
from amaranth.lib import data, stream, wiring
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
    then north / south; local when both match: computed, one-hot, as the flit enters the
    input stage), which cannot deadlock on a mesh.  An idle output is granted to one of the
    inputs whose head wants it, round-robin after the last winner (one-hot), and the head
    moves in the same cycle; the output stays with that input until the packet's ``last``
    flit has passed (wormhole).  Flow control is valid / ready on every port; nothing is
    dropped.

    Latency and throughput: a head flit leaves an idle router 2 cycles after it enters
    (input stage, output stage); every output moves one flit per cycle, packets back to
    back.

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
        # an input stage holds the flit and the output its head asks for (one-hot), computed
        # as the flit enters (so the route compare and its decode are off the arbitration
        # path)
        self._in = [SkidBuffer(data.StructLayout({"flit": flit, "route": PORTS}))
                    for _ in range(PORTS)]
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
            m.d.comb += [stage.valid.eq(self.i[p].valid), self.i[p].ready.eq(stage.ready),
                         stage.payload.flit.eq(self.i[p].payload),
                         stage.payload.route.eq(self._route(self.i[p].payload))]
            wiring.connect(m, self._out[p].o, wiring.flipped(self.o[p]))
            with m.If(self.o[p].valid & self.o[p].ready):
                m.d.sync += self.flits[p].eq(self.flits[p] + 1)

        # each input's flit at the head of its stage, and where its head goes (meaningful
        # when the input is between packets)
        ins = [_Flit(b.o.valid, b.o.ready, b.o.payload.flit) for b in self._in]
        route = [b.o.payload.route for b in self._in]  # one-hot
        in_packet = Signal(PORTS)  # the input's packet holds an output

        # ---- Per output: grant (round-robin), forwarding until the packet's last flit.
        # An idle output is granted and the head moves in the same cycle (no bubble between
        # packets, at any hop count); arbitration is one-hot throughout (rotate-by-mask,
        # lowest set bit, AND-OR select) to keep that path short.
        busy = Signal(PORTS)
        valid = Cat(*[ins[p].valid for p in range(PORTS)])
        last = Cat(*[ins[p].payload.last for p in range(PORTS)])
        pop = Signal(PORTS)
        moved = []    # per output: the input it takes a flit from if it has one (one-hot)
        taken = []    # per output: the inputs it grants a new packet this cycle (one-hot)
        freed = []    # per output: the input whose packet's last flit leaves (one-hot)
        for o in range(PORTS):
            req = Signal(PORTS, name=f"req{o}")
            m.d.comb += req.eq(Cat(*[ins[p].valid & ~in_packet[p] & route[p][o]
                                     for p in range(PORTS)]))
            # inputs after the last winner come first (a thermometer mask, registered)
            prio = Signal(PORTS, name=f"prio{o}", init=(1 << PORTS) - 2)
            pick = Signal(PORTS, name=f"pick{o}")       # one-hot round-robin winner
            hi = req & prio
            m.d.comb += pick.eq(Mux(hi.any(), _lowest(hi), _lowest(req)))
            owner = Signal(PORTS, name=f"owner{o}")     # one-hot: who holds a busy output
            src = Signal(PORTS, name=f"src{o}")
            grant = Signal(name=f"grant{o}")   # a new packet takes the idle output now
            move = Signal(name=f"move{o}")
            done = Signal(name=f"done{o}")     # the packet's last flit leaves now
            m.d.comb += [grant.eq(~busy[o] & req.any()),
                         src.eq(Mux(busy[o], owner, pick)),
                         # a granted head is valid by construction: move needs no pick
                         move.eq(((busy[o] & (owner & valid).any()) | grant) & outs[o].ready),
                         done.eq(move & (src & last).any()),
                         outs[o].valid.eq(move)]
            data = 0
            for p in range(PORTS):
                data = data | Mux(src[p], ins[p].payload.as_value(), 0)
            m.d.comb += outs[o].payload.eq(data)
            t, f = Signal(PORTS, name=f"taken{o}"), Signal(PORTS, name=f"freed{o}")
            m.d.comb += [t.eq(Mux(grant, pick, 0)), f.eq(Mux(done, src, 0))]
            taken.append(t)
            freed.append(f)
            moved.append(src & Mux(outs[o].ready, (1 << PORTS) - 1, 0))
            with m.If(grant):
                m.d.sync += [busy[o].eq(1), owner.eq(pick), prio.eq(~((pick << 1) - 1)[:PORTS])]
            with m.If(done):       # (after the grant: a lone head frees it at once)
                m.d.sync += busy[o].eq(0)
        for p in range(PORTS):
            m.d.comb += self._in[p].o.ready.eq(pop[p])
        or_all = lambda vs: vs[0] if len(vs) == 1 else vs[0] | or_all(vs[1:])  # noqa: E731
        # an input pops when an output that takes from it is ready (each input feeds at most
        # one output: the one its packet holds, or the one its head is granted)
        m.d.comb += pop.eq(valid & or_all(moved))
        m.d.sync += in_packet.eq((in_packet | or_all(taken)) & ~or_all(freed))
        return m

    def _route(self, flit) -> Value:
        """The output a head flit asks for, one-hot: X first, then Y, then local."""
        h = data.View(HEAD, flit.data[:HEAD.size])
        port = Mux(h.x > self.x, EAST, Mux(h.x < self.x, WEST,
                   Mux(h.y > self.y, NORTH, Mux(h.y < self.y, SOUTH, LOCAL))))
        return Cat(*[port == p for p in range(PORTS)])


def _lowest(v: Value) -> Value:
    """One-hot of the lowest set bit of ``v`` (two logic levels for a few bits)."""
    return Cat(*[v[k] & ~v[:k].any() if k else v[0] for k in range(len(v))])


class _Flit:
    """valid / ready / payload of an input stage's flit, as the arbitration reads them."""

    def __init__(self, valid, ready, payload):
        self.valid, self.ready, self.payload = valid, ready, payload
