"""Runtime: executes a compiled model, segment by segment.

Core segments run on the golden model or on the RTL against the shared external-memory
image; host segments run on onnxruntime (:mod:`.host`): they read model inputs and other
host segments' results as floats and what a core segment wrote from the image (dequantised
with its scale), and write the quantised results the core reads back to the image.  This
is seed 004's dispatch: the subgraphs go to their devices in dependency order; tensors pass
between core and host through memory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from snpu.errors import CompileError
from snpu.verif import golden

from .artifact import Compiled
from .host import dequantize_boundary, quantize_boundary, run_segment
from .memory import TensorLayout
from .passes.quantize import quantize_tensor


def _addresses(L: TensorLayout) -> np.ndarray:
    """Byte addresses of every element, [N, H, W, C]."""
    return (L.base + np.arange(L.n)[:, None, None, None] * L.image
            + np.arange(L.h)[None, :, None, None] * L.row
            + np.arange(L.w)[None, None, :, None] * L.pixel + np.arange(L.c)[None, None, None, :])


def read_tensor(image, L: TensorLayout, shape) -> np.ndarray:
    """int8 logical (NCHW, or [N, F] in C-H-W order for flattened views) values."""
    nhwc_vals = image.data[_addresses(L)].view(np.int8)
    return nhwc_vals.transpose(0, 3, 1, 2).reshape(shape)


def write_tensor(image, L: TensorLayout, value: np.ndarray) -> None:
    v = np.asarray(value, np.int8)
    if v.ndim != 4:
        v = v.reshape(L.n, -1, 1, 1)
    image.data[_addresses(L)] = v.transpose(0, 2, 3, 1).view(np.uint8)


@dataclass
class RunReport:
    outputs: dict[str, np.ndarray]          #: dequantised (float32)
    outputs_int8: dict[str, np.ndarray]
    core_cycles: int = 0
    mac_pairs: int = 0
    dense_pairs: int = 0
    segments: list[dict] = field(default_factory=list)
    wall_s: float = 0.0
    #: wall-clock seconds per device (core: the simulator; host: onnxruntime), per input
    device_seconds: dict[str, float] = field(default_factory=dict)


def run(compiled: Compiled, x, *, sim: str = "golden", check_races: bool = True,
        rtl_options: dict | None = None) -> RunReport:
    """Run one input (an array for a single-input model, or ``{name: array}``)."""
    return run_batch(compiled, [x], sim=sim, check_races=check_races, rtl_options=rtl_options)[0]


def run_batch(compiled: Compiled, xs: list, *, sim: str = "golden", check_races: bool = True,
              rtl_options: dict | None = None, progress=None) -> list[RunReport]:
    """Run several inputs; on the RTL every core segment runs for all inputs in one
    simulator process.  ``progress(done, total)`` is called as runs finish."""
    from .frontend import input_arrays

    if sim not in ("golden", "rtl"):
        raise CompileError(f"unknown simulator {sim!r} (golden or rtl)")
    g = compiled.graph
    t0 = time.time()
    images, floats = [], []
    for x in xs:
        image = compiled.image.copy_image()
        arrays = input_arrays(g, x)
        for name, a in arrays.items():
            if name in compiled.layouts:
                write_tensor(image, compiled.layouts[name], quantize_tensor(a, g.tensor(name).scale))
        images.append(image)
        floats.append(dict(arrays))
    reps = [RunReport({}, {}) for _ in xs]
    device_s = {"core": 0.0, "host": 0.0}
    total, done = len(compiled.segments) * len(xs), 0
    for k, seg in enumerate(compiled.segments):
        t_seg = time.time()
        if seg["kind"] == "core" and "roms" in seg:
            stats = _run_array(compiled, k, seg, images, sim, check_races, rtl_options)
            for rep, st in zip(reps, stats):
                rep.core_cycles += st["cycles"]
                rep.mac_pairs += st["pairs"]
                rep.dense_pairs += st["dense_pairs"]
                rep.segments.append({"segment": k, "device": "array", **st})
            done += len(images)
            if progress:
                progress(done, total)
        elif seg["kind"] == "core":
            words = compiled.rom(seg["rom"])
            if sim == "golden":
                stats = []
                for image in images:
                    res = golden.run_image(words, image, compiled.config, check_races=check_races)
                    image.data[:] = res.ext
                    stats.append((res.stats.cycles, res.stats.mac_pairs, res.stats.dense_pairs))
                    done += 1
                    if progress:
                        progress(done, total)
            else:
                from snpu.verif.tb import rtl_sim

                results = rtl_sim.run_many([rtl_sim.Job(words, im, seg["rom"]) for im in images],
                                           compiled.config, **(rtl_options or {}))
                stats = []
                for i, (image, r) in enumerate(zip(images, results)):
                    if not r.ok:
                        raise CompileError(f"segment {k} on the RTL, input {i}: finished="
                                           f"{r.finished} error={r.error} at ROM word "
                                           f"{r.error_pc}; {'; '.join(r.problems)}")
                    image.data[:] = r.ext
                    stats.append((r.cycles, r.counters["pairs"], r.counters["dense_pairs"]))
                if len(results) < len(images):
                    raise CompileError(f"segment {k} on the RTL: the simulation stopped after "
                                       f"{len(results)} of {len(images)} inputs")
                done += len(images)
                if progress:
                    progress(done, total)
            for rep, (cyc, pairs, dense) in zip(reps, stats):
                rep.core_cycles += cyc
                rep.mac_pairs += pairs
                rep.dense_pairs += dense
                rep.segments.append({"segment": k, "device": "core", "cycles": cyc,
                                     "instructions": len(words)})
        else:
            for image, fl, rep in zip(images, floats, reps):
                t = time.time()
                _run_host(compiled, seg["nodes"], image, fl)
                rep.segments.append({"segment": k, "device": "host", "nodes": len(seg["nodes"]),
                                     "seconds": round(time.time() - t, 6)})
                done += 1
                if progress:
                    progress(done, total)
        device_s["host" if seg["kind"] == "host" else "core"] += time.time() - t_seg
    wall = (time.time() - t0) / max(1, len(xs))
    for image, fl, rep in zip(images, floats, reps):
        for o in g.outputs:
            if o in fl:  # produced by the host
                rep.outputs[o] = np.asarray(fl[o])
                rep.outputs_int8[o] = quantize_boundary(g, o, fl[o])
            else:
                q = read_tensor(image, compiled.layouts[o], g.tensor(o).shape)
                rep.outputs_int8[o] = q
                rep.outputs[o] = q.astype(np.float32) * np.float32(g.tensor(o).scale)
        rep.wall_s = wall
        rep.device_seconds = {d: round(s / max(1, len(xs)), 6) for d, s in device_s.items()}
    return reps


def _core_key(xy) -> str:
    return f"{xy[0]},{xy[1]}"


def _run_array(compiled: Compiled, k: int, seg: dict, images: list, sim: str,
               check_races: bool, rtl_options: dict | None) -> list[dict]:
    """An array segment (one ROM per core) on every image; each image's memory is updated.
    Returns per image: cycles (to the last core's halt), MAC pairs, per-core cycles and
    utilisation (busy cycles of the matrix unit / array cycles), NoC flits."""
    mesh = tuple(seg["mesh"])
    roms = {}
    for key, region in seg["roms"].items():
        x, y = (int(v) for v in key.split("_"))
        roms[(x, y)] = (compiled.rom(region), region)
    out = []
    if sim == "golden":
        from snpu.verif.mesh import run_mesh

        for image in images:
            protect = [(r.addr, r.end) for r in image.regions.values() if r.kind == "rom"]
            res = run_mesh({xy: w for xy, (w, _) in roms.items()}, image.data, compiled.config,
                           mesh=mesh, protect=protect, check_races=check_races)
            image.data[:] = res.ext
            cores = {_core_key(xy): {"cycles": c.stats.cycles, "mac_pairs": c.stats.mac_pairs,
                                     "mx_busy": c.stats.busy["MX"],
                                     "dram_bytes": c.stats.dma_read_bytes + c.stats.dma_write_bytes
                                     + c.stats.fetch_bytes,
                                     "noc_bytes_sent": c.stats.net_bytes_sent}
                     for xy, c in res.cores.items()}
            out.append({"cycles": res.cycles,
                        "pairs": sum(c.stats.mac_pairs for c in res.cores.values()),
                        "dense_pairs": sum(c.stats.dense_pairs for c in res.cores.values()),
                        "cores": cores, "network": res.network})
        return out
    from snpu.verif.tb import rtl_sim

    results = rtl_sim.run_many([rtl_sim.ArrayJob(roms, im, mesh) for im in images],
                               compiled.config, mesh=mesh, **(rtl_options or {}))
    for i, (image, r) in enumerate(zip(images, results)):
        if not r.ok:
            bad = {c: (v["error"], v["error_pc"]) for c, v in r.cores.items() if v["error"] != "NONE"}
            raise CompileError(f"segment {k} on the RTL array, input {i}: finished={r.finished} "
                               f"faults={bad or 'none'}; {'; '.join(r.problems)}")
        image.data[:] = r.ext
        out.append({"cycles": r.cycles,
                    "pairs": sum(c["counters"].get("pairs", 0) for c in r.cores.values()),
                    "dense_pairs": sum(c["counters"].get("dense_pairs", 0) for c in r.cores.values()),
                    "cores": {c: {"cycles": v["counters"].get("cycles", 0),
                                  "mac_pairs": v["counters"].get("pairs", 0),
                                  "mx_busy": v["counters"].get("mx_busy", 0),
                                  "dram_bytes": v["counters"].get("dma_read_bytes", 0)
                                  + v["counters"].get("dma_write_bytes", 0)}
                              for c, v in r.cores.items()},
                    "network": r.network, "golden_cycles": r.golden_cycles})
    if len(results) < len(images):
        raise CompileError(f"segment {k} on the RTL array: the simulation stopped after "
                           f"{len(results)} of {len(images)} inputs")
    return out


def _run_host(compiled: Compiled, names: list[str], image, floats: dict) -> None:
    """Host segment on onnxruntime: inputs from ``floats`` (model inputs, host results) or
    from memory (what the core wrote, dequantised); results into ``floats`` and, where the
    core reads them, quantised into memory."""
    g = compiled.graph

    def fetch(t):
        if t in floats:
            return floats[t]
        return dequantize_boundary(g, t, read_tensor(image, compiled.layouts[t], g.tensor(t).shape))

    def store(t, v):
        floats[t] = v
        if t in compiled.layouts:
            write_tensor(image, compiled.layouts[t], quantize_boundary(g, t, v))

    run_segment(g, names, fetch, store)
