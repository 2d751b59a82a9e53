"""The neuron index buffer: a block RAM written with bit enables."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .ports import wide_read_port, write_port_signature
from .target import NO_RW_CHECK, checked_read


class IndexMemory(wiring.Component):
    """``nidx``: ``depth`` words of ``width`` bits, written with one enable per bit, read 64
    bits at a time.

    The sparse processing unit writes one index bit per neuron byte it loads, so a load that
    starts or ends inside a neuron-buffer word writes part of an index byte, and the other
    bits of that byte must keep their values.  Block RAM has byte enables at best (and a
    memory with bit enables lands in LUT RAM, one cell per bit column), so each write is a
    read-modify-write:

    * cycle 0: the write arrives on ``w``; the word at ``w.addr`` is read through the
      memory's second read port (non-transparent);
    * cycle 1: the old word is taken into a register (a block RAM's output is slow: it
      feeds no logic), and each bit's source is chosen: the write's data, the word written
      in cycle 0 (when it was to the same word, the read did not see it) or the old word;
    * cycle 2: the bits are merged, with the word written in cycle 1 (again unseen by the
      read) taking precedence, and written back with byte enables (every byte with an
      enabled bit).

    A write is visible to reads issued from the fourth cycle after it arrives (cycle 3); one
    write per cycle.  The two read ports make the synthesis tool keep two copies of the
    memory (one block RAM port writes both, one reads each): the price of bit writes
    without stalls.

    Read port (``r_addr`` in 64-bit words, ``r_en``, ``r_data``): synchronous, data the
    cycle after the address, held while ``r_en`` is low (:func:`~.ports.wide_read_port`).

    Parameters
    ----------
    depth:
        Words of ``width`` bits.
    width:
        The write word (the AXI bus's width: 64, 128 or 256 bits).
    """

    def __init__(self, depth: int, width: int = 64):
        if width % 64:
            self._MustUse__silence = True  # (not elaborated: no "unused" warning)
            raise ValueError(f"width must be a multiple of 64 bits, got {width}")
        self._depth, self._width = depth, width
        # (ram_style: a memory this small would otherwise be mapped to LUT RAM)
        self._mem = Memory(shape=width, depth=depth, init=[], attrs={"ram_style": "block", **NO_RW_CHECK})
        super().__init__({
            "w": In(write_port_signature(depth, 1, width)),
            "r_addr": In(range(depth * width // 64)),
            "r_en": In(1),
            "r_data": Out(64),
        })

    def elaborate(self, platform):
        m = Module()
        W = self._width
        m.submodules.mem = mem = self._mem
        wp = mem.write_port(granularity=8)
        wide_read_port(m, mem, self.r_addr, self.r_en, self.r_data, "r",
                       platform=platform, write_ports=[wp])
        old_port = mem.read_port()
        # (a read that meets the write of its word is not used: b_after_c below)
        old_data = checked_read(m, platform, old_port, [wp], "old")
        m.d.comb += [old_port.addr.eq(self.w.addr), old_port.en.eq(self.w.en.any())]
        # stage B (cycle 1) and stage C (cycle 2) registers; `merged` is stage C's word,
        # `last` the word written in the previous cycle
        b_valid, b_addr = Signal(), Signal(range(self._depth))
        b_data, b_en = Signal(W), Signal(W)
        b_after_c = Signal()   # the write in stage C when this one arrived (written then) ...
        b_after_b = Signal()   # ... in stage B (written as this one is in stage B)
        c_valid, c_addr, c_bytes = Signal(), Signal(range(self._depth)), Signal(W // 8)
        c_pre = Signal(W)       # an enabled bit's data, or the word written in cycle 0
        c_old = Signal(W)       # the bits taken from the old word
        c_last = Signal(W)      # the bits taken from the word written in cycle 1
        old = Signal(W)
        merged, last = Signal(W), Signal(W)
        m.d.sync += [b_valid.eq(self.w.en.any()), b_addr.eq(self.w.addr),
                     b_data.eq(self.w.data), b_en.eq(self.w.en),
                     b_after_c.eq(c_valid & (c_addr == self.w.addr)),
                     b_after_b.eq(b_valid & (b_addr == self.w.addr))]
        m.d.sync += [c_valid.eq(b_valid), c_addr.eq(b_addr), old.eq(old_data),
                     c_bytes.eq(Cat(b_en[8 * k:8 * k + 8].any() for k in range(W // 8))),
                     c_pre.eq((b_en & b_data) | (~b_en & last)),
                     c_old.eq(~b_en & Mux(b_after_b | b_after_c, 0, (1 << W) - 1)),
                     c_last.eq(~b_en & Mux(b_after_b, (1 << W) - 1, 0))]
        m.d.comb += merged.eq((last & c_last) | (old & c_old) | (c_pre & ~c_old & ~c_last))
        with m.If(c_valid):
            m.d.sync += last.eq(merged)
        m.d.comb += [wp.addr.eq(c_addr), wp.data.eq(merged),
                     wp.en.eq(Mux(c_valid, c_bytes, 0))]
        return m
