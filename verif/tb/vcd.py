"""A reader of the VCD waveforms the RTL simulation writes (``snpu sim --waves w.vcd``).

Checks what a waveform viewer needs (IEEE 1364 section 18): declarations closed by
``$enddefinitions``, every value change naming a declared identifier with a value as wide
as the variable, and times that never go back.  Verilator names scopes like ``$rootio``,
which stricter readers (pyvcd) refuse; viewers such as GTKWave accept them, and so does
this reader.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from snpu.errors import SnpuError


@dataclass
class VcdInfo:
    timescale: str = ""
    variables: dict[str, tuple[str, int]] = field(default_factory=dict)  #: id -> (path, width)
    end_time: int = 0
    changes: int = 0

    def names(self) -> set[str]:
        """Variable names without their scope (``busy``, ``clk``, ...)."""
        return {path.rsplit(".", 1)[-1] for path, _ in self.variables.values()}


def read_vcd(path: str | Path) -> VcdInfo:
    """Parse a whole VCD file; :class:`SnpuError` names the first problem and its line."""
    path = Path(path)
    info, scope = VcdInfo(), []
    header = True
    time = -1
    with open(path, "r", encoding="ascii", errors="replace") as f:
        tokens = ((n, t) for n, line in enumerate(f, 1) for t in line.split())
        for n, tok in tokens:
            if header:
                if tok == "$scope":
                    _, _kind = next(tokens)
                    scope.append(next(tokens)[1])
                    _expect(path, tokens, "$end")
                elif tok == "$upscope":
                    scope.pop()
                    _expect(path, tokens, "$end")
                elif tok == "$var":
                    _kind, width, ident, name = (next(tokens)[1] for _ in range(4))
                    rest = next(tokens)[1]
                    while rest != "$end":  # a bit range [hi:lo] may follow the name
                        rest = next(tokens)[1]
                    info.variables[ident] = (".".join([*scope, name]), int(width))
                elif tok == "$timescale":
                    info.timescale = " ".join(_until_end(tokens))
                elif tok == "$enddefinitions":
                    _expect(path, tokens, "$end")
                    header = False
                elif tok in ("$date", "$version", "$comment"):
                    _until_end(tokens)
                else:
                    raise SnpuError(f"{path}:{n}: unexpected {tok!r} in the header")
                continue
            if tok.startswith("#"):
                t = int(tok[1:])
                if t < time:
                    raise SnpuError(f"{path}:{n}: time {t} goes back (after {time})")
                time = t
            elif tok in ("$dumpvars", "$dumpall", "$dumpon", "$dumpoff", "$end"):
                continue
            elif tok[0] in "bB":
                ident = next(tokens)[1]
                _change(path, n, info, ident, len(tok) - 1)
            elif tok[0] in "01xXzZ":
                _change(path, n, info, tok[1:], 1)
            else:
                raise SnpuError(f"{path}:{n}: {tok!r} is not a value change")
    if header:
        raise SnpuError(f"{path}: no $enddefinitions: the header is cut off")
    info.end_time = max(time, 0)
    return info


def _change(path, n, info: VcdInfo, ident: str, bits: int) -> None:
    var = info.variables.get(ident)
    if var is None:
        raise SnpuError(f"{path}:{n}: value change of undeclared identifier {ident!r}")
    if bits > var[1]:
        raise SnpuError(f"{path}:{n}: {bits}-bit value for {var[0]} of {var[1]} bits")
    info.changes += 1


def _expect(path, tokens, want: str) -> None:
    n, tok = next(tokens)
    if tok != want:
        raise SnpuError(f"{path}:{n}: expected {want}, found {tok!r}")


def _until_end(tokens) -> list[str]:
    out = []
    for _, tok in tokens:
        if tok == "$end":
            return out
        out.append(tok)
    return out
