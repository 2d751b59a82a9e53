"""Building programs: instructions plus the external-memory image they run against.

:class:`Program` collects instructions (skipping ``cfg`` writes that would not change a
register) and owns a :class:`~snpu.verif.image.MemoryImage` whose first region is the ROM.
Tests, the random program generator and the compiler's emitter all build programs this way.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from snpu.config import CoreConfig

from . import isa, layout
from .asm import format_instr
from .image import MemoryImage
from .isa import Instr, Unit


class Program:
    """A program under construction.

    Parameters
    ----------
    config:
        The core the program targets.
    mem_bytes:
        Size of external memory.
    rom_bytes:
        Bytes reserved at address 0 for the ROM (where the RTL fetches instructions).
    """

    def __init__(self, config: CoreConfig | None = None, mem_bytes: int = 1 << 20,
                 rom_bytes: int = 1 << 16, *, image: MemoryImage | None = None,
                 rom_name: str = "rom"):
        self.config = config or CoreConfig()
        self.rom_name = rom_name
        if image is None:
            self.image = MemoryImage(mem_bytes)
            self.image.add_region(rom_name, 0, rom_bytes, "rom")
        else:  # a shared image; the ROM region is placed by place_rom()
            self.image = image
        self.instrs: list[Instr] = []
        self.meta: dict = {}  #: what a generator records for an independent reference
        #: who emitted each instruction (``tags[i]`` for ``instrs[i]``): the value of
        #: :attr:`tag` at the time, e.g. a compiler's layer name (the cost model's key)
        self.tags: list = []
        self.tag = None
        self._regs = {r.name: r.reset for r in isa.REGISTERS}

    # Instructions ------------------------------------------------------------------------------
    def emit(self, op: str, *, wait: Iterable[Unit] = (), signal: Iterable[Unit] = (),
             **args: int) -> Instr:
        instr = isa.make(op, wait=wait, signal=signal, **args)
        why = isa.validate(instr)
        if why:
            raise ValueError(why)
        self.instrs.append(instr)
        self.tags.append(self.tag)
        return instr

    def cfg(self, reg: str, value: int, *, force: bool = False) -> None:
        """Set a register; emits nothing if it already holds ``value``."""
        if force or self._regs[reg] != value:
            self.emit("cfg", reg=reg, value=int(value))
            self._regs[reg] = int(value)

    def cfgs(self, **values: int) -> None:
        """``p.cfgs(mx__nvec=4)`` sets ``mx.nvec``; keyword ``__`` stands for ``.``."""
        for k, v in values.items():
            self.cfg(k.replace("__", "."), v)

    def reg(self, name: str) -> int:
        return self._regs[name]

    def words(self) -> list[int]:
        words = [isa.encode(i) for i in self.instrs]
        if self.rom_name not in self.image.regions:
            return words
        rom = self.image.region(self.rom_name)
        if len(words) * isa.WORD_BYTES > rom.size:
            raise ValueError(f"program of {len(words)} words does not fit the {rom.size}-byte ROM "
                             "region")
        return words

    def text(self) -> str:
        return "".join(format_instr(i) + "\n" for i in self.instrs)

    def place_rom(self) -> list[int]:
        """Write the ROM words into the image's rom region (what the RTL fetches); in a
        shared image the region is allocated now, sized to the program."""
        words = self.words()
        raw = b"".join(w.to_bytes(isa.WORD_BYTES, "little") for w in words)
        if self.rom_name not in self.image.regions:
            self.image.alloc(self.rom_name, max(len(raw), 16), "rom", align=64)
        r = self.image.region(self.rom_name)
        self.image.data[r.addr:r.addr + len(raw)] = np.frombuffer(raw, np.uint8)
        return words

    # Data ------------------------------------------------------------------------------------
    def data(self, name: str, array: np.ndarray, kind: str = "input", align: int = 64) -> int:
        """Place ``array`` in external memory; returns its address."""
        a = np.asarray(array)
        r = self.image.alloc(name, max(a.nbytes, 1), kind, a.dtype.str, a.shape, align=align)
        self.image.write(name, a)
        return r.addr

    def space(self, name: str, shape: tuple[int, ...], dtype: str = "int8",
              kind: str = "output", align: int = 64) -> int:
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return self.image.alloc(name, max(n, 1), kind, dtype, shape, align=align).addr

    def load_weight_tile(self, name: str, w: np.ndarray, fmt: str, *, wbuf: int = 0,
                         widx: int = 0, mask: np.ndarray | None = None,
                         signal_last: Iterable[Unit] = (), wait_first: Iterable[Unit] = ()
                         ) -> list[layout.LaneBank]:
        """Place an encoded weight tile in memory and emit the lds that fill every lane's
        banks at offsets ``wbuf`` / ``widx``."""
        c = self.config
        banks = layout.encode_weight_tile(w, fmt, c.lanes, c.chunk_bits, mask)
        loads = []
        for g, b in enumerate(banks):
            for buf, raw, off in (("wbuf", b.wbuf, wbuf), ("widx", b.widx, widx)):
                if raw:
                    addr = self.data(f"{name}.{buf}{g}", np.frombuffer(raw, np.uint8), "weights", 8)
                    loads.append(dict(buf=buf, lane=g, ext=addr, dst=off, cols=len(raw)))
        for k, ld in enumerate(loads):
            self.emit("ld", **ld, wait=wait_first if k == 0 else (),
                      signal=signal_last if k == len(loads) - 1 else ())
        return banks
