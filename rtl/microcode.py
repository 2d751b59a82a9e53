"""Microinstructions and unit register files, generated from the ISA tables.

The instruction control unit decodes each instruction into the *microinstruction* of the
unit that executes it (seed 000, claim 1).  A microinstruction is a ``data.StructLayout``:

==========  ===============================================================================
field       meaning
==========  ===============================================================================
``op``      which operation of the unit (``cfg`` or one of the unit's opcodes)
``pc``      the ROM word index of the instruction (reported with errors)
``wait``    token channels to take before starting (bit ``u``: channel ``u -> unit``)
``signal``  token channels to fill after finishing (bit ``u``: channel ``unit -> u``)
``args``    a union with one member per operation: the instruction's operand fields as the
            ISA defines them; for ``cfg``: ``index`` (the register within the unit) and
            ``value``
``walk``    (units with a ``walk`` operand: LD, ST) what the enclosing hardware loops add to
            a ``walk=1`` instruction's ``ext`` (0 otherwise); the unit's front end adds it
            as it takes the microinstruction, so no adder lies between the instruction
            cache and the unit's queue
==========  ===============================================================================

Nothing here is written by hand: every layout is derived from :mod:`snpu.verif.isa`, so a
new operand field appears in the decoder, the units and ``docs/isa.md`` at once.
"""

from amaranth import *
from amaranth.lib import data

from snpu.verif import isa
from snpu.verif.isa import Unit

PC_BITS = 20
UNITS = isa.IMPLEMENTED_UNITS


def unit_opcodes(unit: Unit) -> list[isa.Opcode]:
    return [o for o in isa.OPCODES if o.unit == unit and not o.reserved]


def unit_registers(unit: Unit) -> list[isa.Register]:
    return [r for r in isa.REGISTERS if r.unit == unit]


def op_codes(unit: Unit) -> dict[str, int]:
    """Operation numbers inside a unit's microinstruction: 0 is cfg, then the opcodes."""
    return {"cfg": 0, **{o.mnemonic: k + 1 for k, o in enumerate(unit_opcodes(unit))}}


def _field_shape(f: isa.Field):
    return signed(f.width) if f.kind == "sint" else unsigned(f.width)


def args_layout(unit: Unit) -> data.UnionLayout:
    value3 = isa.OPCODE_BY_NAME["cfg"].field("value3").width
    members = {"cfg": data.StructLayout({"index": 5, "value": 32,
                                         "two": 1, "index2": 5, "value2": 32,
                                         "three": 1, "index3": 5, "value3": value3})}
    for o in unit_opcodes(unit):
        members[o.mnemonic] = data.StructLayout({f.name: _field_shape(f) for f in o.fields})
    return data.UnionLayout(members)


def walking_opcodes(unit: Unit) -> list[isa.Opcode]:
    """The unit's opcodes with a ``walk`` operand (their ``ext`` moves with the loops)."""
    return [o for o in unit_opcodes(unit) if "walk" in o.offsets]


def micro_layout(unit: Unit) -> data.StructLayout:
    return data.StructLayout({
        "op": range(len(op_codes(unit))),
        "pc": PC_BITS,
        "wait": len(UNITS),
        "signal": len(UNITS),
        "args": args_layout(unit),
        **({"walk": 32} if walking_opcodes(unit) else {}),
    })


def registers_layout(unit: Unit) -> data.StructLayout:
    """The configuration registers of ``unit`` as one struct, by short name
    (``ext_stride`` for ``ld.ext_stride``): what a unit's executor reads on its ``regs``."""
    return data.StructLayout({r.name.split(".", 1)[1]: r.width for r in unit_registers(unit)})


class RegisterFile(Elaboratable):
    """The configuration registers of one unit, written by its ``cfg`` microinstructions.

    Members
    -------
    value : Signal(registers_layout(unit))
        Every register, with its reset value; fields are also reachable as attributes
        (``regs.ext_stride``).
    we, w_index, w_value :
        Write port: register ``w_index`` (within the unit) takes ``w_value`` when ``we``.
    we2, w_index2, w_value2 :
        Second write port (``cfg``'s second register), written after the first: when both
        name one register, it takes ``w_value2``.
    we3, w_index3, w_value3 :
        Third write port (``cfg``'s third register), written after the second.
    """

    def __init__(self, unit: Unit):
        self.unit = unit
        regs = unit_registers(unit)
        self.value = Signal(registers_layout(unit),
                            init={r.name.split(".", 1)[1]: r.reset for r in regs},
                            name=f"{unit.name.lower()}_regs")
        self.index = {r.name.split(".", 1)[1]: r.index for r in regs}
        self.we = Signal()
        self.w_index = Signal(5)
        self.w_value = Signal(32)
        self.we2 = Signal()
        self.w_index2 = Signal(5)
        self.w_value2 = Signal(32)
        self.we3 = Signal()
        self.w_index3 = Signal(5)
        self.w_value3 = Signal(isa.OPCODE_BY_NAME["cfg"].field("value3").width)

    def __getattr__(self, name):
        index = self.__dict__.get("index")
        if index is not None and name in index:
            return self.__dict__["value"][name]
        raise AttributeError(name)

    def elaborate(self, platform):
        m = Module()
        for we, index, value in ((self.we, self.w_index, self.w_value),
                                 (self.we2, self.w_index2, self.w_value2),
                                 (self.we3, self.w_index3, self.w_value3)):
            with m.If(we):
                with m.Switch(index):
                    for name, k in self.index.items():
                        with m.Case(k):
                            m.d.sync += self.value[name].eq(value)
        return m
