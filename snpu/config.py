"""Core configuration: the hardware parameters shared by the RTL, golden model and compiler.

One :class:`CoreConfig` describes one build of the core.  The RTL is elaborated from it, the
golden model checks buffer bounds and lane banking against it, and the compiler tiles to it.
It round-trips through JSON (``snpu verilog --core cfg.json``, ``snpu compile --core``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError


def _pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


@dataclass(frozen=True)
class CoreConfig:
    """Parameters of one core.

    Parameters
    ----------
    lanes:
        Number of MAC lanes ``P``.  Lane ``g`` owns the output rows ``r`` with ``r % P == g``;
        accumulator and output words are ``P`` elements wide.
    chunk_bits:
        Index bits a lane scans per cycle (``B``), one 64-bit buffer word.  Direct-index rows
        are padded to a multiple of ``B`` bits.
    nbuf_bytes:
        Neuron buffer (first input cache) size in bytes.  Each lane holds a private copy so
        lanes never wait for each other.
    nidx_bytes:
        Neuron index buffer size in bytes (thresholded bitmaps and loaded indices).
    wbuf_bytes, widx_bytes:
        Per-lane weight value bank and weight index bank sizes (second input cache).
    acc_words:
        Accumulator depth in words of ``P`` int32 elements.
    obuf_bytes:
        Output cache size in bytes.
    param_rows:
        Requantisation parameter rows (``P`` channels each).
    vx_lanes:
        Elements the VX unit (pooling, element-wise adds, requantisation) computes per
        cycle: a power of two dividing ``lanes``, or 0 for ``lanes``.  Narrower than the MAC
        lanes, the VX unit takes ``lanes / vx_lanes`` cycles per accumulator word (it reads
        the word once per slice of ``vx_lanes`` elements) and needs a ``vx_lanes``-th of the
        requantisers and ALU lanes: on a 16-lane core ``vx_lanes = 4`` saves about three
        quarters of the VX unit's logic and multipliers, and costs little where the layers
        are matrix-bound (an fc's requantisation is one word per ``lanes`` rows).
    axi_data_bits:
        AXI4 data bus width: 64, 128 or 256.  The LD unit reads and writes its buffers a
        bus word per cycle; instruction fetch and ST use 8-byte (narrow) beats.
    queue_depth:
        Instruction queue depth in front of each unit.
    token_depth:
        Capacity of each dependency-token channel between two units.
    icache_lines:
        Instruction cache lines (4 words, 64 bytes each; direct-mapped, in block RAM).
    local_bytes:
        Local memory (scratchpad, block RAM) size: ``ld`` / ``st`` reach it at
        ``isa.LOCAL_BASE``; ``send`` / ``recv`` move data between the local memories of
        the cores of a mesh.
    """

    lanes: int = 16
    chunk_bits: int = 64
    nbuf_bytes: int = 16384
    nidx_bytes: int = 4096
    wbuf_bytes: int = 16384
    widx_bytes: int = 8192
    acc_words: int = 512
    obuf_bytes: int = 16384
    param_rows: int = 256
    vx_lanes: int = 0
    axi_data_bits: int = 64
    queue_depth: int = 8
    token_depth: int = 8
    icache_lines: int = 64
    local_bytes: int = 65536

    def __post_init__(self) -> None:
        checks = [
            ("lanes", _pow2(self.lanes) and 1 <= self.lanes <= 64, "a power of two in 1..64"),
            ("chunk_bits", self.chunk_bits == 64, "64 (one 64-bit buffer word per chunk)"),
            ("nbuf_bytes", _pow2(self.nbuf_bytes) and 256 <= self.nbuf_bytes <= 65536,
             "a power of two in 256..65536"),
            ("nidx_bytes", _pow2(self.nidx_bytes) and self.nbuf_bytes // 8 <= self.nidx_bytes <= 16384,
             "a power of two in nbuf_bytes/8..16384"),
            ("wbuf_bytes", _pow2(self.wbuf_bytes) and 64 <= self.wbuf_bytes <= 65536,
             "a power of two in 64..65536"),
            ("widx_bytes", _pow2(self.widx_bytes) and 64 <= self.widx_bytes <= 65536,
             "a power of two in 64..65536"),
            ("acc_words", _pow2(self.acc_words) and self.acc_words * self.lanes <= 65536,
             "a power of two with acc_words*lanes <= 65536"),
            ("obuf_bytes", _pow2(self.obuf_bytes) and self.lanes <= self.obuf_bytes <= 65536,
             "a power of two in lanes..65536"),
            ("param_rows", _pow2(self.param_rows) and self.param_rows <= 4096,
             "a power of two <= 4096"),
            ("vx_lanes", self.vx_lanes == 0 or (_pow2(self.vx_lanes) and self.vx_lanes <= self.lanes),
             "0 (as many as lanes) or a power of two in 1..lanes"),
            ("axi_data_bits", self.axi_data_bits in (64, 128, 256), "64, 128 or 256"),
            ("queue_depth", _pow2(self.queue_depth) and 2 <= self.queue_depth <= 64,
             "a power of two in 2..64"),
            ("token_depth", 1 <= self.token_depth <= 255, "in 1..255"),
            ("icache_lines", _pow2(self.icache_lines) and 4 <= self.icache_lines <= 4096,
             "a power of two in 4..4096"),
            ("local_bytes", _pow2(self.local_bytes) and 1024 <= self.local_bytes <= 1 << 20,
             "a power of two in 1024..1048576"),
        ]
        for name, ok, want in checks:
            if not ok:
                raise ConfigError(f"core config: {name}={getattr(self, name)!r} must be {want}")

    # Derived sizes -------------------------------------------------------------------------
    @property
    def acc_elems(self) -> int:
        """Accumulator size in int32 elements."""
        return self.acc_words * self.lanes

    @property
    def vx_width(self) -> int:
        """Elements the VX unit computes per cycle (``vx_lanes``, or ``lanes`` for 0)."""
        return self.vx_lanes or self.lanes

    @property
    def vx_slices(self) -> int:
        """Cycles the VX unit spends on one accumulator word: ``lanes / vx_width``."""
        return self.lanes // self.vx_width

    @property
    def axi_bytes(self) -> int:
        """Bytes per AXI beat."""
        return self.axi_data_bits // 8

    @property
    def param_row_bytes(self) -> int:
        """Bytes of one requantisation parameter row (8 bytes per channel)."""
        return self.lanes * 8

    @property
    def param_bytes(self) -> int:
        return self.param_rows * self.param_row_bytes

    # Serialisation --------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict, *, source: str = "core config") -> "CoreConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"{source}: unknown parameter(s) {', '.join(unknown)}; "
                              f"known: {', '.join(sorted(known))}")
        for k, v in d.items():
            if not isinstance(v, int) or isinstance(v, bool):
                raise ConfigError(f"{source}: {k} must be an integer, got {v!r}")
        return cls(**d)

    @classmethod
    def load(cls, path: str | Path) -> "CoreConfig":
        path = Path(path)
        try:
            d = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such core config file") from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
        if not isinstance(d, dict):
            raise ConfigError(f"{path}: expected a JSON object of core parameters")
        return cls.from_dict(d, source=str(path))


#: a small core (4 lanes, small buffers, so that even small layers are tiled and split): the
#: one the RTL tests, the fast regressions and the calibration benchmarks build
SMALL_CORE = CoreConfig(lanes=4, nbuf_bytes=4096, nidx_bytes=1024, wbuf_bytes=4096,
                        widx_bytes=2048, acc_words=256, obuf_bytes=2048, param_rows=32)


# The tiled array's external-memory ports ------------------------------------------------
def memory_ports(mesh: tuple[int, int], ports: int | None = None) -> int:
    """The number of external-memory ports of a ``mesh = (width, height)`` array: ``ports``,
    or by default one per mesh column (a memory channel at the foot of every column, the
    way the array scales its memory bandwidth with its width).  1 .. width."""
    width = int(mesh[0])
    if ports is None:
        return width
    if not 1 <= int(ports) <= width:
        raise ConfigError(f"memory ports: {ports!r} must be in 1..{width} (the mesh's width: "
                          "each port serves whole columns)")
    return int(ports)


def memory_port(x: int, width: int, ports: int) -> int:
    """The external-memory port that the cores of mesh column ``x`` use: columns are dealt
    to the ports in contiguous groups, as equal as possible."""
    return x * ports // width
