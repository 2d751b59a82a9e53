"""Predecoder: what the dispatcher must know of an instruction word before it can dispatch
it — whether the word is legal on its own, what kind of word it is, which unit runs it.

The instruction cache runs it on each word as its line fills and stores the result beside
the word, so in the dispatcher the path from a fetched word to "dispatched, ask for the next
one" is a few gates instead of the whole legality check (issue 15: that path limited the
core's clock).  Combinational or in two stages; the legality rules are generated from :mod:`snpu.verif.isa`.
"""

from amaranth import *
from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import In, Out

from snpu.verif import isa
from snpu.verif.isa import NUM_UNIT_BITS, OPCODE_BITS

from .microcode import UNITS


class Kind(enum.Enum, shape=2):
    """What the dispatcher does with a word."""
    UNIT = 0  # append a microinstruction to a unit's queue (cfg included)
    LOOP = 1  # push a loop frame (or skip a zero-trip body)
    SYNC = 2  # wait until every unit is idle
    HALT = 3  # wait until every unit is idle, then stop


#: the predecoded part of a fetched word.  Besides the kind and target, the dispatcher's
#: decisions come one-hot and legality-qualified, so its "consume this word" is an OR of a
#: few ANDs with the queues' ready signals, not a decode after the block RAM.
PREDECODED = data.StructLayout({
    "legal": 1,                      # legal apart from a loop's context (see Dispatcher)
    "kind": Kind,
    "target": range(len(UNITS)),     # the unit (index into UNITS) of a UNIT word
    "to_unit": len(UNITS),           # legal UNIT word: one-hot of its unit
    "loop": 1,                       # legal loop word
    "wait_idle": 1,                  # legal sync or halt
    "halt": 1,                       # legal halt
})


def _accepts(r: isa.Register, value: Value) -> Value:
    """Does register ``r`` accept ``value`` (it fits; one of its legal values if it has them)?"""
    ok = (value >> r.width) == 0
    if r.values is not None:
        ok &= Cat(*[value == x for x in r.values]).any()
    return ok


class Predecoder(wiring.Component):
    """Legality of a word on its own, its kind and its unit.

    A word is legal when its opcode is known and not reserved, its reserved bits are zero,
    its enumeration fields lie in their value sets, its token bits name only implemented
    units other than its own (none on ``halt`` / ``sync`` / ``loop``), a ``cfg`` names a
    defined register with a value that register accepts (and, if it names a second one, a
    register of the same unit with a value it accepts), and a ``loop`` has a body of at
    least one word and an ``entry`` inside it.  Whether a loop's body fits the ROM and its
    enclosing body depends on where it is executed; the dispatcher checks that.

    In two halves: the checks of the word against every opcode's fields and every
    register's values (each opcode's verdict but cfg's; for cfg, whether its register is
    each register and accepts its value, and what each unit's registers make of its second
    and third slots), then the selection by opcode and register and the outputs.  With
    ``latency=1`` the first half's results are registered (the instruction cache's fill
    path: about five LUT levels each side instead of nine); with ``latency=0`` it is all
    combinational.

    Members
    -------
    word : In(128)
    out : Out(PREDECODED)
        ``word``'s, ``latency`` cycles later.
    """

    def __init__(self, latency: int = 0):
        if latency not in (0, 1):
            self._MustUse__silence = True   # (not a design: no "never elaborated" warning)
            raise ValueError(f"Predecoder latency must be 0 or 1, got {latency}")
        self._latency = latency
        super().__init__({"word": In(128), "out": Out(PREDECODED)})

    @property
    def latency(self) -> int:
        return self._latency

    def elaborate(self, platform):
        m = Module()
        word = self.word
        opcode = word[:OPCODE_BITS]
        wait = word[OPCODE_BITS:OPCODE_BITS + NUM_UNIT_BITS]
        signal = word[OPCODE_BITS + NUM_UNIT_BITS:isa.HEADER_BITS]
        impl = sum(1 << int(u) for u in UNITS)
        out = self.out
        half = m.d.sync if self._latency else m.d.comb   # the first half's results

        def tokens_ok(unit):
            allowed = impl & ~(1 << int(unit))
            return ((wait & ~allowed) == 0) & ((signal & ~allowed) == 0)

        def field(o, name):
            return word[o.offsets[name]:o.offsets[name] + o.field(name).width]

        # ---- First half: checks that need no selection by opcode.
        op = Signal(OPCODE_BITS)
        half += op.eq(opcode)
        # every opcode's verdict on the word, cfg's without its register checks
        op_ok = {}
        for o in isa.OPCODES:
            if o.reserved:
                continue
            ok = (word >> o.used_bits) == 0
            for f in o.fields:
                if f.kind == "enum":
                    v = field(o, f.name)
                    ok &= Cat(*[v == e for e in f.enum.values()]).any()
            if o.mnemonic == "cfg":
                pass   # its register checks follow
            elif o.unit is None:  # halt, sync, loop
                ok &= (wait == 0) & (signal == 0)
                if o.mnemonic == "loop":
                    body = field(o, "body")
                    ok &= (body != 0) & (field(o, "entry") < body)
            else:
                ok &= tokens_ok(o.unit)
            op_ok[o.code] = Signal(name=f"ok_{o.mnemonic}")
            half += op_ok[o.code].eq(ok)
        # cfg: its second and third registers: none (register and value zero) or a register
        # of the first one's unit with a value it accepts; a third only with a second; one
        # verdict per unit (with the unit's tokens)
        o = isa.OPCODE_BY_NAME["cfg"]
        cfg_units = sorted({r.unit for r in isa.REGISTERS})
        more_ok = {u: C(1) for u in cfg_units}
        for rf, vf, flag in isa.CFG_SLOTS:
            reg_k, value_k, on = field(o, rf), field(o, vf), field(o, flag)
            for u in cfg_units:
                s = Signal(name=f"cfg_{rf}_ok_{u.name.lower()}")
                with m.If(~on):
                    m.d.comb += s.eq((reg_k == 0) & (value_k == 0))
                with m.Else():
                    with m.Switch(reg_k):
                        for r in isa.REGISTERS:
                            if r.unit == u:
                                with m.Case(r.number):
                                    m.d.comb += s.eq(_accepts(r, value_k))
                more_ok[u] = more_ok[u] & s
        unit_ok = {u: Signal(name=f"cfg_unit_ok_{u.name.lower()}") for u in cfg_units}
        half += [unit_ok[u].eq(more_ok[u] & tokens_ok(u)) for u in cfg_units]
        in_order = Signal()
        half += in_order.eq(~field(o, "three") | field(o, "two"))
        # its register: per unit, whether it is one of the unit's and accepts its value;
        # and its unit
        reg, value = field(o, "reg"), field(o, "value")
        reg_ok = {u: Signal(name=f"cfg_reg_ok_{u.name.lower()}") for u in cfg_units}
        half += [reg_ok[u].eq(Cat(*[(reg == r.number) & _accepts(r, value)
                                    for r in isa.REGISTERS if r.unit == u]).any())
                 for u in cfg_units]
        reg_known = Signal()
        reg_target = Signal(range(len(UNITS)))
        known = Signal()
        target = Signal.like(reg_target)
        with m.Switch(reg):
            for r in isa.REGISTERS:
                with m.Case(r.number):
                    m.d.comb += [known.eq(1), target.eq(UNITS.index(r.unit))]
        half += [reg_known.eq(known), reg_target.eq(target)]

        # ---- Second half: the selection by opcode (and cfg's register) and the outputs.
        with m.Switch(op):
            for o in isa.OPCODES:
                if o.reserved:
                    continue
                ok = op_ok[o.code]
                with m.Case(o.code):
                    if o.mnemonic == "cfg":
                        rok = ok & in_order & Cat(*[reg_ok[u] & unit_ok[u]
                                                    for u in cfg_units]).any()
                        with m.If(reg_known):
                            m.d.comb += [out.legal.eq(rok), out.kind.eq(Kind.UNIT),
                                         out.target.eq(reg_target),
                                         out.to_unit.eq(Mux(rok, 1 << reg_target, 0))]
                    elif o.unit is None:  # halt, sync, loop
                        m.d.comb += [out.legal.eq(ok), out.kind.eq(Kind[o.mnemonic.upper()])]
                        if o.mnemonic == "loop":
                            m.d.comb += out.loop.eq(ok)
                        else:
                            m.d.comb += out.wait_idle.eq(ok)
                            if o.mnemonic == "halt":
                                m.d.comb += out.halt.eq(ok)
                    else:
                        m.d.comb += [out.legal.eq(ok), out.kind.eq(Kind.UNIT),
                                     out.target.eq(UNITS.index(o.unit)),
                                     out.to_unit.eq(ok << UNITS.index(o.unit))]
        return m
