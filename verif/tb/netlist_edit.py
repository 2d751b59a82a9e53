"""Helpers for the passes that edit a yosys JSON netlist after ``synth_ecp5``
(:mod:`.bram_outreg`, :mod:`.dsp_registers`): who drives and who reads each net bit, and
whether a flip-flop is a plain register that a hard block's own register can replace."""

from __future__ import annotations

from collections import defaultdict


def connectivity(netlist: dict, top: str) -> tuple[dict, dict, set]:
    """``(sinks, driver, ports)`` of ``top``: per net bit the ``(cell, port)`` inputs it
    reaches and the ``(cell, port)`` output driving it, and the bits of the module's own
    ports (a flip-flop whose output is a port keeps its name there)."""
    sinks: dict[int, list[tuple[str, str]]] = defaultdict(list)
    driver: dict[int, tuple[str, str]] = {}
    for name, cell in netlist["modules"][top]["cells"].items():
        dirs = cell.get("port_directions", {})
        for port, bits in cell["connections"].items():
            for b in bits:
                if not isinstance(b, int):
                    continue
                if dirs.get(port) == "output":
                    driver[b] = (name, port)
                else:
                    sinks[b].append((name, port))
    ports = {b for p in netlist["modules"][top].get("ports", {}).values()
             for b in p["bits"] if isinstance(b, int)}
    return sinks, driver, ports


def plain_register(ff: dict, clock) -> object | None:
    """The clock enable (a net bit, or ``"1"``) of a ``TRELLIS_FF`` clocked by ``clock``
    (not inverted) with no set / reset (``LSR`` tied to 0) that starts at 0
    (``REGSET = "RESET"``, as a hard block's registers do); None for any other cell."""
    if ff["type"] != "TRELLIS_FF":
        return None
    p, c = ff["parameters"], ff["connections"]
    if (c["CLK"][0] != clock or p.get("CLKMUX", "CLK").strip() != "CLK"
            or p.get("REGSET", "RESET").strip() != "RESET"
            or c.get("LSR", ["0"])[0] != "0"
            or p.get("LSRMUX", "LSR").strip() not in ("LSR", "0")):
        return None
    ce_mux = p.get("CEMUX", "CE").strip()
    if ce_mux == "1":
        return "1"
    if ce_mux != "CE":
        return None
    return c.get("CE", ["1"])[0]
