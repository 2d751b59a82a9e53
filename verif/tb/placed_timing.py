"""Static timing of a placed and routed design, from nextpnr's SDF: the slack of *every*
endpoint, so one placement names every path that keeps the design from its target, not
only the one critical path nextpnr's report gives.

nextpnr writes (``--sdf``) every cell's delays (``IOPATH``: input pin to output pin; a
clock pin to an output is a launch, clock-to-out) and setup checks (``SETUPHOLD``), and
every routed connection's delay (``INTERCONNECT``: driver pin to sink pin).  Those are
all the arcs nextpnr's own analysis adds up, so the longest arrival here is nextpnr's
critical path (checked in ``tests/verif/test_placed_timing.py`` against its report).  The
maximum of each min:typ:max triple is used, as nextpnr does.

:func:`endpoint_slacks` gives every endpoint's arrival; :func:`failing_paths` groups the
endpoints by register (the bits of one Amaranth signal, the words of one memory), keeps
the worst path of each group and of each logic cone, and names the signals each path
runs through with their Amaranth source lines.
"""

from __future__ import annotations

import re
from collections import defaultdict

from .netlist_report import design_line

_TRIPLE = r"\((-?[\d.]*):(-?[\d.]*):(-?[\d.]*)\)"
_CELL = re.compile(r"\(CELL\s*\(CELLTYPE\s+\"([^\"]*)\"\)\s*\(INSTANCE\s*([^)]*)\)")
_IOPATH = re.compile(r"\(IOPATH\s+(\S+)\s+(\S+)\s+" + _TRIPLE)
_SETUP = re.compile(r"\(SETUPHOLD\s+\((?:posedge|negedge)\s+(\S+)\)\s+\((?:posedge|negedge)\s+(\S+)\)\s+"
                    + _TRIPLE)
_INTERCONNECT = re.compile(r"\(INTERCONNECT\s+(\S+)\s+(\S+)\s+" + _TRIPLE)
#: cell pins that are clocks: an IOPATH from one is a launch, not a combinational arc
#: (a multiplier block's registers take CLK0..CLK3: its registered outputs launch paths)
_CLOCKS = {"CLK", "CLKA", "CLKB", "WCK", "CLK0", "CLK1", "CLK2", "CLK3"}
#: the names nextpnr and yosys append to a signal's name for the cells made from it
_SUFFIX = re.compile(r"_TRELLIS|_LUT4|_CCU2|_PFUMX|_L6MUX|_DPR16X4|_MULT18|_DP16KD|\$CCU2|"
                     r"\$DPRAM|\$RAMW|\[")
#: a memory's cells: <memory>.<bank>.<bit>[_<port>...]
_MEMORY_CELL = re.compile(r"(\.\d+)+(_[A-Z]+\d*)*(_\d+)?$")


def _unescape(name: str) -> str:
    return name.replace("\\", "")


def _split_pin(ref: str) -> tuple[str, str]:
    """``inst/pin`` (the hierarchy divider is ``/``; names escape their own with ``\\``)."""
    k = len(ref) - 1
    while k >= 0 and not (ref[k] == "/" and (k == 0 or ref[k - 1] != "\\")):
        k -= 1
    return _unescape(ref[:k]), ref[k + 1:]


def _ns(triple: tuple[str, str, str]) -> float:
    """The maximum of a min:typ:max triple (picoseconds) in nanoseconds."""
    return max(float(x) for x in triple if x not in ("", "-")) / 1000.0


def parse_sdf(text: str):
    """``(arcs, launches, setups, kinds)``: ``arcs[(inst, pin)]`` = [(from (inst, pin),
    ns)], the combinational arcs into a pin (cell paths and routed connections);
    ``launches[(inst, pin)]`` = clock-to-out of a sequential output; ``setups[(inst,
    pin)]`` = setup time of a sequential input; ``kinds[inst]`` = its cell type."""
    arcs: dict[tuple[str, str], list[tuple[tuple[str, str], float]]] = defaultdict(list)
    launches: dict[tuple[str, str], float] = {}
    setups: dict[tuple[str, str], float] = {}
    kinds: dict[str, str] = {}
    # cells one after another: cut the text at every "(CELL" (not "(CELLTYPE")
    for block in re.split(r"\(CELL\s", text)[1:]:
        head = _CELL.match("(CELL " + block)
        if not head:
            continue
        kind, inst = head.group(1), _unescape(head.group(2).strip())
        kinds[inst] = kind
        for a, b, *t in _INTERCONNECT.findall(block):
            src, dst = _split_pin(a), _split_pin(b)
            if dst[1] in _CLOCKS:
                continue
            arcs[dst].append((src, _ns(t)))
        for i, o, *t in _IOPATH.findall(block):
            if i in _CLOCKS:
                launches[(inst, o)] = max(launches.get((inst, o), 0.0), _ns(t))
            else:
                arcs[(inst, o)].append(((inst, i), _ns(t)))
        for d, _clk, *t in _SETUP.findall(block):
            setups[(inst, d)] = max(setups.get((inst, d), 0.0), _ns(t))
    return arcs, launches, setups, kinds


def endpoint_slacks(text: str):
    """Every sequential input's ``(required period ns, endpoint, path)``, worst first; the
    path is the chain of pins from its launch, each with its arrival (ns)."""
    arcs, launches, setups, _kinds = parse_sdf(text)
    arrival: dict[tuple[str, str], tuple[float, tuple[str, str] | None]] = {}

    def arrive(pin):
        # iterative post-order longest path; a loop (none in a legal netlist) is cut
        stack, open_ = [(pin, False)], set()
        while stack:
            p, expanded = stack.pop()
            if p in arrival:
                continue
            if expanded:
                # a pin that no register launches (a constant, a top-level input) is never
                # reached: -inf, so a constant's arcs cannot hide a real path
                best = (launches.get(p, float("-inf")), None)
                for src, d in arcs.get(p, ()):
                    if src in arrival and arrival[src][0] + d > best[0]:
                        best = (arrival[src][0] + d, src)
                arrival[p] = best
                open_.discard(p)
            elif p not in open_:
                open_.add(p)
                stack.append((p, True))
                stack.extend((s, False) for s, _ in arcs.get(p, ())
                             if s not in arrival and s not in open_)
        return arrival[pin][0]

    out = []
    for end, setup in setups.items():
        a = arrive(end)
        if a == float("-inf"):
            continue
        chain, p = [], end
        while p is not None:
            chain.append((p, round(arrival[p][0], 3)))
            p = arrival[p][1]
        # (a constant, or a top-level input such as the reset pin, launches nothing:
        # nextpnr does not time those paths either)
        if len(chain) == 1 or chain[-1][0] not in launches:
            continue
        out.append((round(a + setup, 3), end, chain[::-1]))
    out.sort(key=lambda r: -r[0])
    return out


def _signal(inst: str) -> str:
    """The Amaranth signal a cell is named after (``dut.ld.rows_TRELLIS_FF_Q_3`` ->
    ``dut.ld.rows``; a memory's ``<memory>.<bank>.<bit>`` -> ``<memory>``)."""
    return _MEMORY_CELL.sub("", _SUFFIX.split(inst)[0])


def _source(signal: str, netnames: dict) -> str | None:
    name = signal
    while name:
        line = design_line((netnames.get(name) or {}).get("attributes", {}).get("src", ""))
        if line:
            return line
        cut = max(name.rfind("."), name.rfind("$"), name.rfind("_"))
        name = name[:cut] if cut > 0 else ""
    return None


def failing_paths(text: str, netnames: dict | None = None, period_ns: float | None = None,
                  n: int = 10) -> dict:
    """The ``n`` worst paths, one per endpoint register and per logic cone (a path whose
    first two thirds are a worse path's is left out: the same cause fanning out), each
    with the clock it allows, its endpoint, its logic levels and the signals it runs
    through with their source lines; and, with ``period_ns``, how many endpoints and
    registers miss that period."""
    netnames = netnames or {}
    ends = endpoint_slacks(text)
    rows, seen, cones = [], set(), []
    for need, (inst, pin), chain in ends:
        group = _signal(inst)
        if group in seen:
            continue
        seen.add(group)
        through, last = [], None
        for (cell, _pin), t in chain:
            s = _signal(cell)
            if s != last and not s.startswith("$nextpnr"):   # (a route-through LUT)
                through.append({"signal": s, "source": _source(s, netnames), "at_ns": t})
                last = s
        signals = tuple(s["signal"] for s in through)
        head = signals[:max(1, 2 * len(signals) // 3)]
        if any(c[:len(head)] == head for c in cones):
            continue
        cones.append(signals)
        cells = {c for (c, _p), _t in chain}
        rows.append({"fmax_mhz": round(1000.0 / need, 1) if need > 0 else None,
                     "delay_ns": need, "to": f"{group} ({pin})",
                     "cells": len(cells), "through": through})
        if len(rows) == n:
            break
    out = {"paths": rows}
    if period_ns is not None:
        failing = [(inst, pin) for need, (inst, pin), _c in ends if need > period_ns]
        out["failing_endpoints"] = len(failing)
        out["failing_registers"] = len({_signal(i) for i, _p in failing})
    return out
