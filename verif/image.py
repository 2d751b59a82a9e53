"""ROM images and external-memory images.

ROM image formats
-----------------
``.hex``  one 128-bit word per line, 32 hexadecimal digits, most significant digit first:
          what ``$readmemh`` loads into ``reg [127:0] rom[]``.
``.bin``  raw words, 16 bytes each, little-endian.

External-memory image
---------------------
``name.bin`` holds the raw bytes of external memory from address 0; ``name.json`` (the
manifest) says what lives where::

    {"format": "snpu-mem/1", "size": 1048576,
     "regions": [{"name": "rom", "addr": 0, "size": 4096, "kind": "rom", "dtype": "uint8",
                  "shape": [4096]},
                 {"name": "x", "addr": 4096, "size": 64, "kind": "input", "dtype": "int8",
                  "shape": [64]}, ...]}

``kind`` is one of ``rom`` (where the core fetches its program), ``input``, ``output``,
``weights``, ``params``, ``scratch``.  Regions never overlap and lie inside ``size``.
:meth:`MemoryImage.to_readmemh` writes the same bytes as 64-bit words for the RTL memory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from snpu.errors import ImageError
from snpu.fileio import atomic_write

from .isa import WORD_BITS, WORD_BYTES

MANIFEST_FORMAT = "snpu-mem/1"
REGION_KINDS = ("rom", "input", "output", "weights", "params", "scratch", "far")


# --------------------------------------------------------------------------------------------
# ROM images
# --------------------------------------------------------------------------------------------


def rom_to_hex(words: Iterable[int]) -> str:
    return "".join(f"{w:032x}\n" for w in words)


def rom_to_bin(words: Iterable[int]) -> bytes:
    return b"".join(int(w).to_bytes(WORD_BYTES, "little") for w in words)


def rom_from_hex(text: str, *, source: str = "<hex>") -> list[int]:
    words = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("//", 1)[0].strip()
        if not line:
            continue
        if line.startswith("@"):
            raise ImageError(f"{source}:{lineno}: address records (@...) are not supported")
        try:
            w = int(line, 16)
        except ValueError:
            raise ImageError(f"{source}:{lineno}: {line[:40]!r} is not a hexadecimal word") from None
        if len(line) > WORD_BITS // 4 or w >> WORD_BITS:
            raise ImageError(f"{source}:{lineno}: word {line[:40]!r} is wider than 128 bits")
        words.append(w)
    return words


def rom_from_bin(data: bytes, *, source: str = "<bin>") -> list[int]:
    if len(data) % WORD_BYTES:
        raise ImageError(f"{source}: {len(data)} bytes is not a whole number of 16-byte words")
    return [int.from_bytes(data[i:i + WORD_BYTES], "little") for i in range(0, len(data), WORD_BYTES)]


def read_rom(path: str | Path) -> list[int]:
    """Read a ROM image; ``.bin`` is raw little-endian, anything else ``$readmemh`` text."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ImageError(f"{path}: no such ROM image") from None
    if path.suffix == ".bin":
        return rom_from_bin(data, source=str(path))
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise ImageError(f"{path}: not a hex ROM image (binary data; name binary images .bin)") from None
    return rom_from_hex(text, source=str(path))


def write_rom(path: str | Path, words: Iterable[int]) -> Path:
    """Write a ROM image, format by suffix (``.bin`` raw, otherwise hex)."""
    words = list(words)
    path = Path(path)
    return atomic_write(path, rom_to_bin(words) if path.suffix == ".bin" else rom_to_hex(words))


# --------------------------------------------------------------------------------------------
# External memory images
# --------------------------------------------------------------------------------------------


@dataclass
class Region:
    name: str
    addr: int
    size: int
    kind: str
    dtype: str = "uint8"
    shape: tuple[int, ...] = field(default_factory=tuple)

    @property
    def end(self) -> int:
        return self.addr + self.size

    def to_dict(self) -> dict:
        return {"name": self.name, "addr": self.addr, "size": self.size, "kind": self.kind,
                "dtype": self.dtype, "shape": list(self.shape)}


class MemoryImage:
    """A byte image of external memory plus named regions.

    Parameters
    ----------
    size:
        Bytes of external memory.
    """

    def __init__(self, size: int, *, growable: bool = False):
        if size <= 0 or size % 8:
            raise ImageError(f"memory size {size} must be a positive multiple of 8 bytes")
        self.size = size
        self.data = np.zeros(size, dtype=np.uint8)
        self.regions: dict[str, Region] = {}
        self._next = 0
        self.growable = growable

    def _grow(self, end: int) -> None:
        """Growable images (the compiler's) double until ``end`` fits."""
        size = self.size
        while size < end:
            size *= 2
        data = np.zeros(size, dtype=np.uint8)
        data[:self.size] = self.data
        self.data, self.size = data, size

    def trim(self) -> None:
        """Shrink a growable image to its last region (rounded to 64 bytes)."""
        end = max((r.end for r in self.regions.values()), default=8)
        size = max(64, -(-end // 64) * 64)
        self.data, self.size = self.data[:size].copy(), size

    # Regions ---------------------------------------------------------------------------------
    def add_region(self, name: str, addr: int, size: int, kind: str, dtype: str = "uint8",
                   shape: Iterable[int] | None = None) -> Region:
        if name in self.regions:
            raise ImageError(f"region {name!r} is defined twice")
        if kind not in REGION_KINDS:
            raise ImageError(f"region {name!r}: kind {kind!r} is not one of {REGION_KINDS}")
        if self.growable and addr >= 0 and size >= 0 and addr + size > self.size:
            self._grow(addr + size)
        if addr < 0 or size < 0 or addr + size > self.size:
            raise ImageError(f"region {name!r} [0x{addr:x}, 0x{addr + size:x}) lies outside "
                             f"memory of {self.size} bytes")
        try:
            itemsize = np.dtype(dtype).itemsize
        except TypeError:
            raise ImageError(f"region {name!r}: unknown dtype {dtype!r}") from None
        shape = tuple(int(s) for s in shape) if shape is not None else (size // itemsize,)
        if int(np.prod(shape, dtype=np.int64)) * itemsize > size:
            raise ImageError(f"region {name!r}: shape {shape} of {dtype} needs more than {size} bytes")
        for r in self.regions.values():
            if addr < r.end and r.addr < addr + size and size and r.size:
                raise ImageError(f"region {name!r} [0x{addr:x}, 0x{addr + size:x}) overlaps "
                                 f"{r.name!r} [0x{r.addr:x}, 0x{r.end:x})")
        reg = Region(name, addr, size, kind, str(np.dtype(dtype)), shape)
        self.regions[name] = reg
        self._next = max(self._next, reg.end)
        return reg

    def alloc(self, name: str, size: int, kind: str, dtype: str = "uint8",
              shape: Iterable[int] | None = None, align: int = 64) -> Region:
        """Place a region after every region so far, aligned to ``align`` bytes."""
        addr = -(-self._next // align) * align
        if addr + size > self.size and not self.growable:
            raise ImageError(f"out of external memory placing {name!r}: need {size} bytes at "
                             f"0x{addr:x}, memory is {self.size} bytes")
        return self.add_region(name, addr, size, kind, dtype, shape)

    def copy_image(self) -> "MemoryImage":
        other = MemoryImage(self.size, growable=self.growable)
        other.data = self.data.copy()
        other.regions = dict(self.regions)
        other._next = self._next
        return other

    def restore(self, copy: "MemoryImage") -> None:
        """Become ``copy`` again (one :meth:`copy_image` made): what was placed and written
        since is gone."""
        self.size, self.data, self.growable = copy.size, copy.data.copy(), copy.growable
        self.regions, self._next = dict(copy.regions), copy._next

    def region(self, name: str) -> Region:
        try:
            return self.regions[name]
        except KeyError:
            raise ImageError(f"no region named {name!r} (regions: "
                             f"{', '.join(self.regions) or 'none'})") from None

    def write(self, name: str, array: np.ndarray) -> None:
        r = self.region(name)
        raw = np.ascontiguousarray(array, dtype=r.dtype).view(np.uint8).reshape(-1)
        if raw.size > r.size:
            raise ImageError(f"region {name!r}: {raw.size} bytes do not fit in {r.size}")
        self.data[r.addr:r.addr + raw.size] = raw

    def read(self, name: str) -> np.ndarray:
        r = self.region(name)
        n = int(np.prod(r.shape, dtype=np.int64)) * np.dtype(r.dtype).itemsize
        return self.data[r.addr:r.addr + n].copy().view(r.dtype).reshape(r.shape)

    # Files -----------------------------------------------------------------------------------
    def manifest(self) -> dict:
        return {"format": MANIFEST_FORMAT, "size": self.size,
                "regions": [r.to_dict() for r in sorted(self.regions.values(), key=lambda r: r.addr)]}

    def save(self, path: str | Path) -> tuple[Path, Path]:
        """Write ``path`` (raw bytes) and its manifest ``path.with_suffix('.json')``."""
        path = Path(path)
        man = path.with_suffix(".json")
        atomic_write(path, self.data.tobytes())
        atomic_write(man, json.dumps(self.manifest(), indent=1) + "\n")
        return path, man

    @classmethod
    def load(cls, path: str | Path, manifest: str | Path | None = None) -> "MemoryImage":
        path = Path(path)
        man_path = Path(manifest) if manifest is not None else path.with_suffix(".json")
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ImageError(f"{path}: no such memory image") from None
        if man_path.exists():
            try:
                man = json.loads(man_path.read_text())
            except json.JSONDecodeError as e:
                raise ImageError(f"{man_path}: not valid JSON ({e.msg} at line {e.lineno})") from None
            if not isinstance(man, dict) or man.get("format") != MANIFEST_FORMAT:
                raise ImageError(f"{man_path}: not an {MANIFEST_FORMAT} manifest "
                                 f"(format field {man.get('format') if isinstance(man, dict) else None!r})")
            size = man.get("size")
            if not isinstance(size, int) or size < len(data):
                raise ImageError(f"{man_path}: size {size!r} is smaller than the {len(data)}-byte image")
        else:
            if manifest is not None:
                raise ImageError(f"{man_path}: no such manifest")
            man = {"size": -(-len(data) // 8) * 8, "regions": []}
        img = cls(man["size"])
        img.data[:len(data)] = np.frombuffer(data, dtype=np.uint8)
        regions = man.get("regions", [])
        if not isinstance(regions, list):
            raise ImageError(f"{man_path}: 'regions' is not a list")
        for i, r in enumerate(regions):
            try:
                img.add_region(r["name"], int(r["addr"]), int(r["size"]), r["kind"],
                               r.get("dtype", "uint8"), r.get("shape"))
            except (KeyError, TypeError, ValueError) as e:
                raise ImageError(f"{man_path}: region #{i} is malformed ({e})") from None
            except ImageError as e:
                raise ImageError(f"{man_path}: {e}") from None
        end = max((r.end for r in img.regions.values() if r.size), default=0)
        if len(data) < end:
            last = max(img.regions.values(), key=lambda r: r.end)
            raise ImageError(f"{path}: the file is short: {len(data)} bytes, but region "
                             f"{last.name!r} of its manifest ends at byte {end} (truncated copy?)")
        return img

    def to_readmemh(self, path: str | Path, word_bytes: int = 8) -> Path:
        """Write the image as ``$readmemh`` words of ``word_bytes`` (little-endian lanes)."""
        words = self.data.reshape(-1, word_bytes)[:, ::-1]
        text = "\n".join(w.tobytes().hex() for w in words) + "\n"
        return atomic_write(path, text)
