"""Reports on a flattened ``synth_ecp5`` netlist (yosys JSON): area per block and the
deepest register-to-register paths, each named by its Amaranth signals and source lines.

Both work before placement, so they take seconds after yosys (minutes before nextpnr's
figures) and name every block and path, where nextpnr reports one critical path.

* :func:`block_area` attributes every cell to the deepest Amaranth instance whose path
  prefixes its name (the instances are the netlist's ``$scopeinfo`` cells; yosys names a
  mapped cell after the net it drives, which carries the hierarchy), and sums per block.
* :func:`deepest_paths` weighs each combinational arc with a rough ECP5 delay (one unit
  is a LUT with its routing, about 1.4 ns at the speeds nextpnr reports for this design; a
  carry step is a tenth of one) and lists the endpoints with the largest arrival, one per
  register group.  The weights rank paths; the clock comes from nextpnr.
"""

from __future__ import annotations

import re
from pathlib import Path
from collections import Counter, defaultdict

# Cell kinds as counted in the tables.
_KIND = {"LUT4": "lut4", "CCU2C": "carry", "TRELLIS_FF": "ff", "TRELLIS_DPR16X4": "lutram",
         "DP16KD": "bram", "MULT18X18D": "dsp", "PFUMX": "mux", "L6MUX21": "mux"}
# Launch delay of sequential cells (in LUT units): flip-flop clock-to-out; a block RAM's or a
# DSP's outputs start late unless their output register is in use (:func:`_launch`).
_LAUNCH = {"TRELLIS_FF": 0.5, "DP16KD": 3.5, "MULT18X18D": 3.0, "ALU54B": 3.0}


def _launch(cell: dict, port: str) -> float:
    """Launch delay of ``port`` of a sequential ``cell``: a block RAM port with its output
    register (``REGMODE``) or a multiplier with its (``REG_OUTPUT_CLK``, after
    :mod:`.bram_outreg` / :mod:`.dsp_registers`) launches like a flip-flop."""
    t, params = cell["type"], cell.get("parameters", {})
    if t == "DP16KD" and port[:3] in ("DOA", "DOB") and \
            str(params.get(f"REGMODE_{port[2]}", "NOREG")).strip() == "OUTREG":
        return _LAUNCH["TRELLIS_FF"]
    if t == "MULT18X18D" and str(params.get("REG_OUTPUT_CLK", "NONE")).strip() != "NONE":
        return _LAUNCH["TRELLIS_FF"]
    return _LAUNCH[t]
_SUFFIX = re.compile(r"_TRELLIS|_LUT4|_CCU2|_PFUMX|_L6MUX|_DPR16X4|_MULT18|_DP16KD|\[")
# a memory's cells: <memory>.<bank>.<bit>[_<port>...]
_MEMORY_CELL = re.compile(r"(\.\d+)+(_[A-Z]+\d*)*(_\d+)?$")


def _arcs(cell: dict) -> list[tuple[str, str, float]]:
    """The combinational arcs of a mapped cell: (input port, output port, delay)."""
    t = cell["type"]
    if t == "LUT4":
        return [(p, "Z", 1.0) for p in "ABCD"]
    if t == "PFUMX":
        return [("ALUT", "Z", 0.3), ("BLUT", "Z", 0.3), ("C0", "Z", 0.6)]
    if t == "L6MUX21":
        return [("D0", "Z", 0.3), ("D1", "Z", 0.3), ("SD", "Z", 0.6)]
    if t == "CCU2C":
        out = [("CIN", "S0", 0.3), ("CIN", "S1", 0.3), ("CIN", "COUT", 0.1)]
        for i in "01":
            for p in "ABCD":
                out += [(p + i, "S" + i, 1.0), (p + i, "COUT", 1.0)]
        return out
    if t == "TRELLIS_DPR16X4":
        return [("RAD", "DO", 1.0)]
    return []


def _instances(mod: dict) -> dict[str, str]:
    """Instance path -> the Amaranth file that made it (``rtl/ld_unit.py``)."""
    out = {}
    for name, cell in mod["cells"].items():
        if cell["type"] == "$scopeinfo":
            src = cell.get("attributes", {}).get("module_src", "")
            out[name.lstrip("\\")] = relative(src.split(":")[0])
    return out


def relative(src: str) -> str:
    """``/abs/path/snpu/rtl/router.py:99`` -> ``rtl/router.py:99`` (Amaranth's own lines
    from ``amaranth/``)."""
    parts = Path(src).parts
    for anchor in ("rtl", "verif", "amaranth"):
        if anchor in parts:
            return str(Path(*parts[parts.index(anchor):]))
    return src


def design_line(src: str) -> str | None:
    """Among the ``|``-separated locations of a ``src`` attribute, the design's line
    (``rtl/``, ``verif/``) before Amaranth's library; None if it names no Python line."""
    py = [p for p in src.split("|") if ".py:" in p]
    ours = [p for p in py if "/rtl/" in p or "/verif/" in p]
    return relative((ours or py)[0]) if py else None


def _owner(name: str, instances: dict[str, str]) -> str:
    """The deepest instance whose path prefixes the cell or net ``name``."""
    name = name.lstrip("\\")
    parts = name.split(".")
    for k in range(len(parts) - 1, 0, -1):
        head = ".".join(parts[:k])
        if head in instances:
            return head
    return "(top)"


#: LUT sites of an ECP5 one 16x4 distributed RAM (TRELLIS_DPR16X4) takes: nextpnr packs it
#: into four LUTs in RAM mode and blocks the two LUTs beside its write-port slice
#: (ecp5/pack.cc, ``pack_dram``), so a LUT RAM bit of a queue costs 1.5 LUTs of logic.
LUT_SITES_PER_LUTRAM = 6


def block_area(netlist: dict, top: str = "top", min_share: float = 0.01) -> list[dict]:
    """Cells per Amaranth instance, children included: ``lut4``, ``carry`` (CCU2C, two
    LUTs each), ``ff``, ``lutram`` (16x4 distributed RAMs), ``bram``, ``dsp``; ``luts``
    is ``lut4 + 2 * carry``; ``lut_sites`` adds the LUT sites the distributed RAMs take
    (:data:`LUT_SITES_PER_LUTRAM` each: what an ECP5's LUTs hold, as nextpnr packs them).
    Instances holding at least ``min_share`` of the LUTs, largest first within their
    parent, in tree order (``depth`` 0 is the top)."""
    mod = netlist["modules"][top]
    instances = _instances(mod)
    own = defaultdict(Counter)
    for name, cell in mod["cells"].items():
        kind = _KIND.get(cell["type"])
        if kind:
            own[_owner(name, instances)][kind] += 1
    total = defaultdict(Counter)
    for inst, c in own.items():
        parts = inst.split(".") if inst != "(top)" else []
        for k in range(len(parts) + 1):
            total[".".join(parts[:k]) or "(top)"].update(c)
    everything = total["(top)"]
    all_luts = everything["lut4"] + 2 * everything["carry"]
    children = defaultdict(list)
    for inst in total:
        if inst != "(top)":
            parent = ".".join(inst.split(".")[:-1]) or "(top)"
            children[parent].append(inst)

    def luts(inst):
        return total[inst]["lut4"] + 2 * total[inst]["carry"]

    rows = []

    def visit(inst, depth):
        c = total[inst]
        rows.append({"block": inst, "source": instances.get(inst, ""), "depth": depth,
                     "luts": luts(inst),
                     "lut_sites": luts(inst) + LUT_SITES_PER_LUTRAM * c["lutram"],
                     **{k: c[k] for k in ("lut4", "carry", "ff", "lutram", "bram", "dsp")}})
        for ch in sorted(children[inst], key=luts, reverse=True):
            if luts(ch) >= min_share * all_luts:
                visit(ch, depth + 1)

    visit("(top)", 0)
    return rows


def deepest_paths(netlist: dict, top: str = "top", n: int = 5) -> list[dict]:
    """The ``n`` deepest register-to-register paths, one per endpoint register group and
    one per logic cone, deepest first: the arrival (LUT units), the endpoint, and the
    signals the path runs through, each with the Amaranth source line of the cell that
    drives it.  A path that runs through the first two thirds of a deeper path reported
    already (the same cone, fanning out to other registers at its end) is left out, so
    the rows name different causes."""
    mod = netlist["modules"][top]
    net_name = {}
    for name, d in mod["netnames"].items():
        for b in d["bits"]:
            if isinstance(b, int) and (b not in net_name or net_name[b].startswith("$")):
                net_name[b] = name
    fanin = defaultdict(list)        # net bit -> [(input bit, delay)]
    driver_src = {}                  # net bit -> Amaranth source line of its driver
    launch = {}                      # net bit -> launch delay (sequential outputs)
    ends = []                        # (net bit, cell, port) sequential inputs
    for cname, cell in mod["cells"].items():
        t = cell["type"]
        conns = cell["connections"]
        dirs = cell.get("port_directions", {})
        src = design_line(cell.get("attributes", {}).get("src", "")) or ""
        for port, d in dirs.items():
            for b in conns.get(port, []):
                if not isinstance(b, int):
                    continue
                if d == "output":
                    driver_src[b] = src
                    if t in _LAUNCH:
                        launch[b] = _launch(cell, port)
                elif t in _LAUNCH or (t == "TRELLIS_DPR16X4" and port in ("DI", "WAD", "WRE")):
                    ends.append((b, cname, port))
        for ip, op, w in _arcs(cell):
            for x in conns.get(ip, []):
                for y in conns.get(op, []):
                    if isinstance(x, int) and isinstance(y, int):
                        fanin[y].append((x, w))

    arrival: dict[int, tuple[float, int | None]] = {}   # bit -> (arrival, from bit)

    def arrive(bit: int) -> float:
        # iterative post-order longest path; a combinational loop (none in a legal
        # netlist) is cut where the walk meets it again
        stack, open_ = [(bit, False)], set()
        while stack:
            b, expanded = stack.pop()
            if b in arrival:
                continue
            if expanded:
                best = (launch.get(b, 0.0), None)
                for x, w in fanin.get(b, ()):
                    if x in arrival and arrival[x][0] + w > best[0]:
                        best = (arrival[x][0] + w, x)
                arrival[b] = best
                open_.discard(b)
            elif b not in open_:
                open_.add(b)
                stack.append((b, True))
                stack.extend((x, False) for x, _ in fanin.get(b, ())
                             if x not in arrival and x not in open_)
        return arrival[bit][0]

    scored = sorted(((arrive(b), b, cname, port) for b, cname, port in ends), reverse=True)
    out, seen, cones = [], set(), []
    for a, b, cname, port in scored:
        group = _MEMORY_CELL.sub("", _SUFFIX.split(net_name.get(b, cname.lstrip("\\")))[0])
        if group in seen:
            continue
        seen.add(group)
        chain, x = [], b
        while x is not None:
            chain.append(x)
            x = arrival[x][1]
        through, last = [], None
        for x in reversed(chain):
            signal = _SUFFIX.split(net_name.get(x, "?"))[0]
            step = (signal, driver_src.get(x, ""))
            if step != last:
                through.append({"signal": signal, "source": step[1],
                                "arrival": round(arrival[x][0], 1)})
                last = step
        signals = tuple(s["signal"] for s in through)
        head = signals[:max(1, 2 * len(signals) // 3)]
        if any(c[:len(head)] == head for c in cones):
            continue
        cones.append(signals)
        out.append({"depth": round(a, 1), "to": group, "port": port, "through": through})
        if len(out) == n:
            break
    return out
