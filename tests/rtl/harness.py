"""Test harnesses: blocks wired to real ``lib.memory`` memories preloaded with test data."""

from amaranth import *
from amaranth.lib.memory import Memory


def words_of(raw: bytes, depth: int) -> list[int]:
    raw = raw + bytes(8 * depth - len(raw))
    return [int.from_bytes(raw[8 * k:8 * k + 8], "little") for k in range(depth)]


class WithMemory(Elaboratable):
    """``dut`` plus 64-bit memories; ``ports`` maps a memory name to the dut's
    ``(addr, en, data)`` read-port signals."""

    def __init__(self, dut, memories: dict, ports: dict):
        self.dut = dut
        self.mems = {name: Memory(shape=64, depth=len(init), init=init)
                     for name, init in memories.items()}
        self.ports = ports

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.dut
        for name, mem in self.mems.items():
            m.submodules[name] = mem
            rp = mem.read_port()
            addr, en, data = self.ports[name]
            m.d.comb += [rp.addr.eq(addr), rp.en.eq(en), data.eq(rp.data)]
        return m
