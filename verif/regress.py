"""Random-program regressions on a Dask cluster (``snpu regress``).

Program ``i`` of a regression is the seeded generator's program of kind
``kinds[i % len(kinds)]`` with seed ``seed_start + i``: single-core kinds are
:data:`~snpu.verif.progen.GENERATORS` (fc, conv, pool, eltwise), array kinds the traffic
patterns of :mod:`~snpu.verif.meshgen` (``--mesh``).  Every program runs on the golden model
(faults, races and deadlocks are failures; array programs are also checked against their
numpy reference) and, with ``rtl``, on the RTL, whose testbench compares every memory bit
and counter with the golden model.

Programs go to the workers in chunks (:func:`chunk_specs`): each chunk runs in one simulator
process, so a worker builds (or reuses, from the on-disk cache) the Verilator model once per
configuration and pays the simulator's start-up once per chunk.  A failing program is rerun
alone with a waveform (FST where the machine can write it, else VCD) and reported with its
seed and a one-line replay command.
"""

from __future__ import annotations

import fcntl
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

import numpy as np

from snpu.config import CoreConfig
from snpu.errors import SnpuError

from . import meshgen, progen

KINDS = tuple(progen.GENERATORS)
#: the source that decides a program's result (the key of cached results)
CODE = ("rtl", "verif")
MESH_KINDS = meshgen.PATTERNS


class RegressError(SnpuError):
    """A regression could not be set up (bad kinds, mesh or configuration)."""


def check_kinds(kinds: list[str], mesh: tuple[int, int]) -> list[str]:
    allowed = MESH_KINDS if tuple(mesh) != (1, 1) else KINDS
    kinds = list(kinds) or list(allowed)
    bad = [k for k in kinds if k not in allowed]
    if bad:
        where = f"a {mesh[0]}x{mesh[1]} array" if tuple(mesh) != (1, 1) else "one core"
        raise RegressError(f"kind {bad[0]!r}: the kinds for {where} are {', '.join(allowed)}")
    return kinds


def chunk_specs(programs: int, kinds: list[str], seed_start: int, *, mesh=(1, 1), rtl=False,
                config: CoreConfig | None = None, chunk: int = 8, stall: float = 0.0,
                waves_dir: str | None = None) -> list[dict]:
    """The task specs of a regression: ``programs`` programs in chunks of ``chunk``."""
    config = config or CoreConfig()
    items = [{"kind": kinds[i % len(kinds)], "seed": seed_start + i} for i in range(programs)]
    return [{"programs": items[a:a + chunk], "mesh": list(mesh), "rtl": bool(rtl),
             "config": config.to_dict(), "stall": stall, "waves_dir": waves_dir}
            for a in range(0, len(items), chunk)]


def replay_command(kind: str, seed: int, mesh, rtl: bool, config: CoreConfig) -> str:
    parts = ["snpu regress --programs 1", f"--kinds {kind}", f"--seed-start {seed}"]
    if tuple(mesh) != (1, 1):
        parts.append(f"--mesh {mesh[0]}x{mesh[1]}")
    if rtl:
        parts.append("--rtl")
    default = CoreConfig().to_dict()
    parts += [f"--{k.replace('_', '-')} {v}" for k, v in config.to_dict().items() if default.get(k) != v]
    return " ".join(parts)


def _make(kind: str, seed: int, mesh, config: CoreConfig):
    rng = np.random.default_rng(seed)
    if tuple(mesh) != (1, 1):
        return meshgen.mesh_program(rng, config, tuple(mesh), kind)
    return progen.random_program(rng, config, kind)


def _golden(prog, mesh, config: CoreConfig) -> tuple[int, str | None]:
    """(cycles, problem or None) of one program on the golden model."""
    from . import golden

    try:
        if tuple(mesh) != (1, 1):
            res = prog.run_golden()
            img = prog.placed()
            for name, want in prog.meta.get("expected", {}).items():
                reg = img.region(name)
                got = res.ext[reg.addr:reg.addr + want.size].view(np.int8)
                if not np.array_equal(got, want.reshape(-1)):
                    bad = int(np.count_nonzero(got != want.reshape(-1)))
                    return res.cycles, f"golden: {name} differs from the numpy reference in {bad} bytes"
            return res.cycles, None
        res = golden.run_image(prog.place_rom(), prog.image, config)
        return res.stats.cycles, None
    except SnpuError as e:
        return 0, f"golden: {e}"


@contextmanager
def _build_lock():
    """Workers on one machine share the simulator cache: one builds, the others wait."""
    from .tb.rtl_sim import CACHE

    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".build.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _jobs(progs, mesh):
    from .tb import rtl_sim

    if tuple(mesh) != (1, 1):
        return [rtl_sim.MeshJob(p) for p in progs]
    return [rtl_sim.Job(p.place_rom(), p.image) for p in progs]


def _rtl(progs, mesh, config: CoreConfig, stall: float, seed: int, waves: str | None = None):
    from .tb import rtl_sim

    jobs = _jobs(progs, mesh)
    # (built under the lock, at the size run_many asks for: the workers share one build)
    with _build_lock():
        rtl_sim.build(config, "hdl", rtl_sim.memory_bytes(jobs),
                      rtl_sim.waves_format(waves) if waves else None, tuple(mesh))
    return rtl_sim.run_many(jobs, config, stall=stall, seed=seed, waves=waves, mesh=tuple(mesh))


def run_chunk(spec: dict) -> dict:
    """One task: a chunk of programs on the golden model (and the RTL).  Returns one entry
    per program: kind, seed, ok, problem, golden and RTL cycles, seconds, replay command,
    waveform (failures on the RTL)."""
    config = CoreConfig.from_dict(spec["config"])
    mesh = tuple(spec["mesh"])
    out, progs, idx = [], [], []
    t0 = time.time()
    for item in spec["programs"]:
        entry = {"kind": item["kind"], "seed": item["seed"], "ok": True, "problem": None,
                 "replay": replay_command(item["kind"], item["seed"], mesh, spec["rtl"], config)}
        try:
            prog = _make(item["kind"], item["seed"], mesh, config)
        except (ValueError, SnpuError) as e:
            entry.update(ok=False, problem=f"generator: {e}")
            out.append(entry)
            continue
        entry["golden_cycles"], problem = _golden(prog, mesh, config)
        if problem:
            entry.update(ok=False, problem=problem)
        else:
            progs.append(prog)
            idx.append(len(out))
        out.append(entry)
    if spec["rtl"] and progs:
        try:
            results = _rtl(progs, mesh, config, spec.get("stall", 0.0), spec["programs"][0]["seed"])
        except SnpuError as e:
            results = []
            for k in idx:
                out[k].update(ok=False, problem=f"rtl: {e}")
        for k, r in zip(idx, results):
            out[k]["rtl_cycles"] = r.cycles
            if not r.ok or r.error != "NONE":
                bad = r.problems[:3] or ([f"{r.error} fault at ROM word {r.error_pc}"]
                                         if r.error != "NONE" else ["did not finish (hang)"])
                out[k].update(ok=False, problem="rtl: " + "; ".join(bad))
        for k in idx[len(results):]:  # the testbench stops after a hang
            if out[k]["ok"] and "rtl_cycles" not in out[k]:
                out[k].update(ok=False, problem="rtl: not run (an earlier program of its chunk hung)")
        for k, prog in zip(idx, progs):
            if not out[k]["ok"] and spec.get("waves_dir"):
                out[k]["waves"] = _waveform(prog, out[k], mesh, config, spec)
    for e in out:
        e["seconds"] = round((time.time() - t0) / max(1, len(out)), 4)
    return {"programs": out}


def _waveform(prog, entry: dict, mesh, config: CoreConfig, spec: dict) -> str | None:
    """Rerun one failing program alone, recording a waveform; returns its path."""
    from .tb.rtl_sim import RtlError, waves_format

    base = Path(spec["waves_dir"]) / f"{entry['kind']}-{entry['seed']}"
    for suffix in (".fst", ".vcd"):
        try:
            waves_format(base.with_suffix(suffix))
        except RtlError:
            continue  # FST needs liblz4 / zlib headers on this machine
        try:
            _rtl([prog], mesh, config, spec.get("stall", 0.0), entry["seed"],
                 waves=str(base.with_suffix(suffix)))
            return str(base.with_suffix(suffix))
        except Exception:  # the failure itself may stop the dump; say so, do not crash
            entry["waves_problem"] = traceback.format_exc(limit=1).splitlines()[-1]
            return None
    return None


# ----------------------------------------------------------------------------------------------
# Reports


def flatten(results: list[dict]) -> list[dict]:
    """Per-program entries of every chunk, in program order (a chunk that raised becomes
    failures of each of its programs)."""
    rows = []
    for r in results:
        rows.extend(r.get("programs", []))
    return rows


def junit_xml(rows: list[dict], name: str = "snpu.regress") -> str:
    failures = [r for r in rows if not r["ok"]]
    total = sum(r.get("seconds", 0.0) for r in rows)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             f'<testsuite name={quoteattr(name)} tests="{len(rows)}" failures="{len(failures)}" '
             f'errors="0" time="{total:.3f}">']
    for r in rows:
        case = (f'  <testcase classname={quoteattr(name + "." + r["kind"])} '
                f'name={quoteattr("seed" + str(r["seed"]))} time="{r.get("seconds", 0.0):.3f}"')
        if r["ok"]:
            lines.append(case + "/>")
        else:
            msg = f"{r['problem']}; replay: {r['replay']}"
            lines.append(case + ">")
            lines.append(f"    <failure message={quoteattr(msg)}>{escape(msg)}"
                         + (f"\nwaveform: {escape(r['waves'])}" if r.get("waves") else "")
                         + "</failure>")
            lines.append("  </testcase>")
    lines.append("</testsuite>")
    return "\n".join(lines) + "\n"
