"""Benchmark of the scale-out engine (``snpu regress`` on Dask).

    .venv/bin/python bench/scale.py [--programs 240] [--rtl-programs 24] [--chunk 4]

Random programs per minute run in this process (no engine), on a LocalCluster of 1 worker
and of 2 workers -- golden model only, and golden + RTL (Verilator, the 4-lane test core) --
the 2-worker / 1-worker ratio, and the engine's per-task overhead: the wall time of empty
tasks on one worker, and the time a golden regression takes on one worker beyond the same
programs in this process, per task.  Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import provenance  # noqa: E402

from snpu.config import SMALL_CORE  # noqa: E402
from snpu.verif import farm, regress  # noqa: E402

#: the core the RTL tests build (one cached Verilator model)
CORE = SMALL_CORE


def _rate(client, programs: int, chunk: int, rtl: bool, seed: int) -> dict:
    specs = regress.chunk_specs(programs, list(regress.KINDS), seed, rtl=rtl, config=CORE,
                                chunk=chunk)
    t0 = time.time()
    out = farm.run_tasks(client, "regress", regress.run_chunk, specs, None)
    wall = time.time() - t0
    rows = regress.flatten(out.results)
    assert all(r["ok"] for r in rows), [r for r in rows if not r["ok"]][:3]
    return {"programs": len(rows), "tasks": len(specs), "wall_s": round(wall, 3),
            "programs_per_minute": round(60 * len(rows) / wall, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=240)
    ap.add_argument("--rtl-programs", type=int, default=24)
    ap.add_argument("--chunk", type=int, default=4)
    ap.add_argument("--empty-tasks", type=int, default=200)
    a = ap.parse_args()
    res: dict = {"benchmark": "scale", "provenance": provenance(), "chunk": a.chunk}
    # warm the simulator cache (a build is not what this measures)
    _rate(None, 2, 2, True, 0)
    res["in_process"] = {"golden": _rate(None, a.programs, a.chunk, False, 1),
                         "rtl": _rate(None, a.rtl_programs, a.chunk, True, 1)}
    for workers in (1, 2):
        t0 = time.time()
        client = farm.connect(None, workers)
        start = time.time() - t0
        try:
            r = {"cluster_start_s": round(start, 2),
                 "golden": _rate(client, a.programs, a.chunk, False, 1),
                 "rtl": _rate(client, a.rtl_programs, a.chunk, True, 1)}
            if workers == 1:
                specs = [{"i": i} for i in range(a.empty_tasks)]
                t0 = time.time()
                farm.run_tasks(client, "ping", farm.ping, specs, None)
                r["empty_task_ms"] = round(1000 * (time.time() - t0) / a.empty_tasks, 2)
        finally:
            farm.close(client)
        res[f"workers_{workers}"] = r
    w1, w2, ip = res["workers_1"], res["workers_2"], res["in_process"]
    res["ratio_2_vs_1_workers"] = {k: round(w2[k]["programs_per_minute"] / w1[k]["programs_per_minute"], 3)
                                   for k in ("golden", "rtl")}
    res["overhead_per_task_ms"] = round(1000 * (w1["golden"]["wall_s"] - ip["golden"]["wall_s"])
                                        / w1["golden"]["tasks"], 2)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
