"""Block RAM output registers: move the flip-flops that register an ECP5 block RAM's read
data into the block RAM (``REGMODE_A/B = "OUTREG"``), on a yosys JSON netlist.

A DP16KD's data leaves its read latch 5.8 ns after the clock edge in nextpnr's model, most
of an 8 ns cycle, so the core registers every block RAM read before any logic sees it (the
local memory's ``word``, the side sources' ``d_word``, ...).  The block RAM has an output
register of its own, clocked by the port's clock and enabled by ``OCE``, whose
clock-to-output is that of a fabric flip-flop; vendor tools use it for such a register,
yosys's ``synth_ecp5`` does not.  :func:`absorb_output_registers` does it after synthesis:

a port is converted when every data output it drives that is used feeds exactly one
``TRELLIS_FF``, at ``DI``, and these flip-flops are all clocked by the port's clock (not
inverted), share one clock enable (or none), have no set / reset (``LSR`` tied to 0) and
start at 0 (``REGSET = "RESET"``, as the output register does), and the port's own reset
is tied to 0.  The flip-flops are deleted, their outputs are driven by the block RAM's
data pins, ``OCE`` takes their clock enable and the port's ``REGMODE`` becomes
``OUTREG``: cycle for cycle the same values on the same nets.  Ports that do not qualify
are left as they are.
"""

from __future__ import annotations

from .netlist_edit import connectivity, plain_register

__all__ = ["absorb_output_registers"]


def absorb_output_registers(netlist: dict, top: str) -> int:
    """Converts, in place, the ports of ``top``'s DP16KD cells whose read data is
    registered by flip-flops alone into ports with the output register (see the module's
    description).  Returns the number of ports converted."""
    cells = netlist["modules"][top]["cells"]
    sinks, _, ports = connectivity(netlist, top)

    converted = 0
    for name, ram in list(cells.items()):
        if ram["type"] != "DP16KD":
            continue
        params, conn = ram["parameters"], ram["connections"]
        for side in "AB":
            if params.get(f"REGMODE_{side}", "NOREG").strip() != "NOREG":
                continue
            if conn.get(f"RST{side}", ["0"])[0] != "0":
                continue
            clock = conn[f"CLK{side}"][0]
            outputs = {}   # data pin -> the flip-flop it feeds
            ok = True
            for k in range(18):
                pin = f"DO{side}{k}"
                bit = conn.get(pin, [None])[0]
                if not isinstance(bit, int) or not sinks[bit]:
                    continue
                if bit in ports or len(sinks[bit]) != 1:
                    ok = False
                    break
                ff_name, ff_port = sinks[bit][0]
                if ff_port != "DI":
                    ok = False
                    break
                outputs[pin] = ff_name
            if not ok or not outputs:
                continue
            enables = {plain_register(cells[ff], clock) for ff in outputs.values()}
            if len(enables) != 1 or None in enables:
                continue
            enable = enables.pop()
            for pin, ff_name in outputs.items():
                conn[pin] = [cells[ff_name]["connections"]["Q"][0]]
                del cells[ff_name]
            conn[f"OCE{side}"] = [enable]
            params[f"REGMODE_{side}"] = "OUTREG"
            converted += 1
    return converted
