"""Unit front end: microinstruction queue, dependency tokens, cfg writes, executor hand-off."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from snpu.verif import isa

from .microcode import (PC_BITS, UNITS, RegisterFile, args_layout, micro_layout, op_codes,
                        registers_layout, unit_opcodes, walking_opcodes)


class UnitFrontEnd(wiring.Component):
    """Runs a unit's microinstructions one at a time, in order.

    For each microinstruction: take the tokens named by ``wait`` (stalling while any channel
    is empty), then either write the configuration registers (``cfg``: written the cycle
    after the tokens are taken, while its tokens are given) or start
    the unit's executor and wait for its ``done``, then put tokens into the channels named by
    ``signal`` (stalling while any is full).  The executor sees the operands on ``args`` and
    the registers through :attr:`regs`.

    Members
    -------
    micro : In(stream)
        Microinstructions from the dispatcher.
    wait_mask / wait_ok / take, signal_mask / signal_ok / give :
        The token handshake with :class:`~.tokens.TokenChannels`.
    wait_mask_next, signal_mask_next : Out
        The masks of the next cycle (a new microinstruction's, or the held one's): the
        token channels compute ``wait_ok`` / ``signal_ok`` a cycle ahead from them.
    start, done, op, args, pc :
        The executor hand-off.
    taking, taken : Out
        A microinstruction is taken this cycle, and which (the executor may register what it
        needs of it ahead of its start, the cycle after at the earliest).
    regs_now : Out(registers_layout(unit))
        The registers the held microinstruction runs with: the register file, with the
        instruction's register operands that are not 0 in place of their registers (ISA:
        Register operands).  What the executor reads.
    busy : Out(1)
        Holding a microinstruction (the unit is not idle).
    running : Out(1)
        The executor is working on it (the ``busy`` counter of the golden model).
    stall_cycles, instructions : Out(32)
        Cycles spent waiting for tokens; microinstructions completed.
    """

    def __init__(self, unit):
        self.unit = unit
        self.regs = RegisterFile(unit)
        self.codes = op_codes(unit)
        super().__init__({
            "micro": In(stream.Signature(micro_layout(unit))),
            "wait_mask": Out(len(UNITS)),
            "wait_mask_next": Out(len(UNITS)),
            "wait_ok": In(1),
            "take": Out(1),
            "signal_mask": Out(len(UNITS)),
            "signal_mask_next": Out(len(UNITS)),
            "signal_ok": In(1),
            "give": Out(1),
            "start": Out(1),
            "done": In(1),
            "op": Out(range(len(self.codes))),
            "args": Out(args_layout(unit)),
            "taking": Out(1),
            "taken": Out(micro_layout(unit)),
            "regs_now": Out(registers_layout(unit)),
            "pc": Out(PC_BITS),
            "busy": Out(1),
            "running": Out(1),
            "halt": In(1),
            "stall_cycles": Out(32),
            "instructions": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.regs = regs = self.regs
        cur = Signal(micro_layout(self.unit))
        m.d.comb += [self.op.eq(cur.op), self.args.eq(cur.args), self.pc.eq(cur.pc),
                     self.wait_mask.eq(cur.wait), self.signal_mask.eq(cur.signal),
                     regs.w_index.eq(cur.args.cfg.index), regs.w_value.eq(cur.args.cfg.value),
                     regs.w_index2.eq(cur.args.cfg.index2), regs.w_value2.eq(cur.args.cfg.value2),
                     regs.w_index3.eq(cur.args.cfg.index3), regs.w_value3.eq(cur.args.cfg.value3)]
        # a cfg's register writes, registered: they happen the cycle after its tokens are
        # taken (its first SIGNAL cycle; `cur` still holds it then, and the unit's next
        # microinstruction starts two cycles later at the earliest), so the token channels'
        # `wait_ok` reaches no register file enable
        we, we2, we3 = Signal(), Signal(), Signal()
        m.d.sync += [we.eq(0), we2.eq(0), we3.eq(0)]
        m.d.comb += [regs.we.eq(we), regs.we2.eq(we2), regs.we3.eq(we3)]
        load = Signal()  # a new microinstruction is taken into `cur` this cycle
        m.d.comb += [self.regs_now.eq(self._operated(m, cur)), self.taking.eq(load),
                     self.taken.eq(self.micro.payload)]
        m.d.comb += [self.wait_mask_next.eq(Mux(load, self.micro.payload.wait, cur.wait)),
                     self.signal_mask_next.eq(Mux(load, self.micro.payload.signal, cur.signal))]
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.micro.ready.eq(~self.halt)
                with m.If(self.micro.valid & ~self.halt):
                    m.d.comb += load.eq(1)
                    m.d.sync += cur.eq(self.micro.payload)
                    # a walking load's or store's ext plus the loops' offset
                    new = self.micro.payload
                    for o in walking_opcodes(self.unit):
                        with m.If(new.op == self.codes[o.mnemonic]):
                            m.d.sync += getattr(cur.args, o.mnemonic).ext.eq(
                                getattr(new.args, o.mnemonic).ext + new.walk)
                    m.next = "WAIT"
            with m.State("WAIT"):
                m.d.comb += self.busy.eq(1)
                with m.If(self.wait_ok):
                    m.d.comb += self.take.eq(1)
                    with m.If(cur.op == self.codes["cfg"]):
                        m.d.sync += [we.eq(1), we2.eq(cur.args.cfg.two),
                                     we3.eq(cur.args.cfg.three)]
                        m.next = "SIGNAL"
                    with m.Else():
                        m.d.comb += self.start.eq(1)
                        m.next = "RUN"
                with m.Else():
                    m.d.sync += self.stall_cycles.eq(self.stall_cycles + 1)
            with m.State("RUN"):
                m.d.comb += [self.busy.eq(1), self.running.eq(1)]
                with m.If(self.done):
                    m.next = "SIGNAL"
            with m.State("SIGNAL"):
                m.d.comb += self.busy.eq(1)
                with m.If(self.signal_ok):
                    m.d.comb += self.give.eq(1)
                    m.d.sync += self.instructions.eq(self.instructions + 1)
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += self.stall_cycles.eq(self.stall_cycles + 1)
        return m

    def _operated(self, m: Module, micro) -> Value:
        """The register file with ``micro``'s register operands that are not 0 in place of
        their registers."""
        operands = [(o, f) for o in unit_opcodes(self.unit)
                    for f in isa.REGISTER_OPERANDS.get(o.mnemonic, ())]
        if not operands:
            return self.regs.value.as_value()
        regs = Signal(registers_layout(self.unit), name="operated")
        m.d.comb += regs.eq(self.regs.value)
        for o, f in operands:
            v = getattr(getattr(micro.args, o.mnemonic), f.name)
            with m.If((micro.op == self.codes[o.mnemonic]) & (v != 0)):
                m.d.comb += regs[f.overrides.split(".", 1)[1]].eq(v)
        return regs.as_value()
