"""The placed timing report of ``snpu synth`` (:mod:`snpu.verif.tb.placed_timing`): every
endpoint's arrival from nextpnr's SDF, checked against nextpnr's own Fmax on a small
design with a carry chain, a block RAM, a LUT RAM and a DSP multiplier (one placement,
about 20 seconds)."""

import pytest
from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from snpu.verif.tb.placed_timing import _split_pin, endpoint_slacks, failing_paths
from snpu.verif.tb.synth import synthesize


class _Mixed(wiring.Component):
    """Four kinds of path: a block RAM's output through a 32-bit adder; a multiply of two
    registered bytes; a LUT RAM read into a register; a one-LUT path."""
    addr: In(8)
    x: In(8)
    y: In(8)
    wdata: In(32)
    we: In(1)
    sum: Out(32)
    prod: Out(16)
    small: Out(4)
    one: Out(1)

    def elaborate(self, platform):
        m = Module()
        m.submodules.bram = bram = Memory(shape=32, depth=256, init=[])
        m.submodules.lutram = lutram = Memory(shape=4, depth=16, init=[])
        w, r = bram.write_port(), bram.read_port()
        lw, lr = lutram.write_port(), lutram.read_port(domain="comb")
        m.d.comb += [w.addr.eq(self.addr), w.data.eq(self.wdata), w.en.eq(self.we),
                     r.addr.eq(self.addr), lw.addr.eq(self.addr[:4]), lw.data.eq(self.x[:4]),
                     lw.en.eq(self.we), lr.addr.eq(self.y[:4])]
        a, b = Signal(8), Signal(8)
        m.d.sync += [a.eq(self.x), b.eq(self.y), self.prod.eq(a.as_signed() * b.as_signed()),
                     self.sum.eq(r.data + self.wdata), self.small.eq(lr.data),
                     self.one.eq(self.x[0] & self.y[0])]
        return m


@pytest.fixture(scope="module")
def placed():
    return synthesize(_Mixed(), seeds=(1,), paths=4, target_mhz=400.0)


def test_the_worst_arrival_is_nextpnrs_critical_path(placed):
    pp = placed["placed_paths"]["1"]
    worst = pp["paths"][0]
    # nextpnr's Fmax is rounded to 0.1 MHz in the result
    assert worst["fmax_mhz"] == pytest.approx(placed["fmax_mhz"], abs=0.11)
    # at 400 MHz every kind of path misses: the counts say so
    assert pp["failing_endpoints"] >= 32 and pp["failing_registers"] >= 3


def test_paths_are_worst_first_one_per_register_and_named(placed):
    rows = placed["placed_paths"]["1"]["paths"]
    assert 2 <= len(rows) <= 4
    assert [r["delay_ns"] for r in rows] == sorted((r["delay_ns"] for r in rows), reverse=True)
    ends = [r["to"].split(" ")[0] for r in rows]
    assert len(set(ends)) == len(ends)
    for r in rows:
        times = [s["at_ns"] for s in r["through"]]
        assert times == sorted(times) and times[-1] <= r["delay_ns"]
    # the block RAM's clock-to-output (over 5 ns on ECP5) starts the worst path, into the sum
    first = rows[0]
    assert first["to"].startswith("dut.sum") and first["through"][0]["signal"] == "dut.bram"
    assert first["through"][1]["at_ns"] > 5.0
    # a source line of this file names the sum's register
    assert any((s["source"] or "").startswith("tests/verif/test_placed_timing.py")
               or "test_placed_timing.py" in (s["source"] or "") for s in first["through"])


def _one_path_sdf(kind: str, launch: str, clock: str, out: str, clk_to_out: str,
                  lut: str, setup: str, routes: tuple[str, str]) -> str:
    """An SDF of one path: cell ``launch`` (``kind``, clocked on ``clock``) -> route -> LUT
    ``l0`` -> route -> flip-flop ``r1``; delays as min:typ:max triples in picoseconds."""
    return f"""(DELAYFILE (TIMESCALE 1ps)
      (CELL (CELLTYPE "{kind}") (INSTANCE {launch})
        (DELAY (ABSOLUTE (IOPATH {clock} {out} ({clk_to_out}) ({clk_to_out})))))
      (CELL (CELLTYPE "TRELLIS_COMB") (INSTANCE l0)
        (DELAY (ABSOLUTE (IOPATH A F ({lut}) ({lut})))))
      (CELL (CELLTYPE "TRELLIS_FF") (INSTANCE r1)
        (TIMINGCHECK (SETUPHOLD (posedge DI) (posedge CLK) ({setup}) (0:0:0))))
      (CELL (CELLTYPE "top") (INSTANCE )
        (DELAY (ABSOLUTE
          (INTERCONNECT {launch}/{out} l0/A ({routes[0]}) ({routes[0]}))
          (INTERCONNECT l0/F r1/DI ({routes[1]}) ({routes[1]}))
          (INTERCONNECT clk/O {launch}/{clock} (0:0:0) (0:0:0))))))"""


def test_sdf_parsing_details():
    # a pin reference keeps escaped dividers inside the instance name
    assert _split_pin(r"dut.a\/b/Q") == ("dut.a/b", "Q")
    sdf = _one_path_sdf("TRELLIS_FF", "r0", "CLK", "Q", "400:450:500", "100:200:300",
                        "50:60:70", ("1000:1000:1000", "2000:2000:2000"))
    (need, end, chain), = endpoint_slacks(sdf)
    # 0.5 clock-to-out + 1.0 route + 0.3 LUT + 2.0 route + 0.07 setup (the maxima)
    assert need == pytest.approx(3.87) and end == ("r1", "DI")
    assert [p for p, _t in chain] == [("r0", "Q"), ("l0", "A"), ("l0", "F"), ("r1", "DI")]
    r = failing_paths(sdf, None, period_ns=3.0)
    assert r["failing_endpoints"] == 1 and r["paths"][0]["fmax_mhz"] == pytest.approx(258.4)


def test_a_multiplier_blocks_output_register_launches_paths():
    # a MULT18X18D with its output register (yosys's flow moves the product's flip-flops
    # into it): its clock-to-out on CLK0 starts a path, which must be timed like a
    # flip-flop's (it was missed once, hiding the core's worst path)
    dsp = "dut.p_TRELLIS_FF_Q_DI_MULT18X18D_P0"
    sdf = _one_path_sdf("MULT18X18D", dsp, "CLK0", "P0", "700:700:700", "300:300:300",
                        "100:100:100", ("1000:1000:1000", "1000:1000:1000"))
    (need, end, chain), = endpoint_slacks(sdf)
    assert need == pytest.approx(3.1) and end == ("r1", "DI")
    assert chain[0][0] == (dsp, "P0")
    assert failing_paths(sdf, None, period_ns=3.0)["paths"][0]["through"][0]["signal"] == "dut.p"
