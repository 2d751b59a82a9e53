"""Registered wrapper for synthesis: every path of the wrapped block is register to register.

Out-of-context synthesis reports optimistic Fmax (inputs and outputs are unconstrained) and a
block with hundreds of ports does not fit the pins of a small FPGA.  This wrapper drives all
of the block's inputs from a scan chain (one input pin) and folds all of its outputs, in
registered XOR stages, into one output pin, so nothing can be optimised away and the timing
report covers the block's real register-to-register paths.
"""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class RegisteredWrapper(wiring.Component):
    scan_in: In(1)
    fold_out: Out(1)

    def __init__(self, dut: wiring.Component, fold_width: int = 64):
        self._dut = dut
        self._fold = fold_width
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self._dut
        ins, outs = [], []
        for _path, member, value in dut.signature.flatten(dut):
            (ins if member.flow == In else outs).append(Value.cast(value))
        width = sum(len(v) for v in ins)
        chain = Signal(max(width, 1))
        m.d.sync += chain.eq(Cat(self.scan_in, chain[:-1]))
        m.d.comb += Cat(*ins).eq(chain[:width])

        bits = Cat(*outs)
        # Fold the outputs into `fold` registers, then into one, one register level per stage.
        level = [bits[k::self._fold] for k in range(min(self._fold, len(bits)))]
        regs = []
        for k, group in enumerate(level):
            r = Signal(name=f"fold0_{k}")
            m.d.sync += r.eq(group.xor())
            regs.append(r)
        stage = 1
        while len(regs) > 1:
            nxt = []
            for k in range(0, len(regs), 8):
                r = Signal(name=f"fold{stage}_{k}")
                m.d.sync += r.eq(Cat(*regs[k:k + 8]).xor())
                nxt.append(r)
            regs, stage = nxt, stage + 1
        m.d.comb += self.fold_out.eq(regs[0] if regs else 0)
        return m
