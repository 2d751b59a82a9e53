"""Assembler and disassembler for the snpu ISA (text <-> 128-bit words).

Syntax, one instruction per line::

    ; comments start with ';' or '#'
    .equ N 512                       ; named constant (expressions may use earlier constants)
    cfg reg=mx.nvec value=1
    ld buf=nbuf ext=0x1000 dst=0 cols=N wait=mx signal=mx
    fc nbuf=0 nidx=0 wbuf=0 widx=0 acc=0 n_in=N rows=64 signal=vx

Operands are ``name=value`` pairs separated by blanks, in any order; a value is an integer
expression (decimal, ``0x``/``0b`` literals, ``.equ`` names, ``+ - * / // % << >> ( )``),
an enumeration name (``buf=nbuf``) or a register name (``reg=mx.nvec``).  ``wait=`` and
``signal=`` take comma-separated unit names.  Omitted operands take their documented default;
operands without a default are required.

The disassembler prints every operand in the order of the ISA table, so
``assemble(disassemble(words)) == words`` for every legal program.
"""

from __future__ import annotations

import ast
import operator
import re
from typing import Iterable, Mapping

from snpu.errors import AsmError

from . import isa
from .isa import Instr, Unit, format_instr  # noqa: F401  (format_instr: the canonical text)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*$")
_OPERAND_SPLIT = re.compile(r"\s+(?=[A-Za-z_][A-Za-z0-9_]*\s*=)")

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Div: operator.floordiv, ast.Mod: operator.mod,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.BitOr: operator.or_, ast.BitAnd: operator.and_,
}


def _eval(expr: str, consts: Mapping[str, int]) -> int:
    """Evaluate an integer expression safely (no names other than ``consts``)."""
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"cannot parse value {expr!r}") from None

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(
                node.value, bool):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in consts:
                return consts[node.id]
            raise ValueError(f"unknown name {node.id!r}")
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, (ast.FloorDiv, ast.Div, ast.Mod)) and right == 0:
                raise ValueError(f"division by zero in {expr!r}")
            return _BINOPS[type(node.op)](left, right)
        raise ValueError(f"unsupported expression {expr!r}")

    return ev(tree)


def _parse_units(text: str) -> frozenset[Unit]:
    units = set()
    for name in filter(None, (s.strip() for s in text.split(","))):
        try:
            units.add(Unit[name.upper()])
        except KeyError:
            raise ValueError(f"unknown unit {name!r} (units: "
                             f"{', '.join(u.name.lower() for u in Unit)})") from None
    return frozenset(units)


def parse_line(text: str, consts: dict[str, int]) -> Instr | None:
    """Parse one line; update ``consts`` on ``.equ``.  Raises ``ValueError`` with the reason."""
    code = re.split(r"[;#]", text, maxsplit=1)[0].strip()
    if not code:
        return None
    head, _, rest = code.replace("\t", " ").partition(" ")
    head, rest = head.strip().lower(), rest.strip()
    if head == ".equ":
        parts = rest.replace(",", " ").split(None, 1)
        if len(parts) != 2 or not _NAME.match(parts[0]):
            raise ValueError(".equ needs a name and a value: .equ NAME VALUE")
        consts[parts[0]] = _eval(parts[1], consts)
        return None
    opc = isa.OPCODE_BY_NAME.get(head)
    if opc is None:
        raise ValueError(f"unknown mnemonic {head!r}")
    if opc.reserved:
        raise ValueError(f"{head} is reserved in ISA v1")
    args: dict[str, int] = {}
    wait = signal = frozenset()
    fields = {f.name: f for f in opc.fields}
    for tok in filter(None, _OPERAND_SPLIT.split(rest)):
        name, eq, value = tok.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not value:
            raise ValueError(f"operand {tok!r} is not name=value")
        if name in args or (name == "wait" and wait) or (name == "signal" and signal):
            raise ValueError(f"operand {name} given twice")
        if name == "wait":
            wait = _parse_units(value)
        elif name == "signal":
            signal = _parse_units(value)
        elif name in fields:
            f = fields[name]
            if f.kind == "enum" and value in f.enum:
                args[name] = f.enum[value]
            elif f.kind == "enum" and _NAME.match(value) and value not in consts:
                raise ValueError(f"{head}: {name}={value} is not one of "
                                 f"{', '.join(f.enum)}")
            elif f.kind == "reg" and value in isa.REGISTER_BY_NAME:
                args[name] = isa.REGISTER_BY_NAME[value].number
            elif f.kind == "reg" and _NAME.match(value) and "." in value:
                raise ValueError(f"unknown register {value!r}")
            else:
                args[name] = _eval(value, consts)
        else:
            raise ValueError(f"{head} has no operand {name!r} (operands: "
                             f"{', '.join(fields) or 'none'}, wait, signal)")
    if head == "cfg":
        isa.cfg_flags(dict(args), args)  # a second / third register given
    for f in opc.fields:
        if f.name not in args:
            if f.default is None:
                raise ValueError(f"{head}: missing operand {f.name}")
            args[f.name] = f.default
    instr = Instr(head, {f.name: args[f.name] for f in opc.fields}, wait, signal)
    why = isa.validate(instr)
    if why:
        raise ValueError(why)
    return instr


def assemble(source: str, *, name: str = "<asm>") -> list[int]:
    """Assemble source text into instruction words; :class:`AsmError` names file and line."""
    consts: dict[str, int] = {}
    words = []
    for lineno, line in enumerate(source.splitlines(), 1):
        try:
            instr = parse_line(line, consts)
        except ValueError as e:
            raise AsmError(str(e), source=name, line=lineno) from None
        if instr is not None:
            words.append(isa.encode(instr))
    return words


def disassemble(words: Iterable[int], *, addresses: bool = True) -> str:
    """Disassemble words to source text; raises :class:`IllegalInstruction` on a bad word."""
    lines = []
    for i, w in enumerate(words):
        text = format_instr(isa.decode(w, address=i))
        lines.append(f"{text:<100} ; {i:05d}" if addresses else text)
    return "\n".join(lines) + ("\n" if lines else "")
