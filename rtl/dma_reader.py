"""DMA read engine: byte ranges of external memory over AXI4, as annotated beats of the bus's
width."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from .axi import (BURST_BITS, MAX_BURST, RESP_OKAY, burst_last_beat, burst_last_beat_after_full,
                  burst_len, last_beat_spanned, next_burst_address)
from .skid import room_flag

#: a request: the bytes ``[addr, addr + length)``; ``tag`` travels with its beats
REQUEST = data.StructLayout({"addr": 32, "length": 17, "tag": 16})


def beat_layout(beat_bytes: int = 8) -> data.StructLayout:
    """A beat of ``beat_bytes`` bytes: ``count`` valid bytes starting at byte lane
    ``offset``; ``first`` / ``last`` beat of its request, and the request's ``tag``."""
    lanes = (beat_bytes - 1).bit_length()
    return data.StructLayout({"data": 8 * beat_bytes, "offset": lanes,
                              "count": lanes + 1, "first": 1, "last": 1, "tag": 16})


BEAT = beat_layout(8)  #: a beat of the 64-bit bus


class DmaReader(wiring.Component):
    """Reads the bytes ``[addr, addr + length)`` of each request and streams them in order.

    Requests are split into INCR bursts of at most 16 beats that never cross a 4 KiB
    boundary; address requests run ahead of the data (up to ``depth`` requests in flight).
    Each data beat says which of its byte lanes are the request's bytes (``offset``,
    ``count``), whether it is the request's first or last beat, and carries the request's
    ``tag`` (the LD unit puts the destination offset there).  Requests of length 0 are not
    allowed.  A response other than OKAY raises the sticky ``error`` (cleared by
    ``clear``); its data are still delivered, so nothing hangs.

    Throughput one beat per cycle; latency that of the memory.

    Parameters
    ----------
    depth:
        Requests in flight.
    data_bits:
        The bus's data width (beats of ``data_bits / 8`` bytes, ``arsize`` to match).
    decode:
        A function of an address (a 32-bit value) to one bit, e.g. which slave a burst
        goes to (:func:`~.axi_split.is_local`).  ``ardecode`` carries it for ``araddr``,
        from a register loaded with every burst's address, so an address decoder after
        the reader starts at a flip-flop rather than at a comparison.

    Members
    -------
    req : In(stream(REQUEST))
    beats : Out(stream(BEAT))
    ar*, r* :
        The read channels of an AXI4 master (``arid`` is left to the arbiter).
    ardecode : Out(1)
        ``decode(araddr)``, a register (0 without ``decode``).
    bytes_read : Out(32)
        Requested bytes delivered since reset (the DMA read counter), counted the cycle
        after their beat.
    """

    def __init__(self, depth: int = 4, data_bits: int = 64, decode=None):
        self._depth = depth
        self._decode = decode
        # each request in flight with its `single` flag (its bytes fit its first beat)
        self._inflight = SyncFIFOBuffered(width=REQUEST.size + 1, depth=depth)
        self.beat_bytes = data_bits // 8
        super().__init__({
            "req": In(stream.Signature(REQUEST)),
            "beats": Out(stream.Signature(beat_layout(self.beat_bytes))),
            "arvalid": Out(1), "arready": In(1), "araddr": Out(32), "arlen": Out(8),
            "arsize": Out(3),
            "rvalid": In(1), "rready": Out(1), "rdata": In(data_bits), "rresp": In(2),
            "rlast": In(1), "ardecode": Out(1),
            "error": Out(1), "clear": In(1), "bytes_read": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.inflight = inflight = self._inflight
        B = self.beat_bytes
        lg = (B - 1).bit_length()  # address bits inside a beat
        m.d.comb += self.arsize.eq(lg)

        # ---- Address side: one request at a time, burst by burst.
        busy = Signal()
        next_addr = Signal(32)   # beat-aligned address of the next burst
        # `last_beat`: the index of the last beat a burst from `next_addr` may have (the
        # 4 KiB boundary), and `left_m1`: the beats of the current request not yet requested,
        # minus one -- both registers, so `arlen` is their minimum (a 4-bit comparison, no
        # adder after the registers).  A burst that is not the request's last is full, so
        # the next address and the beats left after it come from the registers too; after
        # a request's last burst, the next request's address is loaded.
        last_beat = Signal(BURST_BITS, init=MAX_BURST - 1)
        left_m1 = Signal(14)
        # `room`: fewer than `depth` requests in flight (accepted, last beat not delivered),
        # a register, so the requester's handshake starts at registers (not at the queue's
        # level: the LD unit's issue decides on it)
        accept = Signal()
        room = room_flag(m, self._depth, accept, inflight.r_en)
        m.d.comb += self.req.ready.eq(~busy & room)
        m.d.comb += accept.eq(self.req.valid & self.req.ready)
        # The accepted request is queued the cycle after, from a register: the requester's
        # choice of address and length (the LD unit's) reaches a register, not the queue's
        # distributed RAM through the flag below.  Its first beat comes two cycles after
        # it is accepted at the earliest (its burst's address goes out the cycle after), by
        # when the queue holds it.  (The register takes the request every cycle, with no
        # enable: it is read only the cycle after an acceptance.)
        queued = Signal(REQUEST, reset_less=True)
        queued_valid = Signal()
        m.d.sync += [queued_valid.eq(accept), queued.eq(self.req.payload)]
        # a request whose bytes all lie in its first beat (its only one); decided as it is
        # queued, so the data side's last-beat decision is a multiplexer of two flags
        req_single = Signal()
        m.d.comb += req_single.eq((queued.length[lg + 1:] == 0) &
                                  (queued.addr[:lg] + queued.length[:lg + 1] <= B))
        m.d.comb += [inflight.w_data.eq(Cat(queued.as_value(), req_single)),
                     inflight.w_en.eq(queued_valid)]
        first = self.req.payload.addr & ~(B - 1)
        decode = self._decode or (lambda addr: C(0, 1))
        with m.If(accept):
            m.d.sync += [busy.eq(1), next_addr.eq(first), self.ardecode.eq(decode(first)),
                         last_beat.eq(burst_last_beat(m, first, lg)),
                         left_m1.eq(last_beat_spanned(self.req.payload.addr,
                                                      self.req.payload.length, lg))]
        arlen, last_burst = burst_len(m, left_m1, last_beat)
        m.d.comb += [self.arvalid.eq(busy), self.araddr.eq(next_addr), self.arlen.eq(arlen)]
        with m.If(self.arvalid & self.arready):
            after = next_burst_address(m, next_addr, last_beat + 1, lg)
            m.d.sync += [next_addr.eq(after), self.ardecode.eq(decode(after)),
                         last_beat.eq(burst_last_beat_after_full(m, next_addr, lg)),
                         left_m1.eq(left_m1 - last_beat - 1)]
            with m.If(last_burst):
                m.d.sync += busy.eq(0)

        # ---- Data side: annotate the beats of the request at the head of `inflight`.
        head = Signal(REQUEST)
        head_single = Signal()
        m.d.comb += Cat(head.as_value(), head_single).eq(inflight.r_data)
        started = Signal()
        remaining = Signal(17)
        # `remaining_last`: the bytes left fit the next beat (the request's later beats
        # start at byte lane 0), registered as the beat before goes
        remaining_last = Signal()
        offset = Signal(lg)
        m.d.comb += offset.eq(Mux(started, 0, head.addr[:lg]))
        rem = Mux(started, remaining, head.length)
        beat_room = Signal(lg + 1)
        m.d.comb += beat_room.eq(B - offset)
        is_last = Signal()   # the rest of the request fits this beat
        m.d.comb += is_last.eq(Mux(started, remaining_last, head_single))
        count = Signal(lg + 1)
        m.d.comb += count.eq(Mux(is_last, rem[:lg + 1], beat_room))
        m.d.comb += [
            self.beats.valid.eq(self.rvalid & inflight.r_rdy),
            self.beats.payload.data.eq(self.rdata),
            self.beats.payload.offset.eq(offset),
            self.beats.payload.count.eq(count),
            self.beats.payload.last.eq(is_last),
            self.beats.payload.first.eq(~started),
            self.beats.payload.tag.eq(head.tag),
            self.rready.eq(self.beats.ready & inflight.r_rdy),
        ]
        # the beat's bytes are counted a cycle later (the counter's carry chain stays off
        # the path from the request's head through the beat's byte count)
        counted = Signal(lg + 1)
        m.d.sync += [counted.eq(Mux(self.beats.valid & self.beats.ready, count, 0)),
                     self.bytes_read.eq(self.bytes_read + counted)]
        with m.If(self.beats.valid & self.beats.ready):
            with m.If(self.rresp != RESP_OKAY):
                m.d.sync += self.error.eq(1)
            with m.If(is_last):
                m.d.comb += inflight.r_en.eq(1)
                m.d.sync += started.eq(0)
            with m.Else():
                left = Signal(17)
                m.d.comb += left.eq(rem - beat_room)
                m.d.sync += [started.eq(1), remaining.eq(left),
                             remaining_last.eq((left[lg + 1:] == 0) & (left[:lg + 1] <= B))]
        with m.If(self.clear):
            m.d.sync += self.error.eq(0)
        return m
