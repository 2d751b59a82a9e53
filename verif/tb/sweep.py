"""Design-space sweeps on a Dask cluster (``snpu sweep``).

A sweep is the product of

* **configurations**: the default core with some :class:`~snpu.config.CoreConfig` fields
  varied (``--vary lanes=1,4,16 --vary wbuf_bytes=4096,16384``);
* **workloads**: fully connected layers from the seeded generator at every weight density,
  neuron density and weight index format (``--densities``, ``--neuron-densities``,
  ``--formats``), and ONNX models compiled at every weight density (``--models``).

Every point gives golden-model cycles of the sparse program and of the same work in dense
mode (the speedup); a deterministic sample of points (``--rtl-sample``) also runs on the RTL;
``--synth`` places and routes each configuration's core once (LUTs, Fmax; cached like every
other result).  :func:`write_report` writes the table (CSV, JSON), the plots (speedup vs
density; the Pareto front of cycles vs LUTs) as PNG and one self-contained HTML page.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import html
import io
import itertools
import json
from pathlib import Path

import numpy as np

from snpu.config import CoreConfig
from snpu.errors import SnpuError

FORMATS = ("direct", "stride")


class SweepError(SnpuError):
    """A sweep could not be set up (an unknown field or value)."""


def parse_vary(items: list[str]) -> dict[str, list]:
    """``["lanes=1,4", "wbuf_bytes=4096"]`` -> ``{"lanes": [1, 4], ...}`` (checked)."""
    fields = CoreConfig().to_dict()
    out: dict[str, list] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not values:
            raise SweepError(f"--vary {item!r}: want FIELD=V1,V2,...")
        if key not in fields:
            raise SweepError(f"--vary {item!r}: {key!r} is not a core parameter (one of "
                             f"{', '.join(sorted(fields))})")
        try:
            out[key] = [type(fields[key])(v) for v in values.split(",")]
        except ValueError:
            raise SweepError(f"--vary {item!r}: {key} takes {type(fields[key]).__name__} "
                             "values") from None
    return out


def configs(base: CoreConfig, vary: dict[str, list]) -> list[CoreConfig]:
    """Every combination of the varied fields over ``base`` (each checked)."""
    keys = list(vary)
    out = []
    for values in itertools.product(*(vary[k] for k in keys)):
        d = {**base.to_dict(), **dict(zip(keys, values))}
        try:
            out.append(CoreConfig.from_dict(d))
        except (ValueError, SnpuError) as e:
            raise SweepError(f"configuration {dict(zip(keys, values))}: {e}") from None
    return out


def points(cfgs: list[CoreConfig], *, densities, neuron_densities=(1.0,), formats=FORMATS,
           models=(), n_in: int = 256, rows: int = 32, nvec: int = 4, rtl_sample: float = 0.0,
           seed: int = 0) -> list[dict]:
    """The task specs of a sweep."""
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise SweepError(f"index format {bad[0]!r}: one of {', '.join(FORMATS)}")
    for d in list(densities) + list(neuron_densities):
        if not 0 < d <= 1:
            raise SweepError(f"density {d}: want 0 < density <= 1")
    specs = []
    for cfg in cfgs:
        for wd, nd, fmt in itertools.product(densities, neuron_densities, formats):
            specs.append({"config": cfg.to_dict(), "workload": {
                "kind": "fc", "n_in": n_in, "rows": rows, "nvec": nvec, "w_density": wd,
                "n_density": nd, "format": fmt, "seed": seed}})
        for m, wd in itertools.product(models, densities):
            specs.append({"config": cfg.to_dict(), "workload": {
                "kind": "model", "path": str(Path(m).resolve()), "w_density": wd, "seed": seed}})
    for s in specs:  # a deterministic sample (by content) also runs on the RTL
        h = int(hashlib.sha256(json.dumps(s, sort_keys=True).encode()).hexdigest()[:8], 16)
        s["rtl"] = h / 0xFFFFFFFF < rtl_sample
    return specs


def _fc(cfg: CoreConfig, w: dict, dense: bool):
    from .. import progen

    rng = np.random.default_rng(w["seed"])
    fmt = "dense" if dense else w["format"]
    return progen.fc_program(rng, cfg, n_in=w["n_in"], rows=w["rows"], nvec=w["nvec"],
                             nfmt="dense" if dense else "direct", wfmt=fmt, npacked=0, mixed=0,
                             n_density=w["n_density"], w_density=w["w_density"], ktiles=1,
                             group=0)


def run_point(spec: dict) -> dict:
    """One point: golden cycles sparse and dense (and RTL cycles when sampled)."""
    from .. import golden

    cfg = CoreConfig.from_dict(spec["config"])
    w = spec["workload"]
    out = {"rtl": spec["rtl"]}
    try:
        if w["kind"] == "fc":
            sparse, dense = _fc(cfg, w, False), _fc(cfg, w, True)
            out["cycles"] = golden.run_image(sparse.place_rom(), sparse.image, cfg).stats.cycles
            out["dense_cycles"] = golden.run_image(dense.place_rom(), dense.image, cfg).stats.cycles
            if spec["rtl"]:
                from . import rtl_sim

                r = rtl_sim.run(sparse.place_rom(), sparse.image, cfg)
                out["rtl_cycles"] = r.cycles if r.ok else None
                out["rtl_ok"] = r.ok
        else:
            out.update(_model_point(cfg, w, spec["rtl"]))
    except (ValueError, SnpuError) as e:
        out["problem"] = str(e).splitlines()[0]
    if out.get("cycles") and out.get("dense_cycles"):
        out["speedup"] = round(out["dense_cycles"] / out["cycles"], 4)
    return out


def _model_point(cfg: CoreConfig, w: dict, rtl: bool) -> dict:
    from snpu.compiler import runtime
    from snpu.compiler.pipeline import CompileOptions, compile_model

    sparse = compile_model(w["path"], CompileOptions(config=cfg, density=w["w_density"]))
    dense = compile_model(w["path"], CompileOptions(config=cfg, density=w["w_density"], dense=True))
    g = sparse.graph
    rng = np.random.default_rng(w["seed"])
    x = {i: rng.standard_normal(g.tensor(i).shape).astype(np.float32) for i in g.inputs}
    rs, rd = runtime.run(sparse, x), runtime.run(dense, x)
    out = {"cycles": rs.core_cycles, "dense_cycles": rd.core_cycles}
    if rtl:
        rr = runtime.run(sparse, x, sim="rtl")
        out["rtl_cycles"], out["rtl_ok"] = rr.core_cycles, True
    return out


def synth_point(spec: dict) -> dict:
    """One configuration's core, placed and routed (LUTs, Fmax)."""
    from snpu.rtl.core import Core

    from .synth import synthesize

    r = synthesize(Core(CoreConfig.from_dict(spec["config"])), device=spec["device"])
    return {k: r[k] for k in ("device", "luts", "ffs", "dsps", "brams", "fmax_mhz")}


# ----------------------------------------------------------------------------------------------
# The table, plots and page


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
    per_cfg: dict[str, list] = {}
    for r in rows:
        if r.get("luts") and r.get("cycles"):
            per_cfg.setdefault(label(r), [r["luts"], 0])[1] += r["cycles"]
    if per_cfg:
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
        ax.set_ylabel("golden cycles, all workloads")
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
