"""Predecoder: what the dispatcher must know of an instruction word before it can dispatch
it — whether the word is legal on its own, what kind of word it is, which unit runs it.

The instruction cache runs it on each word as its line fills and stores the result beside
the word, so in the dispatcher the path from a fetched word to "dispatched, ask for the next
one" is a few gates instead of the whole legality check (issue 15: that path limited the
core's clock).  Combinational; the legality rules are generated from :mod:`snpu.verif.isa`.
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

    Members
    -------
    word : In(128)
    out : Out(PREDECODED)
    """

    word: In(128)
    out: Out(PREDECODED)

    def elaborate(self, platform):
        m = Module()
        word = self.word
        opcode = word[:OPCODE_BITS]
        wait = word[OPCODE_BITS:OPCODE_BITS + NUM_UNIT_BITS]
        signal = word[OPCODE_BITS + NUM_UNIT_BITS:isa.HEADER_BITS]
        impl = sum(1 << int(u) for u in UNITS)
        out = self.out

        def tokens_ok(unit):
            allowed = impl & ~(1 << int(unit))
            return ((wait & ~allowed) == 0) & ((signal & ~allowed) == 0)

        def field(o, name):
            return word[o.offsets[name]:o.offsets[name] + o.field(name).width]

        # cfg's second and third registers: none (register and value zero) or a register
        # of the first one's unit with a value it accepts; a third only with a second; one
        # verdict per unit
        o = isa.OPCODE_BY_NAME["cfg"]
        more_ok = {u: C(1) for u in {r.unit for r in isa.REGISTERS}}
        for rf, vf, flag in isa.CFG_SLOTS:
            reg_k, value_k, on = field(o, rf), field(o, vf), field(o, flag)
            for u in sorted(more_ok):
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
        in_order = ~field(o, "three") | field(o, "two")

        with m.Switch(opcode):
            for o in isa.OPCODES:
                if o.reserved:
                    continue
                with m.Case(o.code):
                    ok = (word >> o.used_bits) == 0
                    for f in o.fields:
                        if f.kind == "enum":
                            v = field(o, f.name)
                            ok &= Cat(*[v == e for e in f.enum.values()]).any()
                    if o.mnemonic == "cfg":
                        reg, value = field(o, "reg"), field(o, "value")
                        with m.Switch(reg):
                            for r in isa.REGISTERS:
                                with m.Case(r.number):
                                    rok = (ok & _accepts(r, value) & tokens_ok(r.unit)
                                           & more_ok[r.unit] & in_order)
                                    m.d.comb += [out.legal.eq(rok), out.kind.eq(Kind.UNIT),
                                                 out.target.eq(UNITS.index(r.unit)),
                                                 out.to_unit.eq(
                                                     rok << UNITS.index(r.unit))]
                    elif o.unit is None:  # halt, sync, loop
                        ok &= (wait == 0) & (signal == 0)
                        if o.mnemonic == "loop":
                            body = field(o, "body")
                            ok &= (body != 0) & (field(o, "entry") < body)
                        m.d.comb += [out.legal.eq(ok),
                                     out.kind.eq(Kind[o.mnemonic.upper()])]
                        if o.mnemonic == "loop":
                            m.d.comb += out.loop.eq(ok)
                        else:
                            m.d.comb += out.wait_idle.eq(ok)
                            if o.mnemonic == "halt":
                                m.d.comb += out.halt.eq(ok)
                    else:
                        uok = ok & tokens_ok(o.unit)
                        m.d.comb += [out.legal.eq(uok), out.kind.eq(Kind.UNIT),
                                     out.target.eq(UNITS.index(o.unit)),
                                     out.to_unit.eq(uok << UNITS.index(o.unit))]
        return m
