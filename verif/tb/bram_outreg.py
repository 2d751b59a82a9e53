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

from collections import defaultdict

__all__ = ["absorb_output_registers"]


def _const(bit) -> str | None:
    """``"0"`` / ``"1"`` for a constant bit of a yosys JSON connection, else None."""
    return bit if isinstance(bit, str) else None


def absorb_output_registers(netlist: dict, top: str) -> int:
    """Converts, in place, the ports of ``top``'s DP16KD cells whose read data is
    registered by flip-flops alone into ports with the output register (see the module's
    description).  Returns the number of ports converted."""
    cells = netlist["modules"][top]["cells"]
    sinks: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for name, cell in cells.items():
        dirs = cell.get("port_directions", {})
        for port, bits in cell["connections"].items():
            if dirs.get(port) == "input":
                for b in bits:
                    if isinstance(b, int):
                        sinks[b].append((name, port))
    # nets that leave the module (a flip-flop whose output is a port keeps its name there)
    ports = {b for p in netlist["modules"][top].get("ports", {}).values()
             for b in p["bits"] if isinstance(b, int)}

    converted = 0
    removed: set[str] = set()
    for name, ram in list(cells.items()):
        if ram["type"] != "DP16KD":
            continue
        params, conn = ram["parameters"], ram["connections"]
        for side in "AB":
            if params.get(f"REGMODE_{side}", "NOREG").strip() != "NOREG":
                continue
            if _const(conn.get(f"RST{side}", ["0"])[0]) != "0":
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
                ff = cells[ff_name]
                if ff["type"] != "TRELLIS_FF" or ff_port != "DI" or ff_name in removed:
                    ok = False
                    break
                outputs[pin] = ff_name
            if not ok or not outputs:
                continue
            enables = set()
            for ff_name in outputs.values():
                ff = cells[ff_name]
                p, c = ff["parameters"], ff["connections"]
                if (c["CLK"][0] != clock or p.get("CLKMUX", "CLK").strip() != "CLK"
                        or p.get("REGSET", "RESET").strip() != "RESET"
                        or _const(c.get("LSR", ["0"])[0]) != "0"
                        or p.get("LSRMUX", "LSR").strip() not in ("LSR", "0")
                        or p.get("CEMUX", "CE").strip() not in ("CE", "1")):
                    ok = False
                    break
                ce_mux = p.get("CEMUX", "CE").strip()
                enables.add("1" if ce_mux == "1" else
                            c.get("CE", ["1"])[0])
            if not ok or len(enables) != 1:
                continue
            enable = enables.pop()
            for pin, ff_name in outputs.items():
                conn[pin] = [cells[ff_name]["connections"]["Q"][0]]
                del cells[ff_name]
                removed.add(ff_name)
            conn[f"OCE{side}"] = [enable]
            params[f"REGMODE_{side}"] = "OUTREG"
            converted += 1
    return converted
