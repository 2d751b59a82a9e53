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
other result).  The table, plots and page are :mod:`snpu.sweep_report` (presentation: not
part of the code version that keys cached results).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np

from snpu.config import CoreConfig
from snpu.errors import SnpuError

FORMATS = ("direct", "stride")
#: the source that decides a point's result, and a configuration's synthesis (cache keys)
POINT_CODE = ("rtl", "verif", "compiler")
SYNTH_CODE = ("rtl", "verif/tb/synth.py")


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
                             nfmt="dense" if dense else "direct", wfmt=fmt, npacked=0,
                             mixed=int(fmt == "stride"),  # stride weights: the merge
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
