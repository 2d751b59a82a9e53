"""Pass: hoist register writes ahead of the tile they set up, then pair consecutive writes
of one unit into one ``cfg`` word.

A kernel writes each register right before the first instruction that reads it, so a
layer's first tile comes out as ``ld, cfg mx, fc, cfg vx, req, cfg st, st`` while every
later tile is ``ld, fc, req, st``: the first tile then cannot join the loop over the
others.  A ``cfg`` that neither waits nor signals moves up past the words of other units
before it, at most ``HOIST_WORDS`` of them besides other ``cfg`` words (the other stages
of one tile), never past a word of its own unit, a loop or its body, ``halt`` or ``sync``:
each unit runs its own queue in order, so only the dispatch order across units changes,
never what any unit does (the segment's deadlock check then runs on the result).  A ``cfg``
with tokens is a no-op or carrier the emitter placed for them, and stays.  The layer's
writes then stand together ahead of its first tile.

A layer's set-up writes several registers of one unit in a row (a load's strides, the MX
unit's vector loop, the VX unit's strides).  ``cfg`` carries a second and a third register
of the same unit (``reg2`` / ``value2``, ``two``; ``reg3`` / ``value3``, ``three``), so up to
three such writes take one ROM word and one dispatch.

A ``cfg`` word ``A`` of one or two registers and a single-register ``cfg`` ``B`` on the same
unit, next to each other in the same loop body, merge when ``B`` waits for no token and the
two do not signal the same unit (and ``B``'s value fits the slot: the third holds 22 bits):
the unit runs its queue in order and a ``cfg`` does nothing but write, so the merged word
(``A``'s waits, the writes in order, both signals after them) does what ``A`` then ``B``
did, with one dispatch fewer.  Three registers per word: densenet121 as shipped 2 510 ->
2 412 words, inception_v1 1 375 -> 1 333.
"""

from __future__ import annotations

from typing import Callable

from snpu.verif import isa
from snpu.verif.isa import Instr


#: how many words of other units (``cfg`` words aside) a register write moves up past: the
#: other three stages of a tile (``ld``, ``fc``, ``req``, ``st``); further up it would
#: land in the previous layer's last tiles and break their loops (measured on the zoo:
#: 1 to 6 words, and no limit, all give larger ROMs than 3)
HOIST_WORDS = 3


def _hoist(out: list[Instr], fence: int, ins: Instr) -> None:
    """Append ``ins`` to ``out`` (whose words from ``fence`` on are of the current body),
    a token-free ``cfg`` moved up as described in the module docstring."""
    j = len(out)
    if ins.op == "cfg" and not ins.wait and not ins.signal:
        u, passed = ins.unit, 0
        while j > fence and out[j - 1].op not in ("loop", "halt", "sync") and out[j - 1].unit != u:
            if out[j - 1].op != "cfg":
                if passed == HOIST_WORDS:
                    break
                passed += 1
            j -= 1
    out.insert(j, ins)


def _single(ins: Instr) -> bool:
    return ins.op == "cfg" and not ins.args["two"]


#: the widths of the values ``cfg``'s further registers hold (:data:`isa.CFG_SLOTS`)
_SLOT_BITS = [isa.OPCODE_BY_NAME["cfg"].field(vf).width for _, vf, _ in isa.CFG_SLOTS]


def _merge(a: Instr, b: Instr) -> Instr | None:
    """``a`` (a ``cfg`` of one or two registers) with ``b``'s register as its next one, or
    ``None`` where they do not merge (module docstring; the third slot's value is 22 bits)."""
    if a.op != "cfg" or not _single(b) or b.wait or (a.signal & b.signal):
        return None
    if isa.REGISTER_BY_NUMBER[a.args["reg"]].unit != isa.REGISTER_BY_NUMBER[b.args["reg"]].unit:
        return None
    k = a.args["two"] + a.args["three"]  # further registers a holds
    if k == len(isa.CFG_SLOTS) or b.args["value"] >> _SLOT_BITS[k]:
        return None
    reg, value, flag = isa.CFG_SLOTS[k]
    return Instr("cfg", {**a.args, reg: b.args["reg"], value: b.args["value"], flag: 1},
                 a.wait, a.signal | b.signal)


def pair_cfg(instrs: list[Instr]) -> list[Instr]:
    """``instrs`` (a segment's program, loop words included) with its token-free register
    writes hoisted and every mergeable pair of them in one ``cfg`` word; loop bodies keep
    their own words."""
    return _per_body(_per_body(instrs, _hoist), _pair)


def _pair(out: list[Instr], fence: int, ins: Instr) -> None:
    """Append ``ins`` to ``out``, merged into the word before where that is a ``cfg`` of
    the same body it pairs with."""
    merged = _merge(out[-1], ins) if len(out) > fence else None
    if merged is not None:
        out[-1] = merged
    else:
        out.append(ins)


def _per_body(instrs: list[Instr], step: Callable[[list[Instr], int, Instr], None]) -> list[Instr]:
    """``instrs`` rebuilt body by body: ``step(out, fence, ins)`` adds each word that is not
    a loop to ``out``, whose words from ``fence`` on are of the same body (not of a loop
    before them); each loop's ``body`` is set to its rebuilt body's length."""
    def body(lo: int, hi: int) -> list[Instr]:
        out: list[Instr] = []
        fence = 0
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
            step(out, fence, ins)
            k += 1
        return out
    return body(0, len(instrs))
