"""Multiplier registers: move the flip-flops around an ECP5 multiplier block into the block's
own input and output registers (``REG_INPUTA / REG_INPUTB / REG_OUTPUT``), on a yosys JSON
netlist.

yosys maps a multiply to a combinational MULT18X18D: a flip-flop in the fabric drives its
inputs, another takes its product, and the 3.9 ns multiply sits between two routes to and
from the DSP column (the VX ALU's operand into its multiplier was the placed core's worst
path at 81bb2b5, 79.8 MHz).  The block's input and output registers remove both routes
from the multiply's cycle.  :func:`absorb_multiplier_registers` uses them:

* **output**: when every product bit that is used feeds exactly one ``TRELLIS_FF`` at
  ``DI``, all clocked alike (not inverted), with one clock enable (or none), no set /
  reset (``LSR`` tied to 0) and starting at 0, the flip-flops are deleted, the product
  pins drive their outputs, and ``REG_OUTPUT`` takes their clock and enable;
* **inputs A and B**: when every input bit of both operands is a constant 0 or the output
  of such a flip-flop (same clock, one enable per operand, no reset, starting at 0), the
  operands' pins take the flip-flops' *inputs* and ``REG_INPUTA`` / ``REG_INPUTB`` their
  clock and enables.  A flip-flop with other loads stays for them (the block holds a copy:
  same data, same enable, same clock); one without is deleted.  Both operands or neither:
  nextpnr times a block with one registered operand as if neither were.

Cycle for cycle the nets carry the same values: each register moves across no logic.
Power-up: the block's registers start at 0 like the flip-flops they replace; a constant 0
input bit is 0 in the register too (so a constant 1 bit, which the register would hold at
0 until its first enable, keeps the operand in the fabric).  The signedness inputs are
constants in yosys's mapping: registered or not, a product of an operand that is 0 is 0,
and once an operand's register has loaded the constant sign is in it.

nextpnr times the block with the timing of its register mode (prjtrellis's database:
``MULT18X18D_REGS_INPUT / _OUTPUT / _ALL``), every register clocked by ``CLK0``; with
both, the multiply between the block's input and output registers is inside the block
and not in nextpnr's model (the data sheet's sysDSP figures cover it).
"""

from __future__ import annotations

from .netlist_edit import connectivity, plain_register

__all__ = ["absorb_multiplier_registers"]

# the clock-enable channel of MULT18X18D each register uses (all are clocked by CLK0, the
# clock nextpnr times a registered block by)
_CHANNEL = {"INPUTA": "0", "INPUTB": "1", "OUTPUT": "2"}


def absorb_multiplier_registers(netlist: dict, top: str) -> dict:
    """Moves, in place, the registers around ``top``'s MULT18X18D cells into them (see the
    module's description).  Returns how many blocks took an input A, input B and output
    register: ``{"INPUTA": n, "INPUTB": n, "OUTPUT": n}``."""
    cells = netlist["modules"][top]["cells"]
    sinks, driver, ports = connectivity(netlist, top)

    counts = {"INPUTA": 0, "INPUTB": 0, "OUTPUT": 0}
    copied = set()   # flip-flops kept for other loads when a block took a copy
    for name, dsp in list(cells.items()):
        if dsp["type"] != "MULT18X18D":
            continue
        params, conn, dirs = dsp["parameters"], dsp["connections"], dsp["port_directions"]
        if any(params.get(f"REG_{r}_CLK", "NONE").strip() != "NONE"
               for r in ("INPUTA", "INPUTB", "INPUTC", "PIPELINE", "OUTPUT")):
            continue
        clock = None   # the one clock all moved registers share
        moves = {}     # register -> (enable, {pin: new bit}, flip-flops to delete)

        # output: every used product bit into one plain flip-flop
        used = [(f"P{k}", conn[f"P{k}"][0]) for k in range(36)
                if isinstance(conn.get(f"P{k}", [None])[0], int) and sinks[conn[f"P{k}"][0]]]
        signedp = conn.get("SIGNEDP", [None])[0]
        if used and not (isinstance(signedp, int) and sinks[signedp]):
            ffs = []
            for pin, bit in used:
                if (bit in ports or len(sinks[bit]) != 1 or sinks[bit][0][1] != "DI"
                        or sinks[bit][0][0] not in cells):   # (moved into another block)
                    break
                ffs.append((pin, sinks[bit][0][0]))
            else:
                clk = cells[ffs[0][1]]["connections"]["CLK"][0]
                enables = {plain_register(cells[ff], clk) for _, ff in ffs}
                if len(enables) == 1 and None not in enables:
                    clock = clk
                    moves["OUTPUT"] = (enables.pop(),
                                       {pin: cells[ff]["connections"]["Q"][0] for pin, ff in ffs},
                                       [ff for _, ff in ffs])

        # inputs: every bit a constant 0 or a plain flip-flop's output
        for operand, reg in (("A", "INPUTA"), ("B", "INPUTB")):
            pins = [f"{operand}{k}" for k in range(18)]
            regs, ok = {}, True
            for pin in pins:
                bit = conn.get(pin, ["0"])[0]
                if not isinstance(bit, int):
                    if bit not in ("0", "x"):
                        ok = False
                    continue
                src = driver.get(bit)
                if (src is None or src[1] != "Q" or src[0] not in cells
                        or cells[src[0]]["type"] != "TRELLIS_FF"):
                    ok = False
                    break
                regs[pin] = src[0]
            if not ok or not regs:
                continue
            clk = cells[next(iter(regs.values()))]["connections"]["CLK"][0]
            if clock is not None and clk != clock:
                continue
            enables = {plain_register(cells[ff], clk) for ff in regs.values()}
            if len(enables) != 1 or None in enables:
                continue
            clock = clk
            new = {pin: cells[ff]["connections"]["DI"][0] for pin, ff in regs.items()}
            # a flip-flop whose only loads are this block's pins goes; others stay
            gone = [ff for ff in set(regs.values())
                    if all(s[0] == name for s in sinks[cells[ff]["connections"]["Q"][0]])
                    and cells[ff]["connections"]["Q"][0] not in ports]
            moves[reg] = (enables.pop(), new, gone)
            copied |= set(regs.values()) - set(gone)

        # both operands registered or neither (nextpnr's timing has no mixed mode: it would
        # time such a block as if neither were)
        if ("INPUTA" in moves) != ("INPUTB" in moves):
            moves.pop("INPUTA", None)
            moves.pop("INPUTB", None)
        if not moves:
            continue
        for reg, (enable, new, gone) in moves.items():
            ch = _CHANNEL[reg]
            for pin, bit in new.items():
                conn[pin] = [bit]
            for ff in gone:
                cells.pop(ff, None)
            for pin, value in (("CLK0", clock), (f"CE{ch}", enable), (f"RST{ch}", "0")):
                conn[pin] = [value]
                dirs[pin] = "input"
            params[f"REG_{reg}_CLK"] = "CLK0"
            params[f"REG_{reg}_CE"] = f"CE{ch}"
            params[f"REG_{reg}_RST"] = f"RST{ch}"
            counts[reg] += 1
    # a flip-flop kept for another block's pins that took a copy too has no load left
    loads = {b for cell in cells.values() for port, bits in cell["connections"].items()
             if cell["port_directions"].get(port) != "output" for b in bits}
    for ff in copied:
        if ff in cells and cells[ff]["connections"]["Q"][0] not in loads | ports:
            del cells[ff]
    return counts
