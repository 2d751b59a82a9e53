"""The results of ``snpu sweep``: the table (CSV, JSON), the plots (speedup vs weight
density; the Pareto front of cycles vs LUTs) as PNG, and one self-contained HTML page.

Presentation only: it lives outside ``rtl/``, ``verif/`` and ``compiler/``, so changing it
does not invalidate the cached results of a sweep (:func:`snpu.verif.farm.code_version`).
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
from pathlib import Path



def table(specs: list[dict], results: list[dict], synth: dict[str, dict], varied: list[str]) -> list[dict]:
    rows = []
    for s, r in zip(specs, results):
        w = s["workload"]
        cfg = s["config"]
        row = {k: cfg[k] for k in varied}
        row.update({"workload": "fc" if w["kind"] == "fc" else Path(w["path"]).stem,
                    "w_density": w["w_density"], "n_density": w.get("n_density", ""),
                    "format": w.get("format", "compiler"),
                    **{k: r.get(k) for k in ("cycles", "dense_cycles", "speedup", "rtl_cycles",
                                             "problem")}})
        if r.get("error"):
            row["problem"] = r["error"]
        syn = synth.get(json.dumps(cfg, sort_keys=True))
        if syn:
            row.update({"luts": syn.get("luts"), "fmax_mhz": syn.get("fmax_mhz")})
        rows.append(row)
    return rows


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def plots(rows: list[dict], varied: list[str]) -> dict[str, bytes]:
    """PNG bytes: ``speedup`` (speedup vs weight density, one line per configuration and
    format) and, with synthesis results, ``pareto`` (total cycles vs LUTs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}

    def label(r):
        return ", ".join(f"{k}={r[k]}" for k in varied) or "default core"

    fig, ax = plt.subplots(figsize=(6, 4))
    series: dict[str, list] = {}
    for r in rows:
        if r.get("speedup"):
            series.setdefault(f"{label(r)} {r['workload']} {r['format']}", []).append(
                (r["w_density"], r["speedup"]))
    for name, pts in sorted(series.items()):
        pts = sorted(pts)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xlabel("weight density")
    ax.set_ylabel("speedup over dense mode (golden cycles)")
    ax.set_xscale("log")
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(fontsize=7)
    out["speedup"] = _png(fig)
    plt.close(fig)
    # total cycles over the workloads every configuration ran (a point that did not fit one
    # configuration would otherwise make it look faster)
    runs: dict[str, dict] = {}
    for r in rows:
        if r.get("luts") and r.get("cycles"):
            key = (r["workload"], r["w_density"], r["n_density"], r["format"])
            runs.setdefault(label(r), {"luts": r["luts"], "cycles": {}})["cycles"][key] = r["cycles"]
    common = set.intersection(*(set(v["cycles"]) for v in runs.values())) if runs else set()
    per_cfg = {name: [v["luts"], sum(v["cycles"][k] for k in common)] for name, v in runs.items()}
    if per_cfg and common:
        pts = sorted((v[0], v[1], k) for k, v in per_cfg.items())
        front, best = [], None
        for lut, cyc, name in pts:
            if best is None or cyc < best:
                front.append((lut, cyc))
                best = cyc
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.scatter([p[0] for p in pts], [p[1] for p in pts])
        for lut, cyc, name in pts:
            ax.annotate(name, (lut, cyc), fontsize=7)
        ax.step([p[0] for p in front], [p[1] for p in front], where="post", color="C1",
                label="Pareto front")
        ax.set_xlabel("LUTs (ECP5, placed and routed)")
        ax.set_ylabel(f"golden cycles, the {len(common)} workloads every configuration ran")
        ax.legend()
        out["pareto"] = _png(fig)
        plt.close(fig)
    return out


def write_report(directory: Path, rows: list[dict], images: dict[str, bytes], meta: dict) -> None:
    """results.csv, results.json, <plot>.png and report.html (self-contained) in ``directory``."""
    from snpu.fileio import atomic_write

    directory.mkdir(parents=True, exist_ok=True)
    cols = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    wr = csv.DictWriter(buf, fieldnames=cols)
    wr.writeheader()
    wr.writerows(rows)
    atomic_write(directory / "results.csv", buf.getvalue())
    for name, png in images.items():
        atomic_write(directory / f"{name}.png", png)
    figs = "".join(f'<h2>{html.escape(n)}</h2><img alt="{html.escape(n)}" '
                   f'src="data:image/png;base64,{base64.b64encode(p).decode()}">' for n, p in images.items())
    if "pareto" not in images:
        figs += "<p>No Pareto plot: run the sweep with --synth for LUTs per configuration.</p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape('' if r.get(c) is None else str(r.get(c)))}</td>"
                                    for c in cols) + "</tr>" for r in rows)
    atomic_write(directory / "report.html",
        "<!doctype html><html><head><meta charset='utf-8'><title>snpu sweep</title>"
        "<style>body{font-family:sans-serif}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:12px}</style></head><body>"
        f"<h1>snpu sweep</h1><p>{html.escape(json.dumps(meta))}</p>{figs}"
        f"<h2>results</h2><table><tr>{head}</tr>{body}</table></body></html>")
    # the manifest last: results.json says the sweep is complete
    atomic_write(directory / "results.json", json.dumps({**meta, "rows": rows}, indent=1))
