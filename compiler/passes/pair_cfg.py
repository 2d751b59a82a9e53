"""Pass: pair consecutive register writes of one unit into one ``cfg`` word.

A layer's set-up writes several registers of one unit in a row (a load's strides, the MX
unit's vector loop, the VX unit's strides).  ``cfg`` carries a second register of the same
unit (``reg2`` / ``value2``, ``two``), so each such pair takes one ROM word and one dispatch.

Two single-register ``cfg`` words ``A`` then ``B`` on the same unit, next to each other in
the same loop body, merge when ``B`` waits for no token and the two do not signal the same
unit: the unit runs its queue in order and a ``cfg`` does nothing but write, so the merged
word (``A``'s waits, both writes in order, both signals after them) does what ``A`` then
``B`` did, with one dispatch fewer.
"""

from __future__ import annotations

from snpu.verif import isa
from snpu.verif.isa import Instr


def _single(ins: Instr) -> bool:
    return ins.op == "cfg" and not ins.args["two"]


def _merge(a: Instr, b: Instr) -> Instr | None:
    if not (_single(a) and _single(b)) or b.wait or (a.signal & b.signal):
        return None
    if isa.REGISTER_BY_NUMBER[a.args["reg"]].unit != isa.REGISTER_BY_NUMBER[b.args["reg"]].unit:
        return None
    return Instr("cfg", {**a.args, "reg2": b.args["reg"], "value2": b.args["value"], "two": 1},
                 a.wait, a.signal | b.signal)


def pair_cfg(instrs: list[Instr]) -> list[Instr]:
    """``instrs`` (a segment's program, loop words included) with every mergeable pair of
    register writes in one ``cfg`` word; loop bodies keep their own words."""
    def body(lo: int, hi: int) -> list[Instr]:
        out: list[Instr] = []
        fence = 0  # out[fence:] are words of this body (not of a loop before them)
        k = lo
        while k < hi:
            ins = instrs[k]
            if ins.op == "loop":
                n = ins.args["body"]
                inner = body(k + 1, k + 1 + n)
                out.append(Instr("loop", {**ins.args, "body": len(inner)}, ins.wait, ins.signal))
                out += inner
                fence = len(out)
                k += 1 + n
                continue
            merged = _merge(out[-1], ins) if len(out) > fence else None
            if merged is not None:
                out[-1] = merged
            else:
                out.append(ins)
            k += 1
        return out
    return body(0, len(instrs))
