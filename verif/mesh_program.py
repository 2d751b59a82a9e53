"""Programs for the tiled array: one ROM per core, one shared external-memory image.

A :class:`MeshProgram` is built like a :class:`~snpu.verif.program.Program` per core
(:meth:`MeshProgram.core` gives core (x, y)'s builder, all of them allocating in the shared
image), run on the golden model (:meth:`run_golden`), and saved as a directory::

    manifest.json      format, mesh size, core configuration, one entry per core
    core_X_Y.hex       core (X, Y)'s ROM ($readmemh text, one 128-bit word per line)
    memory.bin/.json   the shared external-memory image (ROM regions ``rom_X_Y`` empty:
                       the loader writes each ROM into its region)

``snpu sim --mesh WxH manifest.json [--rtl]`` runs a saved one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from snpu.config import CoreConfig, memory_ports
from snpu.errors import ImageError, SnpuError
from snpu.fileio import atomic_write

from .image import MemoryImage, read_rom, write_rom
from .isa import WORD_BYTES
from .program import Program

Coord = tuple[int, int]
MANIFEST_FORMAT = "snpu-mesh-program"
MANIFEST_VERSION = 1


def rom_region(xy: Coord) -> str:
    """The name of core (x, y)'s ROM region in the shared image."""
    return f"rom_{xy[0]}_{xy[1]}"


def parse_mesh(text: str) -> Coord:
    """``"2x2"`` -> ``(2, 2)`` (width, height); :class:`SnpuError` on anything else."""
    from .isa import MESH_BITS

    parts = str(text).lower().split("x")
    try:
        w, h = (int(p) for p in parts)
    except ValueError:
        raise SnpuError(f"mesh {text!r} is not WIDTHxHEIGHT (e.g. 2x2)") from None
    side = 1 << MESH_BITS
    if not (1 <= w <= side and 1 <= h <= side):
        raise SnpuError(f"mesh {text!r}: each side must be 1..{side} cores")
    return w, h


@dataclass
class MeshProgram:
    """A program for a ``mesh = (width, height)`` array of cores with ``config``."""

    config: CoreConfig
    mesh: Coord
    image: MemoryImage
    roms: dict[Coord, list[int]] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)  #: what a generator records for a reference
    #: the array's external-memory ports (``None``: one per column,
    #: :func:`snpu.config.memory_ports`)
    memory_ports: int | None = None

    @classmethod
    def new(cls, config: CoreConfig, mesh: Coord, mem_bytes: int = 1 << 18) -> "MeshProgram":
        return cls(config, tuple(mesh), MemoryImage(mem_bytes))

    @property
    def coords(self) -> list[Coord]:
        """Every core of the mesh, row-major (the RTL array's per-core port order)."""
        w, h = self.mesh
        return [(x, y) for y in range(h) for x in range(w)]

    def core(self, xy: Coord) -> Program:
        """Core (x, y)'s builder (created on first use); call :meth:`finish` when every
        core's instructions are in."""
        builders = self.__dict__.setdefault("_builders", {})
        if xy not in builders:
            w, h = self.mesh
            if not (0 <= xy[0] < w and 0 <= xy[1] < h):
                raise ValueError(f"core {xy} is outside the {w} x {h} mesh")
            builders[xy] = Program(self.config, image=self.image, rom_name=rom_region(xy))
        return builders[xy]

    def finish(self) -> "MeshProgram":
        """Place every core's ROM in the image; a core without instructions gets a lone
        ``halt`` (every core of the array is started)."""
        for xy in self.coords:
            p = self.core(xy)
            if not p.instrs or p.instrs[-1].op != "halt":
                p.emit("halt")
            self.roms[xy] = p.place_rom()
        return self

    def placed(self) -> MemoryImage:
        """The image with every ROM written into its region (what the array fetches)."""
        img = self.image.copy_image()
        for xy, words in self.roms.items():
            r = img.region(rom_region(xy))
            raw = b"".join(w.to_bytes(WORD_BYTES, "little") for w in words)
            if len(raw) > r.size:
                raise ImageError(f"core {xy}: ROM of {len(words)} words does not fit region "
                                 f"{r.name!r} ({r.size} bytes)")
            img.data[r.addr:r.addr + len(raw)] = np.frombuffer(raw, np.uint8)
        return img

    def run_golden(self, **kw):
        """Run on the golden model (:func:`~snpu.verif.mesh.run_mesh`), ROM regions
        protected; returns its :class:`~snpu.verif.mesh.MeshResult`."""
        from .mesh import run_mesh

        img = self.placed()
        protect = [(r.addr, r.end) for r in img.regions.values() if r.kind == "rom"]
        return run_mesh(self.roms, img.data, self.config, mesh=self.mesh, protect=protect,
                        memory_ports=self.memory_ports, **kw)

    # Files ---------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Write the program into ``directory`` (written beside it, then swapped in whole:
        a reader never sees half a program); returns the manifest's path."""
        import shutil

        from snpu.fileio import replace_dir, temp_dir_beside

        target = Path(directory)
        d = temp_dir_beside(target)
        try:
            self._write(d)
            replace_dir(d, target)
        except BaseException:
            shutil.rmtree(d, ignore_errors=True)
            raise
        return target / "manifest.json"

    def _write(self, d: Path) -> None:
        cores = []
        for xy in self.coords:
            name = f"core_{xy[0]}_{xy[1]}.hex"
            write_rom(d / name, self.roms[xy])
            cores.append({"x": xy[0], "y": xy[1], "rom": name, "rom_region": rom_region(xy),
                          "words": len(self.roms[xy]),
                          "sha256": hashlib.sha256((d / name).read_bytes()).hexdigest()})
        self.image.save(d / "memory.bin")
        manifest = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION,
                    "mesh": list(self.mesh), "config": self.config.to_dict(),
                    "memory_ports": memory_ports(self.mesh, self.memory_ports),
                    "image": "memory.bin", "cores": cores}
        atomic_write(d / "manifest.json", json.dumps(manifest, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "MeshProgram":
        """Read a saved program from its ``manifest.json``; every problem is an
        :class:`ImageError` naming the file and the field."""
        path = Path(path)
        try:
            man = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ImageError(f"{path}: no such manifest") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ImageError(f"{path}: not a JSON mesh-program manifest ({e})") from None
        if not isinstance(man, dict) or man.get("format") != MANIFEST_FORMAT:
            raise ImageError(f"{path}: not a mesh-program manifest (format must be "
                             f"{MANIFEST_FORMAT!r})")
        if man.get("version") != MANIFEST_VERSION:
            raise ImageError(f"{path}: manifest version {man.get('version')!r} is not "
                             f"{MANIFEST_VERSION}")
        mesh = man.get("mesh")
        if (not isinstance(mesh, list) or len(mesh) != 2
                or not all(isinstance(v, int) for v in mesh)):
            raise ImageError(f"{path}: field 'mesh' must be [width, height], got {mesh!r}")
        try:
            mesh = parse_mesh(f"{mesh[0]}x{mesh[1]}")
            config = CoreConfig.from_dict(man.get("config") or {})
            ports = man.get("memory_ports")
            if ports is not None and (not isinstance(ports, int) or isinstance(ports, bool)):
                raise ImageError(f"field 'memory_ports' must be an integer, got {ports!r}")
            ports = memory_ports(mesh, ports)
        except SnpuError as e:
            raise ImageError(f"{path}: {e}") from None
        image = MemoryImage.load(path.parent / str(man.get("image", "memory.bin")))
        prog = cls(config, mesh, image, memory_ports=ports)
        entries = man.get("cores")
        if not isinstance(entries, list):
            raise ImageError(f"{path}: field 'cores' must be a list")
        for k, e in enumerate(entries):
            where = f"{path}: cores[{k}]"
            if not isinstance(e, dict) or not all(f in e for f in ("x", "y", "rom")):
                raise ImageError(f"{where} needs fields x, y and rom")
            xy = (e["x"], e["y"])
            if not all(isinstance(v, int) for v in xy) or not (0 <= xy[0] < mesh[0]
                                                               and 0 <= xy[1] < mesh[1]):
                raise ImageError(f"{where}: core {xy} is outside the {mesh[0]}x{mesh[1]} mesh")
            if xy in prog.roms:
                raise ImageError(f"{where}: core {xy} appears twice")
            rom_path = path.parent / str(e["rom"])
            words = read_rom(rom_path)
            want = e.get("sha256")
            if want and hashlib.sha256(rom_path.read_bytes()).hexdigest() != want:
                raise ImageError(f"{rom_path}: contents do not match the manifest's sha256 "
                                 "(changed since it was written?)")
            region = e.get("rom_region", rom_region(xy))
            if region != rom_region(xy):
                raise ImageError(f"{where}: rom_region must be {rom_region(xy)!r}")
            image.region(region)
            prog.roms[xy] = words
        missing = [xy for xy in prog.coords if xy not in prog.roms]
        if missing:
            raise ImageError(f"{path}: no ROM for core(s) {', '.join(map(str, missing))} "
                             "(every core of the mesh runs a program; idle ones just halt)")
        prog.placed()  # every ROM fits its region
        return prog
