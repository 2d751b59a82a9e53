"""A synchronous FIFO kept in a block RAM."""

from amaranth.lib.fifo import SyncFIFOBuffered


class BlockRamFIFO(SyncFIFOBuffered):
    """A :class:`~amaranth.lib.fifo.SyncFIFOBuffered` whose storage is a block RAM.

    yosys maps a small memory into LUT RAM by itself, which on an ECP5 costs six LUT sites
    per 16 words of 4 bits; this asks for a block RAM instead (``ram_style = "block"``): for
    a FIFO of 64-bit words 16 or more deep, two 512 x 36 block RAMs in place of 32 or more
    LUT RAMs (about 200 LUT sites).  The behaviour is the base class's; ``r_data`` is the
    block RAM's read port (most of a cycle after the clock on an ECP5: give it a register,
    not logic, as its consumer)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        if self.depth > 1:
            m.submodules.storage.attrs["ram_style"] = "block"
        return m
