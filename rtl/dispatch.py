"""Instruction control unit: decode, legality check, dispatch to the units' queues."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from snpu.verif import isa
from snpu.verif.isa import HEADER_BITS, NUM_UNIT_BITS, OPCODE_BITS, Unit

from .ifetch import FETCHED
from .microcode import PC_BITS, UNITS, micro_layout, op_codes
from .status import ErrorCode


class Dispatcher(wiring.Component):
    """Decodes each instruction word into a microinstruction and appends it to the queue of
    the unit that executes it, in program order.

    The legality check is generated from the ISA tables (:mod:`snpu.verif.isa`): a known,
    non-reserved opcode; reserved bits zero; enumeration fields inside their value set; token
    bits naming only implemented units other than the instruction's own (none on control
    instructions); for ``cfg`` a defined register and a legal value.  An illegal word (or a
    word whose fetch failed) stops dispatching with ``ILLEGAL`` (``FETCH``) and its ROM index.
    ``sync`` waits until ``units_idle``; ``halt`` does the same and then raises ``halted``.

    Throughput one instruction per cycle while the target queue has room.
    """

    def __init__(self):
        super().__init__({
            "i": In(stream.Signature(FETCHED)),
            **{f"q_{u.name.lower()}": Out(stream.Signature(micro_layout(u))) for u in UNITS},
            "units_idle": In(1),
            "stop": In(1),
            "halted": Out(1),
            "error": Out(ErrorCode),
            "error_pc": Out(PC_BITS),
        })

    def queue(self, unit: Unit):
        return getattr(self, f"q_{unit.name.lower()}")

    def elaborate(self, platform):
        m = Module()
        word = self.i.payload.word
        opcode = word[:OPCODE_BITS]
        wait = word[OPCODE_BITS:OPCODE_BITS + NUM_UNIT_BITS]
        signal = word[OPCODE_BITS + NUM_UNIT_BITS:HEADER_BITS]
        impl = sum(1 << int(u) for u in UNITS)

        legal = Signal()
        target = Signal(range(len(UNITS)))
        is_sync, is_halt = Signal(), Signal()
        micro = {u: Signal(micro_layout(u), name=f"micro_{u.name.lower()}") for u in UNITS}
        for u in UNITS:
            m.d.comb += [micro[u].pc.eq(self.i.payload.pc),
                         micro[u].wait.eq(wait), micro[u].signal.eq(signal)]

        def tokens_ok(unit_index):
            own = 1 << unit_index
            allowed = impl & ~own
            return ((wait & ~allowed) == 0) & ((signal & ~allowed) == 0)

        with m.Switch(opcode):
            for o in isa.OPCODES:
                if o.reserved:
                    continue
                with m.Case(o.code):
                    ok = (word >> o.used_bits) == 0
                    for f in o.fields:
                        if f.kind == "enum":
                            v = word[o.offsets[f.name]:o.offsets[f.name] + f.width]
                            ok &= Cat(*[v == e for e in f.enum.values()]).any()
                    if o.mnemonic in ("halt", "sync"):
                        ok &= (wait == 0) & (signal == 0)
                        m.d.comb += [legal.eq(ok), is_halt.eq(o.mnemonic == "halt"),
                                     is_sync.eq(o.mnemonic == "sync")]
                    elif o.mnemonic == "cfg":
                        reg = word[o.offsets["reg"]:o.offsets["reg"] + 8]
                        value = word[o.offsets["value"]:o.offsets["value"] + 32]
                        with m.Switch(reg):
                            for r in isa.REGISTERS:
                                with m.Case(r.number):
                                    rok = ok & ((value >> r.width) == 0) & tokens_ok(int(r.unit))
                                    if r.values is not None:
                                        rok &= Cat(*[value == x for x in r.values]).any()
                                    m.d.comb += [legal.eq(rok), target.eq(UNITS.index(r.unit))]
                                    mu = micro[r.unit]
                                    m.d.comb += [mu.op.eq(op_codes(r.unit)["cfg"]),
                                                 mu.args.cfg.index.eq(r.index),
                                                 mu.args.cfg.value.eq(value)]
                    else:
                        u = o.unit
                        m.d.comb += [legal.eq(ok & tokens_ok(int(u))), target.eq(UNITS.index(u))]
                        mu = micro[u]
                        m.d.comb += mu.op.eq(op_codes(u)[o.mnemonic])
                        member = getattr(mu.args, o.mnemonic)
                        for f in o.fields:
                            m.d.comb += getattr(member, f.name).eq(
                                word[o.offsets[f.name]:o.offsets[f.name] + f.width])

        # ---- Dispatch.
        for k, u in enumerate(UNITS):
            q = self.queue(u)
            m.d.comb += q.payload.eq(micro[u])
        with m.FSM():
            with m.State("RUN"):
                with m.If(self.stop):
                    m.next = "DRAIN"
                with m.Elif(self.i.valid):
                    with m.If(self.i.payload.error):
                        m.d.sync += [self.error.eq(ErrorCode.FETCH), self.error_pc.eq(self.i.payload.pc)]
                        m.next = "DRAIN"
                    with m.Elif(~legal):
                        m.d.sync += [self.error.eq(ErrorCode.ILLEGAL), self.error_pc.eq(self.i.payload.pc)]
                        m.next = "DRAIN"
                    with m.Elif(is_sync | is_halt):
                        with m.If(self.units_idle):
                            m.d.comb += self.i.ready.eq(1)
                            with m.If(is_halt):
                                m.next = "DRAIN"
                    with m.Else():
                        for k, u in enumerate(UNITS):
                            q = self.queue(u)
                            with m.If(target == k):
                                m.d.comb += [q.valid.eq(1), self.i.ready.eq(q.ready)]
            with m.State("DRAIN"):
                with m.If(self.units_idle):
                    m.d.sync += self.halted.eq(1)
        return m
