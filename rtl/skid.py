"""Register slices for valid/ready streams: ``i`` in, ``o`` out, one cycle of latency."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .bits import sum_below


class _RegisterSlice(wiring.Component):
    """A stream ``i`` of ``shape`` payloads in, the same stream ``o`` out."""

    def __init__(self, shape):
        self._shape = shape
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})


class SkidBuffer(_RegisterSlice):
    """Registers a stream of ``shape`` payloads: one cycle of latency, one payload per cycle
    sustained, and ``i.ready`` comes from a register (no combinational path from
    ``o.ready`` back to ``i.ready``), so chains of them close timing.  Two entries: the
    output register and a skid register that catches the payload accepted in the cycle
    the output stalls.  The payload registers have no reset (the core's ``start`` resets
    the valid flags only).
    """

    def elaborate(self, platform):
        m = Module()
        main = Signal(self._shape, reset_less=True)
        main_valid = Signal()
        skid = Signal(self._shape, reset_less=True)
        skid_valid = Signal()
        m.d.comb += [self.i.ready.eq(~skid_valid), self.o.valid.eq(main_valid),
                     self.o.payload.eq(main)]
        with m.If(self.o.ready | ~main_valid):    # the output register moves on
            with m.If(skid_valid):
                m.d.sync += [main.eq(skid), main_valid.eq(1), skid_valid.eq(0)]
            with m.Else():
                m.d.sync += [main.eq(self.i.payload), main_valid.eq(self.i.valid)]
        with m.Elif(self.i.valid & self.i.ready):  # stalled: park the accepted payload
            m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(1)]
        return m


class PipeRegister(_RegisterSlice):
    """Registers a stream of ``shape`` payloads in one entry: one cycle of latency, one
    payload per cycle sustained.  ``i.ready`` is ``~o.valid | o.ready``: a combinational
    path from ``o.ready``, so use it where the far end's ready comes from a register (a
    :class:`SkidBuffer`'s does); it costs no multiplexer in front of the register.
    """

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)
        with m.If(self.i.ready):
            m.d.sync += [self.o.valid.eq(self.i.valid), self.o.payload.eq(self.i.payload)]
        return m


def room_flag(m: Module, depth: int, push: Value, pop: Value, name: str = "room") -> Signal:
    """A register that is 1 while fewer than ``depth`` items are held, for a queue (or
    anything counted) that gains one item on ``push`` and loses one on ``pop``.

    The count is kept beside it and the flag's next value is chosen by ``push`` and ``pop``
    among comparisons of the count with constants (no adder or comparison after the
    handshakes), so the requester's handshake starts at a register instead of at a
    comparison of the queue's level (a queue's ``w_rdy`` is such a comparison: in front of
    a handshake that loads registers, it puts the queue's level on their enable path), and
    the handshakes reach the flag through one multiplexer.  Use it in place of the queue's
    ``w_rdy`` when the queue holds exactly the items counted here."""
    held = Signal(range(depth + 1), name=f"{name}_held")
    flag = Signal(init=1, name=f"{name}")
    # held + push - pop < depth, i.e. held + push + ~pop < depth + 1
    m.d.sync += [held.eq(held + push - pop), flag.eq(sum_below(held, [push, ~pop], depth + 1))]
    return flag
