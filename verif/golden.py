"""The golden model: an instruction-level simulator of snpu cores and of the tiled array.

It is the executable specification of the ISA (:mod:`.isa`), the index formats
(:mod:`.index`, :mod:`.layout`) and the numerics (:mod:`.numerics`).  The RTL is checked
against it bit for bit, and the compiler's int8 reference is checked against it too.

:func:`run` executes a ROM image against an external-memory image.  Instructions are
dispatched in order into per-unit queues and started when their dependency tokens are
available, as in the hardware; each instruction takes the cycles :mod:`.timing` estimates.
The result holds the final memory, per-unit busy cycles, the estimated total and the counters
the RTL also reports.  Every error (illegal word, address out of range, malformed index,
deadlock, race between units) is an :class:`~snpu.errors.SnpuError` naming the ROM word.
:func:`run_mesh` runs one ROM per core of an array with the network between them.

Where things are: :mod:`.core_model` (one core's state, instruction semantics, scheduler),
:mod:`.mesh` (the network and the array), this module (the entry points).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from snpu.config import CoreConfig

from . import timing
from .core_model import Machine, Packet, Scheduler, Stats, decode_rom  # noqa: F401 (API)
from .mesh import MeshResult, run_mesh  # noqa: F401 (API)


@dataclass
class RunResult:
    ext: np.ndarray  #: external memory after the run (uint8)
    stats: Stats
    machine: "Machine"
    trace: list[tuple[int, str, int, int]] = field(default_factory=list)  #: (word, unit, start, end)



def run(words: Sequence[int], ext: np.ndarray, config: CoreConfig | None = None, *,
        protect: Sequence[tuple[int, int]] = (), check_races: bool = True,
        trace: bool = False, max_instructions: int | None = None,
        progress: Callable[[int], None] | None = None,
        bus_error: tuple[int, int] | None = None,
        far: "timing.FarMemory | None" = None) -> RunResult:
    """Run a ROM image on one core of the golden model (a 1 x 1 mesh: a ``send`` to core
    (0, 0) comes back to its own local memory).

    Parameters
    ----------
    words:
        Instruction words (the ROM).  Execution ends at ``halt``; running off the end of the
        ROM is an error.
    ext:
        External memory (uint8); it is copied, the result holds the final contents.
    protect:
        Byte ranges stores must not touch (where the ROM lives in external memory).
    check_races:
        Check that every pair of conflicting accesses on different units is ordered by tokens.
    progress:
        Called now and then with the number of instructions dispatched so far.
    bus_error:
        ``(lo, hi)`` external addresses that answer bus errors (see :class:`Machine`).
    far:
        The slower far range of external memory (:class:`~.timing.FarMemory`; timing only).

    An illegal word faults (``ILLEGAL``) when the dispatcher reaches it, as in the core;
    words after ``halt`` are never decoded.
    """
    res = run_mesh({(0, 0): words}, ext, config, mesh=(1, 1), protect=protect,
                   check_races=check_races, trace=trace, max_instructions=max_instructions,
                   progress=progress, bus_error=bus_error, far=far)
    core = res.cores[(0, 0)]
    return RunResult(res.ext, core.stats, core.machine, core.trace)


def run_image(rom: Sequence[int], image, config: CoreConfig | None = None, **kw) -> RunResult:
    """Run a ROM against a :class:`~snpu.verif.image.MemoryImage`, protecting its rom region;
    its ``far`` regions are far memory (:class:`~.timing.FarMemory` with default timing
    unless ``far`` is given)."""
    protect = [(r.addr, r.end) for r in image.regions.values() if r.kind == "rom"]
    kw.setdefault("far", timing.FarMemory.of_image(image))
    return run(rom, image.data, config, protect=protect, **kw)
