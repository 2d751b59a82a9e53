"""NET unit: ``send`` local memory to another core of the mesh, ``recv`` arrivals; and the
receiving side, which writes arriving packets into local memory and counts them."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from snpu.config import CoreConfig
from snpu.verif.isa import MESH_BITS, NET_TAGS, Unit

from .local_memory import NET_WRITE
from .microcode import args_layout, op_codes, registers_layout
from .noc import FLIT, HEAD
from .status import ErrorCode

CODES = op_codes(Unit.NET)
COUNT_BITS = 21


class NetUnit(wiring.Component):
    """Executes ``send`` and ``recv`` (golden model: ``Machine._send`` / ``_recv``) and
    receives packets.

    **send**: checks first (``ALIGN``: src or dst not 8-aligned; ``RANGE``: the destination
    outside the mesh, or either region past local memory; nothing is sent then), then splits
    the region into packets of ``8 << net.packet_log2`` bytes: a head flit, then the words
    read from local memory.  ``done`` when the last flit has entered the router.
    **recv**: ``RANGE`` if the region lies past local memory; else waits until the tag's
    arrival counter holds ``bytes`` and takes them.
    **Arrivals** (independent of the instructions): a packet's head gives address, tag and
    length; its data flits are written to local memory (byte enables on the last, partial
    word); the cycle after its last flit is written the tag's counter grows by its length.
    The 16 counters are a LUT RAM, read and written once a cycle (an arrival's count, or
    else a recv's take).

    Members
    -------
    start, op, args, regs, done, error :
        The executor hand-off from the NET unit's front end.
    x, y, w, h :
        This core's coordinates and the mesh size.
    inject : Out(stream(FLIT)); eject : In(stream(FLIT))
        The router's local port.
    mem_rd, mem_rdata, mem_rvalid, mem_wr :
        Local memory's NET ports.
    bytes_sent, bytes_received : Out(32)
    """

    def __init__(self, config: CoreConfig):
        self._cfg = config
        self._tx = SyncFIFOBuffered(width=FLIT.size, depth=8)
        super().__init__({
            "start": In(1),
            "op": In(range(len(CODES))),
            "args": In(args_layout(Unit.NET)),
            "regs": In(registers_layout(Unit.NET)),
            "done": Out(1),
            "error": Out(ErrorCode),
            "x": In(MESH_BITS), "y": In(MESH_BITS),
            "w": In(MESH_BITS + 1), "h": In(MESH_BITS + 1),
            "inject": Out(stream.Signature(FLIT)),
            "eject": In(stream.Signature(FLIT)),
            "mem_rd": Out(stream.Signature(17)),
            "mem_rdata": In(64),
            "mem_rvalid": In(1),
            "mem_wr": Out(stream.Signature(NET_WRITE)),
            "bytes_sent": Out(32),
            "bytes_received": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        size = self._cfg.local_bytes
        m.submodules.tx = tx = self._tx
        m.d.comb += [self.inject.payload.eq(tx.r_data), self.inject.valid.eq(tx.r_rdy),
                     tx.r_en.eq(self.inject.ready)]
        # The arrival counters: a LUT RAM with one read-modify-write per cycle (a word that
        # was never written reads 0: `written`, registers, is what the core's start clears).
        counts = Memory(shape=COUNT_BITS, depth=NET_TAGS, init=[])
        m.submodules.counts = counts
        written = Signal(NET_TAGS)
        # a packet's bytes count the cycle after its last flit is written (from registers)
        add = Signal(COUNT_BITS)      # bytes counted this cycle ...
        add_tag = Signal(4)           # ... on this tag
        arriving = Signal()           # add != 0, registered with it
        m.d.sync += [add.eq(0), arriving.eq(0)]
        # A recv takes its bytes off its counter after it finds them there, from registers
        # (`taking`): the cycle after, or the one after that if an arrival on another tag
        # writes first (arrivals are two cycles apart at least); the next recv compares
        # three cycles later at the earliest (END, IDLE, CHECK).
        taking = Signal()
        take = Signal(COUNT_BITS)
        take_tag = Signal(4)
        took = Signal()               # the take is written this cycle (alone or with the arrival)
        m.d.comb += took.eq(taking & (~arriving | (take_tag == add_tag)))
        # The counter written this cycle, `arriving ? add_tag : take_tag`, and whether it
        # was written since start: registers, set where `add_tag` / `take_tag` are set (an
        # arrival's last flit, a recv finding its bytes) and else to the pending take's tag,
        # so the read-modify-write starts at a register, not at a multiplexer of two tags
        # and of the written bits.  (An arrival's tag wins: a take waits while an arrival on
        # another tag writes, and arrivals are two cycles apart at least.)
        upd_tag = Signal(4)
        upd_written = Signal()

        def count(port, tag):
            """Counter ``tag`` read on ``port`` (0 if not written since start)."""
            m.d.comb += port.addr.eq(tag)
            return Mux(written.bit_select(tag, 1), port.data, 0)

        rmw = counts.read_port(domain="comb")
        wp = counts.write_port()
        m.d.comb += [wp.addr.eq(upd_tag), rmw.addr.eq(upd_tag),
                     # (the change is worked out from registers beside the read: one sum
                     # after the counter, not two)
                     wp.data.eq(Mux(upd_written, rmw.data, 0) + Mux(took, add - take, add)),
                     wp.en.eq(arriving | taking)]
        with m.If(wp.en):
            m.d.sync += written.eq(written | (1 << upd_tag))

        def next_update(tag):
            """Counter ``tag`` is the one written next cycle."""
            return [upd_tag.eq(tag),
                    upd_written.eq(written.bit_select(tag, 1) | (wp.en & (upd_tag == tag)))]
        with m.If(taking):
            m.d.sync += next_update(take_tag)
        with m.If(took):
            m.d.sync += taking.eq(0)
        look = counts.read_port(domain="comb")   # the counter a recv compares (`enough`)

        # ---- Instructions.
        op = Signal(range(len(CODES)))
        s = Signal(self.args.send.shape())
        r = Signal(self.args.recv.shape())
        packet = Signal(12)
        with m.If(self.start):
            m.d.sync += [op.eq(self.op), s.eq(self.args.send), r.eq(self.args.recv),
                         packet.eq(8 << self.regs.packet_log2), self.error.eq(ErrorCode.NONE)]
        left = Signal(12)          # data words of the current packet still to read
        inflight = Signal(range(6))
        issue = Signal()
        rd_addr = Signal(17)       # next local word to read
        m.d.comb += [self.mem_rd.payload.eq(rd_addr), self.mem_rd.valid.eq(issue)]
        # the word read four cycles ago ends its packet (the local memory's read latency 4)
        read_last = Signal()
        read_last3 = Signal()      # ... the word read three cycles ago
        read_last2 = Signal()      # ... the word read two cycles ago
        read_last1 = Signal()      # ... the word read last cycle
        head = Signal(HEAD)
        # The next packet's destination and the bytes still to send, registers stepped by
        # each packet; its size and whether every byte is sent registered from them every
        # cycle: HEAD is entered at least a cycle after they change (after CHECK, or after a
        # packet's DATA), so those are current there.
        pk_dst = Signal(17)
        unsent = Signal(17)
        pk_bytes = Signal(17)
        all_sent = Signal()
        m.d.sync += [pk_bytes.eq(Mux(unsent > packet, packet, unsent)),
                     all_sent.eq(unsent == 0)]
        m.d.comb += [head.x.eq(s.x), head.y.eq(s.y), head.addr.eq(pk_dst), head.tag.eq(s.tag),
                     head.bytes.eq(pk_bytes)]
        with m.If(self.mem_rvalid):
            m.d.comb += [tx.w_en.eq(1), tx.w_data.eq(Cat(self.mem_rdata, read_last))]
        accepted = Signal()
        m.d.comb += accepted.eq(issue & self.mem_rd.ready)
        m.d.sync += inflight.eq(inflight + accepted - self.mem_rvalid)
        # Room in `tx` for one more read, a register: next cycle's flits queued or in
        # flight are at most this cycle's plus this cycle's new read or head flit (a word
        # arriving moves from in flight to queued; a flit leaving is not counted, so the
        # room may show up a cycle late).  The flits queued or in flight are a register
        # (`occupied`, tx.level + inflight), compared with the two bounds and selected by
        # whether a read or a head goes in now (never both: reads are made in DATA, heads
        # in HEAD): no adder lies between the FIFO's level and the local memory's read
        # port, nor between the send's state and the room.
        occupied = Signal(range(tx.depth + 6))
        head_in = Signal()
        m.d.comb += head_in.eq(tx.w_en & ~self.mem_rvalid)
        m.d.sync += occupied.eq(occupied + accepted + head_in - (tx.r_en & tx.r_rdy))
        room = Signal()
        m.d.sync += room.eq(Mux(accepted | head_in, occupied < tx.depth - 2,
                                occupied < tx.depth - 1))
        m.d.sync += [read_last1.eq(accepted & (left == 1)), read_last2.eq(read_last1),
                     read_last3.eq(read_last2), read_last.eq(read_last3)]
        # The recv's counter compared in every cycle and registered: a cycle late, which
        # only delays a recv (counts fall only by this unit's takes, each written before the
        # next recv's first comparison)
        enough = Signal()
        m.d.sync += enough.eq(count(look, r.tag) >= r.bytes)
        # The checks, worked out every cycle from the operands the front end holds (its
        # registers) into registers: in CHECK, the cycle after start, they are the started
        # instruction's, and no sum or comparison lies before the FSM's decisions.
        send_bad = Signal(ErrorCode)
        recv_bad = Signal()
        sa, ra = self.args.send, self.args.recv
        m.d.sync += [
            send_bad.eq(Mux(((sa.src | sa.dst) & 7) != 0, ErrorCode.ALIGN,
                            Mux((sa.x >= self.w) | (sa.y >= self.h) | (sa.src + sa.bytes > size)
                                | (sa.dst + sa.bytes > size), ErrorCode.RANGE, ErrorCode.NONE))),
            recv_bad.eq((ra.bytes != 0) & (ra.dst + ra.bytes > size)),
        ]
        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [pk_dst.eq(self.args.send.dst), unsent.eq(self.args.send.bytes)]
                    m.next = "CHECK"
            with m.State("CHECK"):
                with m.If(op == CODES["recv"]):
                    with m.If(recv_bad):
                        m.d.sync += [self.error.eq(ErrorCode.RANGE), self.done.eq(1)]
                        m.next = "END"
                    with m.Else():
                        m.next = "RECV"
                with m.Elif(s.bytes == 0):
                    m.d.sync += self.done.eq(1)
                    m.next = "END"
                with m.Elif(send_bad != ErrorCode.NONE):
                    m.d.sync += [self.error.eq(send_bad), self.done.eq(1)]
                    m.next = "END"
                with m.Else():
                    m.d.sync += rd_addr.eq(s.src >> 3)
                    m.next = "HEAD"
            with m.State("HEAD"):
                # the head flit goes in while no read is outstanding (flits stay in order)
                with m.If(all_sent):
                    with m.If(~tx.r_rdy & (inflight == 0)):
                        m.d.sync += self.done.eq(1)
                        m.next = "END"
                with m.Elif((inflight == 0) & tx.w_rdy & ~self.mem_rvalid):
                    m.d.comb += [tx.w_en.eq(1), tx.w_data.eq(Cat(head.as_value(), C(0, 64 - HEAD.size),
                                                                 C(0, 1)))]
                    m.d.sync += [left.eq((pk_bytes + 7) >> 3), pk_dst.eq(pk_dst + pk_bytes),
                                 unsent.eq(unsent - pk_bytes),
                                 self.bytes_sent.eq(self.bytes_sent + pk_bytes)]
                    m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += issue.eq(room)
                with m.If(issue & self.mem_rd.ready):
                    m.d.sync += [rd_addr.eq(rd_addr + 1), left.eq(left - 1)]
                    with m.If(left == 1):
                        m.next = "HEAD"
            with m.State("RECV"):
                with m.If(~taking & enough):
                    m.d.sync += [taking.eq(1), take.eq(r.bytes), take_tag.eq(r.tag),
                                 *next_update(r.tag)]
                    m.d.sync += self.done.eq(1)
                    m.next = "END"
            with m.State("END"):
                m.d.sync += self.done.eq(0)
                m.next = "IDLE"

        # ---- Arrivals.
        a_head = Signal(HEAD)
        a_word = Signal(17)
        a_left = Signal(17)        # payload bytes still to write
        with m.FSM():
            with m.State("HEAD"):
                m.d.comb += self.eject.ready.eq(1)
                with m.If(self.eject.valid):
                    m.d.sync += [a_head.eq(self.eject.payload.data[:HEAD.size]),
                                 a_word.eq(self.eject.payload.data[8:28] >> 3),
                                 a_left.eq(self.eject.payload.data[32:48])]
                    with m.If(~self.eject.payload.last):
                        m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += [self.mem_wr.valid.eq(self.eject.valid),
                             self.mem_wr.payload.addr.eq(a_word),
                             self.mem_wr.payload.data.eq(self.eject.payload.data),
                             self.mem_wr.payload.en.eq(Mux(a_left >= 8, 0xFF,
                                                           (C(1, 9) << a_left[:3]) - 1)),
                             self.eject.ready.eq(self.mem_wr.ready)]
                with m.If(self.eject.valid & self.mem_wr.ready):
                    m.d.sync += [a_word.eq(a_word + 1), a_left.eq(Mux(a_left >= 8, a_left - 8, 0))]
                    with m.If(self.eject.payload.last):
                        m.d.sync += [add.eq(a_head.bytes), add_tag.eq(a_head.tag),
                                     arriving.eq(a_head.bytes != 0)]
                        with m.If(a_head.bytes != 0):
                            m.d.sync += next_update(a_head.tag)
                        m.d.sync += self.bytes_received.eq(self.bytes_received + a_head.bytes)
                        m.next = "HEAD"
        return m
