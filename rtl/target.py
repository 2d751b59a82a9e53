"""What the core is elaborated for: simulation (``platform=None``) or a synthesis tool.

Block RAM read / write collisions
---------------------------------
A synchronous read port of an Amaranth :class:`~amaranth.lib.memory.Memory` returns the
word's *old* value when a write port writes that word in the same cycle.  An ECP5 block
RAM read through one port while the other port writes the same address returns undefined
data, so to keep the old-value rule yosys delays every write by a cycle and puts a bypass
register and a multiplexer behind every read bit (about 700 LUTs and 1 200 flip-flops in
the 1-lane core), and the multiplexer keeps the block RAM's own output register out of
use (a block RAM's clock-to-output is then 5.8 ns of the 8 ns cycle).

No block here uses a word read in the cycle it is written: where a read can meet a write
to its word, the block takes the word from its own bypass (the index memory's
read-modify-write, the instruction cache's fill) or does not use the data.  Those
memories are built with the :data:`NO_RW_CHECK` attribute and their reads go through
:func:`checked_read`:

* in simulation, a read that met a write to its word returns the word *inverted* (every
  bit wrong), so a block that used such a word fails the bit-exact comparison against
  the golden model in every test that reaches it;
* for synthesis (:data:`ECP5_SYNTHESIS` as the platform), the read is the port's data,
  and the synthesis flow (:mod:`snpu.verif.tb.synth`) marks the memory's read ports as
  returning undefined data on a collision (``COLLISION_X_MASK``), so yosys needs neither
  the delayed write nor the bypass.

Inverting is one of the values "undefined" allows, so the simulated design is a
refinement of the synthesised one: a test that passes in simulation does not depend on
what the block RAM returns on a collision.
"""

from amaranth import *

__all__ = ["NO_RW_CHECK", "SynthesisTarget", "ECP5_SYNTHESIS", "ignores_collisions",
           "checked_read"]

#: Memory attributes of a memory whose reads never use a word written in the same cycle
NO_RW_CHECK = {"no_rw_check": 1}


class SynthesisTarget:
    """The ``platform`` a design is elaborated with for a synthesis tool.

    Parameters
    ----------
    family:
        The device family (``"ecp5"``).
    """

    def __init__(self, family: str):
        self.family = family

    def __repr__(self):
        return f"SynthesisTarget({self.family!r})"


#: the platform ``snpu synth`` elaborates the core with
ECP5_SYNTHESIS = SynthesisTarget("ecp5")


def ignores_collisions(platform) -> bool:
    """Whether reads that meet a write to their word may return undefined data (the
    design is being synthesised), rather than poisoned data (simulated)."""
    return isinstance(platform, SynthesisTarget)


def checked_read(m: Module, platform, read_port, write_ports, name: str) -> Value:
    """The data of ``read_port`` (a synchronous read port of a memory built with
    :data:`NO_RW_CHECK`), for the logic after it.

    In simulation, a read issued in the cycle one of ``write_ports`` writes the same word
    (any of its enables) returns every bit of the word inverted, and so does the port
    while it holds that word (``en`` low); see the module's description.  For synthesis,
    the port's data as it is."""
    if ignores_collisions(platform):
        return read_port.data
    met = Signal(name=f"{name}_collided")
    hit = Cat(*[wp.en.any() & (wp.addr == read_port.addr) for wp in write_ports]).any()
    with m.If(read_port.en):
        m.d.sync += met.eq(hit)
    raw = Value.cast(read_port.data)
    data = Signal(raw.shape(), name=f"{name}_checked")
    m.d.comb += data.eq(raw ^ met.replicate(len(raw)))
    return data
