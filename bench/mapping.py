"""Benchmark of the neuron-level mapper (issue: seed 003 mapping).

    .venv/bin/python bench/mapping.py [--layers 16 --side 250] [--big-layers 12 --big-side 1000]
                                      [--no-big] [--no-metis] [--out build/bench_mapping]

Prints one JSON document:

* ``main``: a layered locally connected graph (``layers`` x ``side``^2 neurons, 3x3 windows:
  1e6 vertices, 8.4e6 connections by default) written to a store, then mapped from the
  store onto a 32x32 mesh of 1024-neuron cores in a fresh process: edge cut, max load,
  hop traffic against the naive row-major placement, busiest link, seconds per phase,
  peak RSS; and pymetis k-way (``part_graph``) on the same graph with the same number of
  parts, in its own process: cut, seconds, peak RSS, once with its default imbalance
  (parts up to 3 % over the mean, which exceeds the cores' capacity) and once with the
  imbalance that keeps every part within the capacity (equal capacity).  Cut ratio = ours /
  pymetis.
* ``big``: the same shape at ~1e8 connections (12 x 1000^2 neurons), written to a store
  without ever holding the graph (``write_layered``) and mapped from it in a fresh process
  onto a 110x110 mesh: peak RSS and time.

Every mapping and pymetis run is a separate process so each peak RSS is its own.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import provenance  # noqa: E402


def _worker_map(path: str, mesh: str, capacity: int) -> None:
    from snpu.compiler.mapping.mapper import MapOptions, map_topology

    w, h = (int(v) for v in mesh.split("x"))
    t0 = time.time()
    m = map_topology(path, MapOptions(capacity=capacity, mesh=(w, h)))
    m.metrics["wall_seconds"] = round(time.time() - t0, 2)
    m.metrics["levels_detail"] = m.levels
    print(json.dumps(m.metrics))


def _worker_metis(path: str, parts: int, capacity: int = 0) -> None:
    """pymetis k-way with its default imbalance (ufactor 30: parts up to 3 % above the
    mean), or with ``capacity`` > 0 the largest ufactor that keeps every part within it
    (the mapper's own constraint)."""
    import resource
    import warnings

    import numpy as np
    import pymetis

    from snpu.compiler.mapping import store

    warnings.filterwarnings("ignore", category=DeprecationWarning)
    t = store.read(path, flags=False)
    ufactor = 30
    if capacity:
        ufactor = max(1, int((capacity / (t.sizes.sum() / parts) - 1) * 1000))
    t0 = time.time()
    cut, membership = pymetis.part_graph(parts, xadj=t.indptr, adjncy=t.indices,
                                         eweights=t.weights, vweights=t.sizes,
                                         options=pymetis.Options(ufactor=ufactor))
    sec = time.time() - t0
    load = np.bincount(np.asarray(membership), weights=t.sizes, minlength=parts)
    print(json.dumps({"parts": parts, "ufactor": ufactor, "edge_cut": int(cut), "seconds": round(sec, 2),
                      "max_part_size": int(load.max()),
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))


def _run(*args) -> dict:
    r = subprocess.run([sys.executable, __file__, *map(str, args)], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{args[0]} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _write_graph(out: Path, layers: int, side: int, what: str) -> tuple[Path, dict]:
    """Stream the layered graph to a store; (its path, the report entry so far)."""
    from snpu.compiler.mapping.generate import write_layered

    path = out / f"layered_{layers}x{side}.zip"
    t0 = time.time()
    meta = write_layered(path, layers, side, 1)
    _log(f"{what} graph: {meta}")
    return path, {"graph": meta, "store_write_seconds": round(time.time() - t0, 1),
                  "store_bytes": path.stat().st_size}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker-map":
        return _worker_map(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    if len(sys.argv) > 1 and sys.argv[1] == "--worker-metis":
        return _worker_metis(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--side", type=int, default=250)
    ap.add_argument("--mesh", default="32x32")
    ap.add_argument("--capacity", type=int, default=1024)
    ap.add_argument("--big-layers", type=int, default=12)
    ap.add_argument("--big-side", type=int, default=1000)
    ap.add_argument("--big-mesh", default="110x110")
    ap.add_argument("--no-big", action="store_true")
    ap.add_argument("--no-metis", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "build" / "bench_mapping"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"benchmark": "mapping", "provenance": provenance(), "targets": {
        "cut_vs_pymetis_equal_capacity": 1.00, "seconds_8e6_edges": 60,
        "peak_rss_gb_1e8_edges": 4}}

    path, main_ = _write_graph(out, args.layers, args.side, "main")
    main_["ours"] = ours = _run("--worker-map", path, args.mesh, args.capacity)
    _log(f"ours: cut {ours['edge_cut']} in {ours['wall_seconds']} s")
    if not args.no_metis:
        main_["pymetis"] = pm = _run("--worker-metis", path, ours["groups"], 0)
        main_["cut_ratio_vs_pymetis"] = round(ours["edge_cut"] / pm["edge_cut"], 4)
        _log(f"pymetis: cut {pm['edge_cut']} in {pm['seconds']} s")
        main_["pymetis_equal_capacity"] = pe = _run("--worker-metis", path, ours["groups"],
                                                    args.capacity)
        main_["cut_ratio_vs_pymetis_equal_capacity"] = round(ours["edge_cut"] / pe["edge_cut"], 4)
        _log(f"pymetis at capacity {args.capacity}: cut {pe['edge_cut']} in {pe['seconds']} s")
    main_["hop_traffic_vs_row_major"] = round(ours["hop_traffic"] / ours["hop_traffic_row_major"], 4)
    report["main"] = main_

    if not args.no_big:
        path, big = _write_graph(out, args.big_layers, args.big_side, "big")
        big["ours"] = _run("--worker-map", path, args.big_mesh, args.capacity)
        report["big"] = big
        path.unlink()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
