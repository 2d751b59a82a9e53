"""Buffer ports shared by the MX unit's memories: the LD unit's wide write words and the
64-bit synchronous reads of the index sources and lanes."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Out

from .target import checked_read


def write_port_signature(depth: int, granularity: int, width: int = 64) -> wiring.Signature:
    """A ``width``-bit write port of a memory of ``depth`` such words: word address, data
    and one enable per ``granularity`` bits."""
    return wiring.Signature({
        "addr": Out(range(depth)),
        "data": Out(width),
        "en": Out(width // granularity),
    })


def wide_read_port(m: Module, mem: Memory, addr: Value, en: Value, data: Value,
                   name: str, *, platform, write_ports) -> None:
    """Reads 64-bit words from ``mem``, whose words may be wider (a multiple of 64 bits:
    the width the LD unit writes, the AXI bus's): ``mem``'s word ``addr >> k`` is read when
    ``en`` is high, and its 64-bit part ``addr % 2**k`` appears on ``data`` the next cycle,
    holding while ``en`` is low (a synchronous read port, as for a 64-bit memory).  ``mem``
    is built with :data:`~.target.NO_RW_CHECK`: a word read in the cycle one of
    ``write_ports`` writes it is not used (:func:`~.target.checked_read`)."""
    parts = mem.shape // 64
    rp = mem.read_port()
    word = checked_read(m, platform, rp, write_ports, name)
    if parts == 1:
        m.d.comb += [rp.addr.eq(addr), rp.en.eq(en), data.eq(word)]
        return
    k = (parts - 1).bit_length()
    part = Signal(k, name=f"{name}_part")
    with m.If(en):
        m.d.sync += part.eq(addr[:k])
    m.d.comb += [rp.addr.eq(addr >> k), rp.en.eq(en), data.eq(word.word_select(part, 64))]
