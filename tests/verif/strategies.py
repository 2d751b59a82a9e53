"""Hypothesis strategies for legal instructions (derived from the ISA tables)."""

from __future__ import annotations

from hypothesis import strategies as st

from snpu.verif import isa
from snpu.verif.isa import IMPLEMENTED_UNITS, Instr


def field_value(f: isa.Field) -> st.SearchStrategy[int]:
    if f.kind == "enum":
        return st.sampled_from(sorted(f.enum.values()))
    if f.kind == "sint":
        return st.integers(-(1 << (f.width - 1)), (1 << (f.width - 1)) - 1)
    return st.integers(0, (1 << f.width) - 1)


@st.composite
def legal_instr(draw) -> Instr:
    opc = draw(st.sampled_from([o for o in isa.OPCODES if not o.reserved]))
    if opc.mnemonic == "cfg":
        def value(r, bits=32):
            return draw(st.sampled_from(r.values) if r.values
                        else st.integers(0, (1 << min(r.width, bits)) - 1))
        reg = draw(st.sampled_from(isa.REGISTERS))
        args = {"reg": reg.number, "value": value(reg), "reg2": 0, "value2": 0, "two": 0,
                "reg3": 0, "value3": 0, "three": 0}
        same_unit = [r for r in isa.REGISTERS if r.unit == reg.unit]
        if draw(st.booleans()):  # a second register of the same unit
            reg2 = draw(st.sampled_from(same_unit))
            args.update(reg2=reg2.number, value2=value(reg2), two=1)
            if draw(st.booleans()):  # and a third (its value in 22 bits)
                reg3 = draw(st.sampled_from(same_unit))
                args.update(reg3=reg3.number, value3=value(reg3, opc.field("value3").width),
                            three=1)
        unit = reg.unit
    else:
        args = {f.name: draw(field_value(f)) for f in opc.fields}
        if opc.mnemonic == "loop":
            args["body"] = draw(st.integers(1, (1 << opc.field("body").width) - 1))
            # below the body's length and within the entry field (narrower than body's)
            entry_max = min(args["body"] - 1, (1 << opc.field("entry").width) - 1)
            args["entry"] = draw(st.integers(0, entry_max))
        unit = opc.unit
    if unit is None:
        return Instr(opc.mnemonic, args)
    others = [u for u in IMPLEMENTED_UNITS if u != unit]
    wait = draw(st.frozensets(st.sampled_from(others)))
    signal = draw(st.frozensets(st.sampled_from(others)))
    return Instr(opc.mnemonic, args, wait, signal)
