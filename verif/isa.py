"""The snpu instruction set, defined once.

Everything else derives from the tables in this module: the encoder and decoder below, the
assembler and disassembler (:mod:`snpu.verif.asm`), the generated reference
``docs/isa.md`` (:func:`render_markdown`, checked by a test), the RTL instruction decoder and
the compiler's code generator.

Word format
-----------
Every instruction is one 128-bit word.  Bits are numbered from the least significant bit.

====== ======== ===========================================================================
bits   field    meaning
====== ======== ===========================================================================
0-5    opcode   selects the instruction and the unit that executes it
6-10   wait     bit ``u`` set: before starting, take one token from channel ``u -> self``
11-15  signal   bit ``u`` set: after finishing, put one token into channel ``self -> u``
16-127 operands laid out in declaration order, each field right after the previous one
====== ======== ===========================================================================

Bits above the last operand of an opcode are reserved and must be zero; a word with a
reserved bit set, an unknown or reserved opcode, an undefined enumeration value, a token
bit naming the instruction's own unit or an unimplemented unit, or a ``cfg`` value wider
than its register is illegal.

Units and dependency tokens
---------------------------
The dispatcher reads instructions in order and appends each one to the queue of its unit.
The units (LD, MX, VX, ST) run concurrently; each executes its own queue in order.  Between
every ordered pair of units there is a token channel (a counter of capacity
``CoreConfig.token_depth``).  An instruction whose ``wait`` names unit ``u`` starts only
after taking a token from ``u -> self``; when it finishes it puts a token into
``self -> v`` for each ``v`` in ``signal`` (stalling while that channel is full).  This is
the load/compute/store token scheme of VTA generalised to four units; it is how the
compiler expresses double buffering.  ``sync`` waits until every queue is empty and every
unit idle; ``halt`` does the same and then stops the core.

Register operands
-----------------
A few operands stand in for a configuration register: ``fc``'s ``nvec`` (``mx.nvec``),
``vred``'s and ``req``'s ``src_stride`` and ``dst_stride`` (``vx.src_stride``,
``vx.dst_stride``), ``st``'s ``src_stride`` (``st.src_stride``).  When such an operand is
not 0 the instruction runs with the register reading the operand's value; the register
itself keeps its value, and 0 means "the register".  A kernel whose pixel groups alternate
between two sizes then writes no register between them, so one loop body holds both
groups (a row of 13 pixels in groups of 8 and 5 was ``cfg``, ``fc``, ``cfg``, ``fc``), and
a reduction, a requantisation or a store carries its own strides.

Loops
-----
``loop`` is executed by the program sequencer in front of the dispatcher: the words of its
body are dispatched ``count`` times, each time with the same tokens, so a body's tokens must
balance over one iteration.  Loads and stores with ``walk=1`` move through memory as the
loops run: each loop level has one increment per stream (activations in, weights and
parameters, activations out); everything else in a body repeats as written.  A loop's
``entry`` lets its first iteration start inside the body: a repetition whose first copy is
cut short at the front (a row of pixel groups that starts on the second of two ping-pong
halves, say) is one loop, not a loop and a copy of the body's tail before it.  The sequencer
reads words through the instruction cache, so a body is fetched from external memory once
and then hits.

A double-buffered kernel alternates the halves of its activation buffers from one tile to
the next, and the halves of its weight banks from one weight tile to the next.  A loop
with a ``flip`` mask runs such tiles from one body: on its odd iterations (iteration
numbers 1, 3, ...) every *ping-pong operand* of the body's words of the kinds in the mask
-- bit 0 (``flip=1``) the activations', bit 1 (``flip=2``) the weights' -- is dispatched in
the other half of its buffer, its half bit inverted (the address XOR the half's size; the
sizes are powers of two, so this is one bit):

=============================== ============================================================
operand                          half
=============================== ============================================================
``fc.nbuf``; ``ld`` / ``ldc``    ``nbuf_bytes / 2``
``dst`` into nbuf
``fc.nidx``; ``ld`` / ``ldc``    ``nbuf_bytes / 16`` (the direct index of half of nbuf)
``dst`` into nidx
``fc.acc``, ``vred.dst/src``,    ``acc_elems / 2``
``vew.dst/a/b``, ``req.src``;
``ld`` / ``ldc`` ``dst`` into acc
``req.dst``, ``st.src``,         ``obuf_bytes / 2``
``stc.src``
``fc.wbuf``; ``ld`` ``dst`` into ``wbuf_bytes / 2`` (weights: ``flip`` bit 1)
wbuf
``fc.widx``; ``ld`` ``dst`` into ``widx_bytes / 2`` (weights: ``flip`` bit 1)
widx
=============================== ============================================================

Parameters and everything else repeat as written.  With nested flipping loops a kind's
half is inverted when an odd number of the loops flipping it are on odd iterations.

The core is started with the ROM's length (``rom_words``): dispatching at or past it is
ILLEGAL, as is a loop whose body reaches it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from snpu.errors import IllegalInstruction

from .index import FORMAT_CODES

WORD_BITS = 128
WORD_BYTES = WORD_BITS // 8


class Unit(enum.IntEnum):
    """Execution units."""

    LD = 0  #: DMA loads: external memory -> on-chip buffers (with the sparse processing unit)
    MX = 1  #: matrix unit: mapping unit + MAC lanes (sparse / dense FC)
    VX = 2  #: vector unit: pooling, element-wise, ReLU, requantisation
    ST = 3  #: DMA stores: output cache -> external memory
    NET = 4  #: the mesh interface: send local memory to another core, wait for arrivals


#: Loops nest at most this deep: a network's repeated blocks (shufflenet's units), each
#: block's weight tiles, a tile's rows, a row's pixel groups.
LOOP_DEPTH = 4

#: Units whose instructions exist.  Token bits for other units are illegal.
IMPLEMENTED_UNITS = (Unit.LD, Unit.MX, Unit.VX, Unit.ST, Unit.NET)

#: Where a core's local memory (scratchpad) appears in its address space: ``ld`` / ``st``
#: addresses in ``[LOCAL_BASE, LOCAL_BASE + local_bytes)`` reach it, the rest of the 32-bit
#: space is the shared external memory.  ``send`` / ``recv`` take local offsets.
LOCAL_BASE = 0xF000_0000
#: Tags of the NET unit's arrival counters.
NET_TAGS = 16
#: Mesh coordinates: the x / y fields of ``send``.
MESH_BITS = 4
NUM_UNIT_BITS = 5

OPCODE_BITS = 6
HEADER_BITS = OPCODE_BITS + 2 * NUM_UNIT_BITS
assert HEADER_BITS == 16


@dataclass(frozen=True)
class Field:
    """One operand field.

    ``kind`` is ``"uint"``, ``"sint"`` (two's complement), ``"enum"`` (named values),
    ``"flag"`` (1 bit) or ``"reg"`` (a configuration register number).  ``default`` is used by
    the assembler when the field is omitted (``None``: the field is required).  ``hex`` makes
    the disassembler print the value in hexadecimal (addresses in external memory).
    """

    name: str
    width: int
    doc: str
    kind: str = "uint"
    enum: Mapping[str, int] | None = None
    default: int | None = None
    hex: bool = False
    #: a *register operand*: when not 0, the instruction runs with this configuration
    #: register (its own unit's) reading the operand's value; the register keeps its own
    overrides: str | None = None

    @property
    def bounds(self) -> tuple[int, int]:
        """The smallest and largest value the field holds."""
        if self.kind == "sint":
            return -(1 << (self.width - 1)), (1 << (self.width - 1)) - 1
        return 0, (1 << self.width) - 1

    def check(self, value: int) -> str | None:
        """Return why ``value`` does not fit this field, or ``None`` if it does."""
        lo, hi = self.bounds
        if not lo <= value <= hi:
            return f"{self.name}={value} is outside {lo}..{hi} ({self.width}-bit {self.kind})"
        if self.kind == "enum" and value not in self.enum.values():
            names = ", ".join(f"{k}={v}" for k, v in self.enum.items())
            return f"{self.name}={value} is not one of {names}"
        return None


@dataclass(frozen=True)
class Opcode:
    """One instruction: its code, executing unit (``None``: the dispatcher) and operands."""

    mnemonic: str
    code: int
    unit: Unit | None
    fields: tuple[Field, ...]
    doc: str
    semantics: str = ""
    reserved: bool = False
    #: bit offset of each operand field (derived: operands are packed in order from bit 16)
    offsets: Mapping[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        offs, pos = {}, HEADER_BITS
        for f in self.fields:
            offs[f.name] = pos
            pos += f.width
        if pos > WORD_BITS:
            raise AssertionError(f"{self.mnemonic}: operands need {pos} bits > {WORD_BITS}")
        object.__setattr__(self, "offsets", offs)

    @property
    def used_bits(self) -> int:
        return HEADER_BITS + sum(f.width for f in self.fields)

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)


@dataclass(frozen=True)
class Register:
    """A configuration register, written by ``cfg`` and read by its unit's instructions."""

    name: str  #: ``unit.name``, e.g. ``mx.nvec``
    unit: Unit
    index: int
    width: int
    doc: str
    reset: int = 0
    values: tuple[int, ...] | None = None  #: the legal values, when not every value is

    @property
    def number(self) -> int:
        """The register number carried in ``cfg``'s ``reg`` field: ``unit << 5 | index``."""
        return (int(self.unit) << 5) | self.index


# --------------------------------------------------------------------------------------------
# Enumerations
# --------------------------------------------------------------------------------------------

BUFFERS = {"nbuf": 0, "nidx": 1, "wbuf": 2, "widx": 3, "acc": 4, "param": 5}
BUFFER_NAMES = {v: k for k, v in BUFFERS.items()}
#: the buffers ``ldc`` expands into (the codes of :data:`BUFFERS`)
COMPRESSED_TARGETS = {"nbuf": 0, "acc": 4}
FORMATS = FORMAT_CODES
REDUCE_OPS = {"max": 0, "sum": 1}

# --------------------------------------------------------------------------------------------
# Configuration registers
# --------------------------------------------------------------------------------------------

REGISTERS: tuple[Register, ...] = (
    # LD: DMA address generation (3-D: n3 x rows x cols bytes) and the sparse processing unit.
    Register("ld.ext_stride", Unit.LD, 0, 32, "bytes between rows in external memory"),
    Register("ld.dst_stride", Unit.LD, 1, 20,
             "units between rows in the destination buffer (bytes; int32 elements for acc)"),
    Register("ld.ext_stride3", Unit.LD, 2, 32, "bytes between planes (n3) in external memory"),
    Register("ld.dst_stride3", Unit.LD, 3, 20, "units between planes (n3) in the destination"),
    Register("ld.nidx_mode", Unit.LD, 4, 1,
             "1: loads into nbuf also write the neuron direct index (bit a of nidx = "
             "|nbuf[a]| > ld.thresh, after group pruning); 0: nidx untouched"),
    Register("ld.thresh", Unit.LD, 5, 7, "neuron threshold t of the sparse processing unit"),
    Register("ld.group_log2", Unit.LD, 6, 2,
             "neuron group pruning: 0 off, g>0 groups of 2**g consecutive nbuf bytes"),
    Register("ld.group_t3", Unit.LD, 7, 7, "group pruning: an element is small if |x| <= t3"),
    Register("ld.group_t4", Unit.LD, 8, 4,
             "group pruning: a group is deleted when more than t4 of its elements are small"),
    # MX: formats and the vector loop of fc.
    Register("mx.nfmt", Unit.MX, 0, 2, "neuron index format: 0 dense, 1 direct, 2 stride",
             values=(0, 1, 2)),
    Register("mx.npacked", Unit.MX, 1, 1,
             "1: nbuf holds only the kept neurons, packed in order; 0: neuron i at offset i"),
    Register("mx.wfmt", Unit.MX, 2, 2,
             "weight index format: 0 dense, 1 direct, 2 stride (sparse weights are packed; "
             "stride exactly when the fc merges: with stride neurons, or direct ones and "
             "mx.mixed=1; else an fc faults FORMAT)",
             values=(0, 1, 2)),
    Register("mx.nvec", Unit.MX, 3, 12, "number of input vectors fc processes", reset=1),
    Register("mx.nstride", Unit.MX, 4, 16, "bytes between input vectors in nbuf"),
    Register("mx.nidx_stride", Unit.MX, 5, 14, "bytes between input vectors' indices in nidx"),
    Register("mx.acc_stride", Unit.MX, 6, 16,
             "int32 elements between output vectors in acc (a multiple of lanes)"),
    Register("mx.mixed", Unit.MX, 7, 1,
             "direct x stride indices: 0 expand the stride side to direct and AND (claim 9), "
             "1 convert the direct side to stride and merge (claim 10); same result; the "
             "side converted must be the neurons (the lanes convert no weight index)"),
    # VX: outer-loop and reduction strides.
    Register("vx.src_stride", Unit.VX, 0, 16, "elements between outer iterations of src / a"),
    Register("vx.dst_stride", Unit.VX, 1, 16,
             "units between outer iterations of dst (acc elements, or obuf bytes for req)"),
    Register("vx.k1_stride", Unit.VX, 2, 16, "elements between steps of the first reduction"),
    Register("vx.k2_stride", Unit.VX, 3, 16, "elements between steps of the second reduction"),
    Register("vx.b_stride", Unit.VX, 4, 16, "elements between outer iterations of b (vew)"),
    # ST: DMA address generation.
    Register("st.ext_stride", Unit.ST, 0, 32, "bytes between rows in external memory"),
    Register("st.src_stride", Unit.ST, 1, 16, "bytes between rows in obuf"),
    Register("st.ext_stride3", Unit.ST, 2, 32, "bytes between planes (n3) in external memory"),
    Register("st.src_stride3", Unit.ST, 3, 16, "bytes between planes (n3) in obuf"),
    # NET: packetisation.
    Register("net.packet_log2", Unit.NET, 0, 3,
             "payload bytes per packet of a send: 8 << value (8 .. 1024); a send of more "
             "bytes goes as several packets", reset=5),
)

REGISTER_BY_NAME: dict[str, Register] = {r.name: r for r in REGISTERS}
REGISTER_BY_NUMBER: dict[int, Register] = {r.number: r for r in REGISTERS}
assert len(REGISTER_BY_NUMBER) == len(REGISTERS)

# --------------------------------------------------------------------------------------------
# Opcodes
# --------------------------------------------------------------------------------------------

_U = "uint"


def _f(name, width, doc, kind=_U, **kw) -> Field:
    return Field(name, width, doc, kind, **kw)


#: the operands ``ldc`` and ``stc`` share: where the stream is and the rows it holds
_STREAM_FIELDS = (
    _f("ext", 32, "first byte of the compressed stream in external memory (8-aligned)",
       hex=True),
    _f("rows", 12, "rows", default=1),
    _f("cols", 16, "values per row"),
)

#: the operands ``vew`` and ``vewp`` share, first in both (the VX unit reads them through
#: ``vew``'s layout for either)
_SCALED_ADD_FIELDS = (
    _f("dst", 16, "destination in acc (elements, multiple of lanes)"),
    _f("a", 16, "first operand in acc (elements, multiple of lanes)"),
    _f("b", 16, "second operand in acc (elements, multiple of lanes)"),
    _f("n_o", 12, "outer iterations", default=1),
    _f("n_i", 8, "words per outer iteration", default=1),
)
_RELU_FIELD = _f("relu", 1, "1: clamp negative results to 0 (ReLU)", "flag", default=0)

#: the buffers a ``ld`` deals to lane banks (plane p to lane ``lane + p``)
BANKED_BUFFERS = ("wbuf", "widx")


def ld_strides(buf: str, rows: int, cols: int, reg) -> tuple[int, int, int, int]:
    """(external plane stride, external row stride, destination plane stride, destination
    row stride) of a ``ld`` into ``buf`` with ``reg(name)`` the LD registers: the registers,
    except that a load into the lane banks reads consecutive bytes and puts every plane at
    ``dst`` of its own lane."""
    if buf in BANKED_BUFFERS:
        return rows * cols, cols, 0, reg("ld.dst_stride")
    return reg("ld.ext_stride3"), reg("ld.ext_stride"), reg("ld.dst_stride3"), reg("ld.dst_stride")


OPCODES: tuple[Opcode, ...] = (
    Opcode("halt", 0x01, None, (), "Wait until every unit is idle, then stop the core (done).",
           "drain all queues; done <- 1"),
    Opcode("sync", 0x02, None, (), "Barrier: wait until every queue is empty and every unit idle.",
           "drain all queues"),
    Opcode(
        "loop", 0x04, None,
        (_f("count", 16, "iterations (0: the body is skipped)"),
         _f("body", 12, "words in the body: the ones right after this instruction"),
         _f("in_inc", 24, "bytes per iteration added to walking lds into nbuf / nidx / acc",
            "sint", default=0),
         _f("w_inc", 24, "bytes per iteration added to walking lds into wbuf / widx / param",
            "sint", default=0),
         _f("out_inc", 24, "bytes per iteration added to walking sts", "sint", default=0),
         _f("entry", 10, "words of the body the first iteration skips: it starts at word "
            "pc+1+entry", default=0),
         _f("flip", 2, "odd iterations use the other half of the body's ping-pong operands: "
            "bit 0 those of nbuf, nidx, acc and obuf, bit 1 those of wbuf and widx",
            default=0)),
        "Hardware loop: run the next `body` words `count` times, then continue after them; "
        "the first time from word `entry` of the body on (a loop whose first iteration is "
        "the tail of its body).  "
        f"Loops nest up to {LOOP_DEPTH} deep; an inner body lies inside its enclosing body "
        "(it may end on the same word).  A `ld` / `st` with `walk=1` reads / writes at `ext` plus, for every "
        "enclosing loop, its iteration number times its increment for that stream: `in_inc` "
        "for activations loaded (nbuf, nidx, acc), `w_inc` for weights and parameters loaded "
        "(wbuf, widx, param), `out_inc` for stores (mod 2**32); the first iteration is iteration "
        "0.  An inner loop word the first iteration skips does not run: words of its body "
        "that iteration reaches run once, as plain words.  With `flip` bit 0 (bit 1), on the "
        "loop's odd iterations every activation (weight) ping-pong operand of its body (see "
        "Loops above) addresses the other half of its buffer; nested flipping loops compose "
        "(a kind's half flips when an odd number of the loops flipping it are on odd "
        "iterations).  Zero `body`, `entry` not below `body`, nesting deeper than "
        f"{LOOP_DEPTH}, a body leaving its enclosing body or running past the ROM "
        "(`rom_words`) is ILLEGAL at this word.",
        "if count > 0: run words [pc+1+entry, pc+body], then count-1 times words "
        "[pc+1, pc+body]; pc <- pc+body+1",
    ),
    Opcode(
        "cfg", 0x03, None,
        (_f("reg", 8, "register number (unit << 5 | index); see the register table", "reg"),
         _f("value", 32, "value; must fit the register's width"),
         _f("reg2", 8, "a second register, of the same unit (0 when `two` = 0)", "reg",
            default=0),
         _f("value2", 32, "its value (0 when `two` = 0)", default=0),
         _f("two", 1, "1: also write reg2 (the assembler sets it when reg2 is given)", "flag",
            default=0),
         _f("reg3", 8, "a third register, of the same unit (0 when `three` = 0)", "reg",
            default=0),
         _f("value3", 22, "its value (0 when `three` = 0)", default=0),
         _f("three", 1, "1: also write reg3 after reg2 (needs `two`; the assembler sets it "
                        "when reg3 is given)", "flag", default=0)),
        "Write a configuration register, or two or three registers of one unit (a kernel's "
        "strides, its vector loop).  Executes in order on the registers' unit.",
        "R[reg] <- value; then, if two, R[reg2] <- value2; then, if three, R[reg3] <- value3",
    ),
    Opcode(
        "ld", 0x08, Unit.LD,
        (_f("buf", 3, "destination buffer", "enum", enum=BUFFERS),
         _f("lane", 6, "lane bank for wbuf / widx, of plane 0: plane p goes to lane + p (must "
                       "be 0 for other buffers)", default=0),
         _f("ext", 32, "source byte address in external memory", hex=True),
         _f("dst", 20, "destination address (bytes; int32 elements for acc)"),
         _f("n3", 12, "planes", default=1),
         _f("rows", 12, "rows per plane", default=1),
         _f("cols", 16, "bytes per row"),
         _f("walk", 1, "1: add the enclosing loops' ld offsets to ext", "flag", default=0)),
        "3-D DMA load from external memory into an on-chip buffer.  A load into the lane "
        "banks (wbuf / widx) deals planes to lanes: it reads n3 x rows x cols consecutive "
        "bytes (no external strides) and puts plane p at dst of lane lane+p's bank "
        "(ld.dst_stride3 unused), so loading a weight tile sets no register.",
        "for p<n3, r<rows, c<cols: B[dst + p*ld.dst_stride3 + r*ld.dst_stride + c] <- "
        "E[ext + p*ld.ext_stride3 + r*ld.ext_stride + c]; wbuf / widx: "
        "bank(lane+p)[dst + r*ld.dst_stride + c] <- E[ext + (p*rows + r)*cols + c]; "
        "acc sign-extends int8 to int32; "
        "nbuf loads with ld.nidx_mode=1 also write nidx bits (threshold, group pruning)",
    ),
    Opcode(
        "ldc", 0x09, Unit.LD,
        (_f("buf", 3, "destination buffer: nbuf (with its neuron index) or acc", "enum",
            enum=COMPRESSED_TARGETS),
         _f("dst", 20, "first row's destination (bytes; int32 elements for acc; 8-aligned)"),
         *_STREAM_FIELDS),
        "Load activations kept in compressed form (the stream `stc` writes: a length header, "
        "then per 64-value chunk a mask word and its non-zero values padded to a word) and "
        "expand them, reading exactly the bytes the header counts.  "
        "Into nbuf the neuron index comes along: the nidx bits of the expanded bytes are set "
        "where a value is non-zero, so `fc` with the direct neuron index skips the zeros "
        "without a threshold pass.  dst, ext or ld.dst_stride (rows > 1) not 8-aligned is "
        "ALIGN; a row outside the buffer is RANGE.",
        "for r<rows: B[dst + r*ld.dst_stride .. +cols] <- expand(row r of the stream at ext); "
        "acc sign-extends; nbuf also writes nidx bit a = (nbuf[a] != 0)",
    ),
    Opcode(
        "fc", 0x10, Unit.MX,
        (_f("nbuf", 16, "first input vector in nbuf (bytes)"),
         _f("nidx", 14, "first input vector's index in nidx (bytes; 8-aligned when direct)"),
         _f("wbuf", 16, "first weight value in every lane's wbuf bank (bytes)"),
         _f("widx", 16, "first weight index record in every lane's widx bank (bytes; "
                        "8-aligned when direct)"),
         _f("acc", 16, "first output element in acc (a multiple of lanes)"),
         _f("n_in", 16, "input neurons per vector"),
         _f("rows", 12, "output neurons (weight rows); row r lives in lane r % lanes"),
         _f("accumulate", 1, "1: add to acc; 0: overwrite", "flag", default=0),
         _f("nvec", 5, "input vectors (register operand: 0 = mx.nvec)", default=0,
            overrides="mx.nvec")),
        "Sparse or dense fully connected layer over mx.nvec input vectors (matrix-vector or "
        "matrix-matrix; `nvec`, when not 0, in place of mx.nvec).  Convolution is lowered "
        "to fc over im2col patches loaded by ld.  The lanes convert no weight index: stride "
        "weights without the merge, or the merge without stride weights, is FORMAT (checked "
        "first); acc or a direct index misaligned is ALIGN; outputs past acc or unpacked "
        "vectors past nbuf is RANGE.",
        "for v<mx.nvec, r<rows: acc[acc + v*mx.acc_stride + r] (+)= "
        "sum over pairs i selected by index(neurons v) AND index(weights r) of x[v,i]*w[r,i] "
        "(int8 x int8, int32 wrap-around)",
    ),
    Opcode(
        "vred", 0x18, Unit.VX,
        (_f("mode", 2, "reduction", "enum", enum=REDUCE_OPS),
         _f("dst", 16, "destination in acc (elements, multiple of lanes)"),
         _f("src", 16, "source in acc (elements, multiple of lanes)"),
         _f("n_o", 12, "outer iterations", default=1),
         _f("n_i", 8, "words (of lanes elements) per outer iteration", default=1),
         _f("k1", 8, "first reduction extent", default=1),
         _f("k2", 8, "second reduction extent", default=1),
         _f("src_stride", 16, "elements between outer iterations of src (register operand: "
                              "0 = vx.src_stride)", default=0, overrides="vx.src_stride"),
         _f("dst_stride", 16, "elements between outer iterations of dst (register operand: "
                              "0 = vx.dst_stride)", default=0, overrides="vx.dst_stride")),
        "Windowed reduction over accumulator words: max pooling, sum for average pooling, "
        "copies (k1 = k2 = 1).  `src_stride` / `dst_stride`, when not 0, stand in for "
        "vx.src_stride / vx.dst_stride.",
        "for o<n_o, i<n_i: acc[dst + o*vx.dst_stride + i*P ..+P] <- mode over j1<k1, j2<k2 of "
        "acc[src + o*vx.src_stride + i*P + j1*vx.k1_stride + j2*vx.k2_stride ..+P]",
    ),
    Opcode(
        "vew", 0x19, Unit.VX,
        (*_SCALED_ADD_FIELDS,
         _f("ma", 16, "multiplier of a", "sint", default=1),
         _f("mb", 16, "multiplier of b", "sint", default=0),
         _RELU_FIELD),
        "Element-wise scaled add over accumulator words (residual add, ReLU, scaling).",
        "for o<n_o, i<n_i, l<P: d = wrap32(a[..]*ma + b[..]*mb); acc[dst..] <- relu ? max(d,0) : d "
        "(a advances by vx.src_stride, b by vx.b_stride, dst by vx.dst_stride)",
    ),
    Opcode(
        "vewp", 0x1B, Unit.VX,
        (*_SCALED_ADD_FIELDS,
         _f("param", 12, "parameter row holding the multipliers"),
         _RELU_FIELD),
        "`vew` with its multipliers in the parameter memory: `ma` and `mb` are the int16 at "
        "bytes 0-1 and 2-3 (little-endian) of parameter row `param` (lane 0's record; the "
        "rest of the row is not read).  A layer's multipliers then travel with its other "
        "parameters, so two layers differing only in their scales run the same words (one "
        "loop body over a network's repeated units).  A row past the parameter memory is "
        "RANGE.",
        "ma, mb <- int16 at param[param*row_bytes + 0], [.. + 2]; then as vew",
    ),
    Opcode(
        "req", 0x1A, Unit.VX,
        (_f("dst", 16, "destination in obuf (bytes, multiple of lanes)"),
         _f("src", 16, "source in acc (elements, multiple of lanes)"),
         _f("param", 12, "first requantisation parameter row"),
         _f("n_o", 12, "outer iterations", default=1),
         _f("n_i", 8, "words per outer iteration; word i uses parameter row param + i", default=1),
         _f("relu", 1, "1: ReLU (clamp to 0..127)", "flag", default=0),
         _f("src_stride", 16, "elements between outer iterations of src (register operand: "
                              "0 = vx.src_stride)", default=0, overrides="vx.src_stride"),
         _f("dst_stride", 16, "bytes between outer iterations of dst (register operand: "
                              "0 = vx.dst_stride)", default=0, overrides="vx.dst_stride")),
        "Requantise int32 accumulators to int8 into the output cache, with per-channel bias, "
        "multiplier and shift, optional ReLU, saturation.  Outer iteration o reads "
        "src + o*vx.src_stride and writes dst + o*vx.dst_stride (`src_stride` / `dst_stride`, "
        "when not 0, in place of the registers).",
        "y = sat8(round_half_up(wrap32(acc + bias[c]) * mult[c] / 2**shift[c])), ReLU optional",
    ),
    Opcode(
        "st", 0x20, Unit.ST,
        (_f("src", 16, "source in obuf (bytes)"),
         _f("ext", 32, "destination byte address in external memory", hex=True),
         _f("n3", 12, "planes", default=1),
         _f("rows", 12, "rows per plane", default=1),
         _f("cols", 16, "bytes per row"),
         _f("walk", 1, "1: add the enclosing loops' st offsets to ext", "flag", default=0),
         _f("src_stride", 16, "bytes between rows in obuf (register operand: 0 = "
                              "st.src_stride)", default=0, overrides="st.src_stride")),
        "3-D DMA store from the output cache to external memory (`src_stride`, when not 0, "
        "in place of st.src_stride).",
        "for p<n3, r<rows, c<cols: E[ext + p*st.ext_stride3 + r*st.ext_stride + c] <- "
        "obuf[src + p*st.src_stride3 + r*st.src_stride + c]",
    ),
    Opcode(
        "stc", 0x21, Unit.ST,
        (_f("src", 16, "first row in obuf (bytes, 8-aligned)"),
         *_STREAM_FIELDS),
        "Store activations in compressed form: each row of `cols` int8 values from the "
        "output cache is cut into chunks of 64; each chunk is written as a 64-bit mask of its "
        "non-zero values followed by those values, zero-padded to a whole word.  The "
        "stream is contiguous from ext, a header word giving the bytes after it first; its "
        "length depends on the data (at most 8 + rows * (8*ceil(cols/64) + 8*ceil(cols/8)) "
        "bytes).  src, ext or st.src_stride "
        "(rows > 1) not 8-aligned is ALIGN; a row outside obuf is RANGE.",
        "E[ext ..] <- for r<rows: compress(obuf[src + r*st.src_stride .. +cols])",
    ),
    Opcode(
        "send", 0x28, Unit.NET,
        (_f("x", 4, "destination core column"),
         _f("y", 4, "destination core row"),
         _f("src", 20, "first byte in this core's local memory (8-aligned)"),
         _f("dst", 20, "first byte in the destination core's local memory (8-aligned)"),
         _f("bytes", 16, "bytes to send"),
         _f("tag", 4, "arrival counter at the destination")),
        "Send a region of local memory to core (x, y) of the mesh (a remote write): the "
        "bytes land in the destination's local memory at dst and add to its arrival counter "
        "`tag`.  Ends when the last packet has left (the destination does not acknowledge).  "
        "(x, y) outside the mesh or a region outside local memory is RANGE; src or dst not "
        "8-aligned is ALIGN.",
        "L'[x,y][dst .. dst+bytes) <- L[src .. src+bytes); count'[x,y][tag] += bytes",
    ),
    Opcode(
        "recv", 0x29, Unit.NET,
        (_f("tag", 4, "arrival counter"),
         _f("dst", 20, "first byte of the region the data lands in (local memory)"),
         _f("bytes", 16, "bytes to wait for")),
        "Wait until `bytes` bytes have arrived on counter `tag`, then take them off the "
        "counter.  The region [dst, dst+bytes) is where they landed: the instruction's "
        "footprint, so units that read it after the recv are ordered by tokens from NET.  "
        "A region outside local memory is RANGE.",
        "wait until count[tag] >= bytes; count[tag] -= bytes",
    ),
)

OPCODE_BY_NAME: dict[str, Opcode] = {o.mnemonic: o for o in OPCODES}
OPCODE_BY_CODE: dict[int, Opcode] = {o.code: o for o in OPCODES}
assert len(OPCODE_BY_CODE) == len(OPCODES)
assert all(0 < o.code < (1 << OPCODE_BITS) for o in OPCODES)

#: per mnemonic, its register operands (:attr:`Field.overrides`)
REGISTER_OPERANDS: dict[str, tuple[Field, ...]] = {
    o.mnemonic: tuple(f for f in o.fields if f.overrides) for o in OPCODES
    if any(f.overrides for f in o.fields)}
# a register operand names a register of the instruction's own unit, and every value it
# holds fits the register
assert all(REGISTER_BY_NAME[f.overrides].unit == OPCODE_BY_NAME[m].unit
           and f.width <= REGISTER_BY_NAME[f.overrides].width
           and REGISTER_BY_NAME[f.overrides].values is None
           for m, fs in REGISTER_OPERANDS.items() for f in fs)


def register_operands(instr: "Instr") -> dict[str, int]:
    """The registers ``instr`` reads from its own operands instead of the register file:
    its register operands that are not 0, by register name (``{"mx.nvec": 4}``)."""
    fields = REGISTER_OPERANDS.get(instr.op)
    if not fields:
        return {}
    return {f.overrides: instr.args[f.name] for f in fields if instr.args.get(f.name)}

# The cfg instruction's reg field is an enumeration over the register table.
_CFG = OPCODE_BY_NAME["cfg"]
#: cfg's further registers: (register, value, flag) fields, written in this order after the
#: first; a register's fields are printed only when the flag is set (the flags never)
CFG_SLOTS = (("reg2", "value2", "two"), ("reg3", "value3", "three"))
_CFG_FLAG_OF = {name: slot[2] for slot in CFG_SLOTS for name in slot}


# --------------------------------------------------------------------------------------------
# Decoded instruction
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instr:
    """A decoded (or to-be-encoded) instruction."""

    op: str
    args: Mapping[str, int] = field(default_factory=dict)
    wait: frozenset[Unit] = frozenset()
    signal: frozenset[Unit] = frozenset()

    @property
    def opcode(self) -> Opcode:
        return OPCODE_BY_NAME[self.op]

    @property
    def unit(self) -> Unit | None:
        """The unit that executes this instruction (``None`` for halt / sync)."""
        if self.op == "cfg":
            return REGISTER_BY_NUMBER[self.args["reg"]].unit
        return self.opcode.unit

    def __getattr__(self, name: str) -> int:
        # Operand access as attributes: ``instr.rows``.
        args = self.__dict__.get("args")
        if args is not None and name in args:
            return args[name]
        raise AttributeError(name)

    def __str__(self) -> str:  # the disassembler's canonical text
        return format_instr(self)


def _fmt_value(f: Field, v: int) -> str:
    if f.kind == "enum":
        return next(k for k, val in f.enum.items() if val == v)
    if f.kind == "reg":
        return REGISTER_BY_NUMBER[v].name
    if f.hex:
        return f"0x{v:08x}"
    return str(v)


def _fmt_units(units: Iterable[Unit]) -> str:
    return ",".join(u.name.lower() for u in sorted(units))


def format_instr(instr: Instr) -> str:
    """Canonical text of one instruction (its operands in ISA-table order; a register
    operand only when it is not 0, ``cfg``'s further registers only when it has them)."""
    opc = instr.opcode
    parts = [opc.mnemonic]
    parts += [f"{f.name}={_fmt_value(f, instr.args[f.name])}" for f in opc.fields
              if not (opc.mnemonic == "cfg" and f.name in _CFG_FLAG_OF
                      and (f.name == _CFG_FLAG_OF[f.name] or not instr.args[_CFG_FLAG_OF[f.name]])
                      or f.overrides and not instr.args[f.name])]
    if instr.wait:
        parts.append(f"wait={_fmt_units(instr.wait)}")
    if instr.signal:
        parts.append(f"signal={_fmt_units(instr.signal)}")
    return " ".join(parts)


#: per mnemonic, each operand's (name, default, names it may be given by: register or enum
#: names, or None); :func:`make` runs once per emitted instruction, so it reads these tables
_MAKE_PLAN = {o.mnemonic: tuple((f.name, f.default,
                                 {r.name: r.number for r in REGISTERS} if f.kind == "reg"
                                 else f.enum if f.kind == "enum" else None) for f in o.fields)
              for o in OPCODES}
_NO_UNITS: frozenset[Unit] = frozenset()
_MISSING = object()


def make(op: str, *, wait: Iterable[Unit] = (), signal: Iterable[Unit] = (), **args: int) -> Instr:
    """Build an instruction, filling defaulted operands; raises ``KeyError``/``ValueError``."""
    plan = _MAKE_PLAN[op]
    full = {}
    used = 0
    for name, default, names in plan:
        v = args.get(name, _MISSING)
        if v is _MISSING:
            if default is None:
                raise ValueError(f"{op}: missing operand {name}")
            full[name] = default
            continue
        used += 1
        if names is not None and isinstance(v, str):
            v = names[v]
        full[name] = int(v)
    if used != len(args):
        unknown = set(args) - {name for name, _, _ in plan}
        raise ValueError(f"{op}: unknown operand(s) {', '.join(sorted(unknown))}")
    if op == "cfg":
        cfg_flags(args, full)
    return Instr(op, full, _unit_set(wait), _unit_set(signal))


def cfg_flags(given: Mapping[str, int], args: dict[str, int]) -> None:
    """Set ``cfg``'s ``two`` / ``three`` in ``args`` where ``given`` names a second / third
    register and not the flag (the assembler's and :func:`make`'s shorthand)."""
    for reg, _, flag in CFG_SLOTS:
        if reg in given and flag not in given:
            args[flag] = 1


def _unit_set(units: Iterable) -> frozenset[Unit]:
    if not units:
        return _NO_UNITS
    return frozenset(u if type(u) is Unit else Unit(u) for u in units)


# --------------------------------------------------------------------------------------------
# Encoding and decoding
# --------------------------------------------------------------------------------------------


def _token_problem(instr_unit: Unit | None, units: Iterable[Unit], what: str) -> str | None:
    for u in units:
        if instr_unit is None:
            return f"{what} token bits are not allowed on control instructions"
        if u == instr_unit:
            return f"{what} token names the instruction's own unit {u.name}"
        if u not in IMPLEMENTED_UNITS:
            return f"{what} token names unit {u.name}, which ISA v1 does not implement"
    return None


def validate(instr: Instr) -> str | None:
    """Return why ``instr`` is illegal, or ``None``."""
    opc = OPCODE_BY_NAME.get(instr.op)
    if opc is None:
        return f"unknown mnemonic {instr.op!r}"
    if opc.reserved:
        return f"opcode {opc.mnemonic} (0x{opc.code:02x}) is reserved in ISA v1"
    names, ranges = _CHECKS[opc.mnemonic]
    args = instr.args
    if args.keys() != names:
        return f"{opc.mnemonic}: operands {sorted(args)} != {[f.name for f in opc.fields]}"
    for f, lo, hi, values in ranges:
        v = args[f.name]
        if not lo <= v <= hi or (values is not None and v not in values):
            return f"{opc.mnemonic}: {f.check(v)}"
    if opc.mnemonic == "cfg":
        why = _cfg_problem(instr.args)
        if why:
            return why
    if opc.mnemonic in ("send", "recv") and instr.args["tag"] >= NET_TAGS:
        return f"{opc.mnemonic}: tag {instr.args['tag']} is not below {NET_TAGS}"
    if opc.mnemonic == "loop" and instr.args["body"] == 0:
        return "loop: body must hold at least one word"
    if opc.mnemonic == "loop" and instr.args["entry"] >= instr.args["body"]:
        return (f"loop: entry {instr.args['entry']} must lie inside the body "
                f"({instr.args['body']} words)")
    unit = instr.unit
    return (_token_problem(unit, instr.wait, "wait")
            or _token_problem(unit, instr.signal, "signal"))


#: per mnemonic, its operand names and each operand's legal range (and values, for enums):
#: :func:`validate`'s fast path (:meth:`Field.check` words the problem)
_CHECKS = {o.mnemonic: (frozenset(f.name for f in o.fields),
                        tuple((f, *f.bounds,
                               frozenset(f.enum.values()) if f.kind == "enum" else None)
                              for f in o.fields))
           for o in OPCODES}


def _cfg_problem(args: Mapping[str, int]) -> str | None:
    reg = REGISTER_BY_NUMBER.get(args["reg"])
    pairs = [("reg", "value")]
    for rf, vf, flag in CFG_SLOTS:
        if args[flag]:
            pairs.append((rf, vf))
        elif args[rf] or args[vf]:
            return f"cfg: {rf} and {vf} must be 0 when {flag}=0"
    if args["three"] and not args["two"]:
        return "cfg: three=1 needs two=1 (the registers fill in order)"
    for rf, vf in pairs:
        r = REGISTER_BY_NUMBER.get(args[rf])
        if r is None:
            return f"cfg: register number {args[rf]} is not defined" + (
                f" ({rf})" if rf != "reg" else "")
        if reg is not None and r.unit != reg.unit:
            return f"cfg: {r.name} ({rf}) is not a register of {reg.unit.name} like {reg.name}"
        if args[vf] >= (1 << r.width):
            return f"cfg: value {args[vf]} does not fit {r.width}-bit register {r.name}"
        if r.values is not None and args[vf] not in r.values:
            return (f"cfg: value {args[vf]} is not a legal value of {r.name} "
                    f"({', '.join(map(str, r.values))})")
    return None


def _mask(units: Iterable[Unit]) -> int:
    m = 0
    for u in units:
        m |= 1 << int(u)
    return m


def _units(mask: int) -> frozenset[Unit]:
    return frozenset(Unit(i) for i in range(NUM_UNIT_BITS) if mask >> i & 1)


def encode(instr: Instr) -> int:
    """Encode a legal instruction into its 128-bit word."""
    why = validate(instr)
    if why:
        raise ValueError(why)
    opc = instr.opcode
    word = opc.code | _mask(instr.wait) << OPCODE_BITS | _mask(instr.signal) << (
        OPCODE_BITS + NUM_UNIT_BITS)
    for f in opc.fields:
        v = instr.args[f.name] & ((1 << f.width) - 1)
        word |= v << opc.offsets[f.name]
    return word


def decode(word: int, *, address: int | None = None) -> Instr:
    """Decode a 128-bit word; raise :class:`IllegalInstruction` naming the problem."""
    if not 0 <= word < (1 << WORD_BITS):
        raise IllegalInstruction(word & ((1 << WORD_BITS) - 1), "word wider than 128 bits",
                                 address=address)
    code = word & ((1 << OPCODE_BITS) - 1)
    opc = OPCODE_BY_CODE.get(code)
    if opc is None:
        raise IllegalInstruction(word, f"unknown opcode 0x{code:02x}", address=address)
    if opc.reserved:
        raise IllegalInstruction(word, f"opcode {opc.mnemonic} (0x{code:02x}) is reserved in "
                                 "ISA v1", address=address)
    if word >> opc.used_bits:
        raise IllegalInstruction(word, f"{opc.mnemonic}: reserved bits {opc.used_bits}..127 "
                                 "are not zero", address=address)
    args = {}
    for f in opc.fields:
        v = (word >> opc.offsets[f.name]) & ((1 << f.width) - 1)
        if f.kind == "sint" and v >> (f.width - 1):
            v -= 1 << f.width
        args[f.name] = v
    instr = Instr(opc.mnemonic, args, _units(word >> OPCODE_BITS & 0x1F),
                  _units(word >> (OPCODE_BITS + NUM_UNIT_BITS) & 0x1F))
    why = validate(instr)
    if why:
        raise IllegalInstruction(word, why, address=address)
    return instr


def decode_program(words: Iterable[int]) -> list[Instr]:
    return [decode(w, address=i) for i, w in enumerate(words)]


# --------------------------------------------------------------------------------------------
# Documentation
# --------------------------------------------------------------------------------------------


def render_markdown() -> str:
    """Render the ISA reference (``docs/isa.md``) from the tables above."""
    out = [
        "# snpu ISA v1",
        "",
        "<!-- Generated by `python -m snpu.verif.isa > docs/isa.md` from verif/isa.py; "
        "tests/verif/test_isa.py fails when this file is out of date. -->",
        "",
    ]
    out += [line[4:] if line.startswith("    ") else line
            for line in (__doc__ or "").strip().splitlines()[2:]]
    out += ["", "## Opcodes", "",
            "| opcode | mnemonic | unit | operand bits | summary |",
            "|---|---|---|---|---|"]
    for o in OPCODES:
        unit = o.unit.name if o.unit is not None else ("(register's unit)" if o.mnemonic == "cfg"
                                                       else "dispatcher")
        summary = o.doc + (" **Reserved.**" if o.reserved else "")
        out.append(f"| 0x{o.code:02x} | `{o.mnemonic}` | {unit} | {o.used_bits - HEADER_BITS} | "
                   f"{summary} |")
    for o in OPCODES:
        if o.reserved:
            continue
        out += ["", f"### `{o.mnemonic}` (0x{o.code:02x})", "", o.doc, ""]
        if o.semantics:
            out += [f"Semantics: `{o.semantics}`", ""]
        if o.fields:
            out += ["| bits | field | kind | default | meaning |", "|---|---|---|---|---|"]
            for f in o.fields:
                lo = o.offsets[f.name]
                kind = f.kind
                if f.enum:
                    kind += ": " + ", ".join(f"{k}={v}" for k, v in f.enum.items())
                dflt = "required" if f.default is None else str(f.default)
                out.append(f"| {lo}-{lo + f.width - 1} | `{f.name}` | {kind} | {dflt} | "
                           f"{f.doc} |")
        else:
            out.append("No operands.")
    out += ["", "## Configuration registers", "",
            "`cfg reg=<name> value=<v>` writes a register (`reg2=<name> value2=<v>` a second "
            "one of the same unit in the same word, `reg3=<name> value3=<v>` a third).  It "
            "executes in order on the register's unit, so a register change never affects an "
            "instruction already queued on another unit.  A register operand (`fc.nvec`; "
            "`vred` and `req`'s `src_stride` and `dst_stride`; `st.src_stride`) stands in for "
            "its register in one instruction, leaving the register as it was.",
            "", "| number | name | bits | reset | meaning |", "|---|---|---|---|---|"]
    for r in REGISTERS:
        legal = f" Legal values: {', '.join(map(str, r.values))}." if r.values else ""
        out.append(f"| {r.number} | `{r.name}` | {r.width} | {r.reset} | {r.doc}.{legal} |")
    out += ["", "## Numerics", "", NUMERICS_DOC.strip(), ""]
    return "\n".join(out) + "\n"


NUMERICS_DOC = """
* Activations and weights are int8, accumulators int32.  All int32 arithmetic (fc sums,
  `vew`, `vred` sums, bias addition) wraps around modulo 2**32; because wrap-around addition
  is associative, results do not depend on the order in which lanes add pairs.
* `req` per channel c reads bias (int32), mult (int16) and shift (uint8, 0..47) from the
  parameter row: `v = wrap32(acc + bias)`, `p = v * mult` (exact, 48-bit),
  `r = (p + 2**(shift-1)) >> shift` for shift > 0 (round half up; arithmetic shift) and
  `r = p` for shift 0, then `y = clamp(r, -128, 127)`, or `clamp(r, 0, 127)` with ReLU.
* Parameter row layout (8 bytes per channel, channel l of row k at byte `k*8*P + 8*l`):
  bias int32 little-endian, mult int16 little-endian, shift uint8, one zero byte.
* Neuron threshold (the sparse processing unit): with `ld.nidx_mode=1`, loading byte x to
  nbuf address a sets nidx bit a (byte a//8, bit a%8) to `|x| > ld.thresh`.  With group
  pruning (`ld.group_log2 = g > 0`) the nbuf addresses are split into aligned groups of
  2**g; a group whose count of elements with `|x| <= ld.group_t3` is greater than
  `ld.group_t4` has all its bits cleared.  A group-pruned load must start and end on group
  boundaries in every row.  |-128| is 128.
"""


if __name__ == "__main__":  # pragma: no cover
    print(render_markdown(), end="")
