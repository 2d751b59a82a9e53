"""Errors that reach the user.

Everything the user can get wrong (a bad assembly line, an illegal instruction word, an
out-of-range buffer address, an unsupported ONNX node) raises a subclass of
:class:`SnpuError` whose message names the place and the value.  The CLI prints such errors
as one line and exits non-zero; any other exception is a bug in snpu and keeps its traceback.
"""

from __future__ import annotations


class SnpuError(Exception):
    """Base class of every user-facing error."""


class ConfigError(SnpuError, ValueError):
    """A core configuration parameter is out of range or inconsistent."""


class AsmError(SnpuError):
    """A line of assembly source cannot be assembled."""

    def __init__(self, message: str, *, source: str = "<asm>", line: int | None = None):
        self.source = source
        self.line = line
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {message}")


class IllegalInstruction(SnpuError):
    """An instruction word does not decode under the ISA."""

    def __init__(self, word: int, reason: str, *, address: int | None = None):
        self.word = word
        self.address = address
        self.reason = reason
        where = f"at ROM word {address} " if address is not None else ""
        super().__init__(f"illegal instruction {where}0x{word:032x}: {reason}")


class ImageError(SnpuError):
    """A ROM image, memory image or manifest is malformed."""


class IndexFormatError(SnpuError, ValueError):
    """An encoded connection index (direct or stride) is malformed.

    ``fault`` names the core's error code when the hardware detects this problem too
    (``"INDEX"``: a stride position beyond its row), else ``None``."""

    def __init__(self, message: str, *, fault: str | None = None):
        self.fault = fault
        super().__init__(message)


class ExecutionError(SnpuError):
    """A legal instruction cannot execute (bad address, deadlock, race, ...).

    ``fault`` is the error code the core reports for it (``"RANGE"``, ``"ALIGN"``,
    ``"INDEX"``, ``"FORMAT"``, ``"ILLEGAL"``, ``"LOAD_BUS"``, ``"STORE_BUS"``: the golden
    model is the specification of the core's faults) or ``None`` for a program error the hardware does
    not detect (a race, a deadlock, overlapping writes...): what the core does then is
    undefined.  ``core`` is the (x, y) of the core it happened on (set by the array
    model)."""

    def __init__(self, message: str, *, address: int | None = None, text: str | None = None,
                 fault: str | None = None):
        self.address = address
        self.fault = fault
        self.core: tuple[int, int] | None = None
        where = ""
        if address is not None:
            where = f"ROM word {address}"
            if text:
                where += f" ({text})"
            where += ": "
        super().__init__(where + message)


class CompileError(SnpuError):
    """A model cannot be compiled; the message names the node, the operator and why."""
