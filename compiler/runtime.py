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
from snpu.verif import golden, timing

from .artifact import Compiled
from .host import dequantize_boundary, quantize_boundary, run_segment
from .host import program as host_program
from .memory import TensorLayout
from .passes.quantize import quantize_tensor


def read_tensor(image, L: TensorLayout, shape) -> np.ndarray:
    """int8 logical (NCHW, or [N, F] in C-H-W order for flattened views) values."""
    nhwc_vals = image.data[L.addresses()].view(np.int8)
    return nhwc_vals.transpose(0, 3, 1, 2).reshape(shape)


def write_tensor(image, L: TensorLayout, value: np.ndarray) -> None:
    """Write int8 logical values at ``L``; where ``L`` has a halo, its channels of the border
    are written as zeros too (the bytes may have held another tensor: a memory plan's
    arena)."""
    v = np.asarray(value, np.int8)
    if v.ndim != 4:
        v = v.reshape(L.n, -1, 1, 1)
    if L.pad_h or L.pad_w:
        image.data[L.padded().addresses()] = 0
    image.data[L.addresses()] = v.transpose(0, 2, 3, 1).view(np.uint8)


@dataclass
class RunReport:
    outputs: dict[str, np.ndarray]          #: dequantised (float32)
    outputs_int8: dict[str, np.ndarray]
    core_cycles: int = 0
    mac_pairs: int = 0
    dense_pairs: int = 0
    segments: list[dict] = field(default_factory=list)
    wall_s: float = 0.0
    #: busy seconds per device (core: the simulator; host: onnxruntime), per input
    device_seconds: dict[str, float] = field(default_factory=dict)
    #: how the batch was dispatched: pipelined across devices or segment by segment, the
    #: batch's wall time and each device's busy time (the overlap is their sum over the wall)
    dispatch: dict = field(default_factory=dict)


def run(compiled: Compiled, x, *, sim: str = "golden", check_races: bool = True,
        rtl_options: dict | None = None) -> RunReport:
    """Run one input (an array for a single-input model, or ``{name: array}``)."""
    return run_batch(compiled, [x], sim=sim, check_races=check_races, rtl_options=rtl_options)[0]


#: pipeline a batch across core and host when the less busy device works at least this
#: fraction of the busier one's time (the pipelining bound is then >= 1 + this)
OVERLAP_WORTH = 0.2


def run_batch(compiled: Compiled, xs: list, *, sim: str = "golden", check_races: bool = True,
              rtl_options: dict | None = None, progress=None,
              overlap: bool | None = None) -> list[RunReport]:
    """Run several inputs (seed 004's dispatch: every input's subgraphs go to their devices
    in dependency order).  ``progress(done, total)`` is called as runs finish.

    On the RTL each core segment runs for all inputs in one simulator process (segment by
    segment).  On the golden model, with both kinds of segment, the inputs can be
    pipelined across the two devices: each input advances through its segments on its own
    thread, the core and the host each run one segment at a time, so the host works on
    input i+1 while the core runs input i (onnxruntime releases the interpreter lock).
    ``overlap``: True pipelines, False runs segment by segment, None (default) decides where
    it helps: the first input runs alone and the rest are pipelined when the less busy
    device was busy at least :data:`OVERLAP_WORTH` of the busier one's time.
    ``RunReport.device_seconds`` gives each device's busy time per input, ``dispatch`` the
    mode and the batch's wall time.
    """
    import threading

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
    for seg in compiled.segments:  # onnxruntime sessions built before the timed runs
        if seg["kind"] == "host":
            host_program(g, seg["nodes"]).prepare()
    # far memory (a memory plan's swaps): the image's far region, timed as the plan assumed
    far = (compiled.report.get("memory") or {}).get("far_memory") or {}
    busy = {"core": 0.0, "host": 0.0}
    total = len(compiled.segments) * len(xs)
    count = {"done": 0}
    tally = threading.Lock()

    def finished(n: int, device: str, seconds: float) -> None:
        with tally:
            busy[device] += seconds
            count["done"] += n
            if progress:
                progress(count["done"], total)

    def run_segment(k: int, seg: dict, which: list[int]) -> None:
        """Segment ``k`` for the inputs ``which``."""
        t = time.time()
        ims = [images[i] for i in which]
        if seg["kind"] == "host":
            for i in which:
                ts = time.time()
                _run_host(compiled, seg["nodes"], images[i], floats[i])
                reps[i].segments.append({"segment": k, "device": "host", "nodes": len(seg["nodes"]),
                                         "seconds": round(time.time() - ts, 6)})
            finished(len(which), "host", time.time() - t)
            return
        if "roms" in seg:
            for i, st in zip(which, _run_array(compiled, k, seg, ims, sim, check_races, rtl_options)):
                reps[i].core_cycles += st["cycles"]
                reps[i].mac_pairs += st["pairs"]
                reps[i].dense_pairs += st["dense_pairs"]
                reps[i].segments.append({"segment": k, "device": "array", **st})
            finished(len(which), "core", time.time() - t)
            return
        words = compiled.rom(seg["rom"])
        stats = []
        if sim == "golden":
            for image in ims:
                res = golden.run_image(words, image, compiled.config, check_races=check_races,
                                       far=timing.FarMemory.of_image(image, **far))
                image.data[:] = res.ext
                stats.append((res.stats.cycles, res.stats.mac_pairs, res.stats.dense_pairs))
        else:
            from snpu.verif.tb import rtl_sim

            results = rtl_sim.run_many([rtl_sim.Job(words, im, seg["rom"]) for im in ims],
                                       compiled.config, **{"far": far, **(rtl_options or {})})
            for i, image, r in zip(which, ims, results):
                if not r.ok:
                    raise CompileError(f"segment {k} on the RTL, input {i}: finished="
                                       f"{r.finished} error={r.error} at ROM word "
                                       f"{r.error_pc}; {'; '.join(r.problems)}")
                image.data[:] = r.ext
                stats.append((r.cycles, r.counters["pairs"], r.counters["dense_pairs"]))
            if len(results) < len(ims):
                raise CompileError(f"segment {k} on the RTL: the simulation stopped after "
                                   f"{len(results)} of {len(ims)} inputs")
        for i, (cyc, pairs, dense) in zip(which, stats):
            reps[i].core_cycles += cyc
            reps[i].mac_pairs += pairs
            reps[i].dense_pairs += dense
            reps[i].segments.append({"segment": k, "device": "core", "cycles": cyc,
                                     "instructions": len(words)})
        finished(len(which), "core", time.time() - t)

    def pipeline(which: list[int]) -> None:
        device_lock = {"core": threading.Lock(), "host": threading.Lock()}
        errors: list[BaseException] = []

        def one_input(i: int) -> None:
            try:
                for k, seg in enumerate(compiled.segments):
                    if errors:
                        return
                    with device_lock["host" if seg["kind"] == "host" else "core"]:
                        run_segment(k, seg, [i])
            except BaseException as e:  # re-raised in the caller's thread
                errors.append(e)

        threads = [threading.Thread(target=one_input, args=(i,), daemon=True) for i in which]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if errors:
            raise errors[0]

    def segment_by_segment(which: list[int]) -> None:
        for k, seg in enumerate(compiled.segments):
            run_segment(k, seg, which)

    kinds = {s["kind"] for s in compiled.segments}
    can_pipeline = sim == "golden" and len(xs) > 1 and kinds == {"core", "host"}
    everyone = list(range(len(xs)))
    pipelined = False
    if not can_pipeline or overlap is False:
        segment_by_segment(everyone)
    elif overlap:
        pipelined = True
        pipeline(everyone)
    else:  # where it helps: judge by the first input's busy times
        segment_by_segment([0])
        pipelined = min(busy.values()) >= OVERLAP_WORTH * max(busy.values())
        (pipeline if pipelined else segment_by_segment)(everyone[1:])
    elapsed = time.time() - t0
    wall = elapsed / max(1, len(xs))
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
        rep.device_seconds = {d: round(s / max(1, len(xs)), 6) for d, s in busy.items()}
        rep.dispatch = {"pipelined": pipelined, "inputs": len(xs), "wall_seconds": round(elapsed, 6),
                        "busy_seconds": {d: round(s, 6) for d, s in busy.items()}}
    return reps


def _core_key(xy) -> str:
    return f"{xy[0]},{xy[1]}"


def _run_array(compiled: Compiled, k: int, seg: dict, images: list, sim: str,
               check_races: bool, rtl_options: dict | None) -> list[dict]:
    """An array segment (one ROM per core) on every image; each image's memory is updated.
    Returns per image: cycles (to the last core's halt), MAC pairs, per-core cycles and
    utilisation (busy cycles of the matrix unit / array cycles), NoC flits."""
    mesh = tuple(seg["mesh"])
    ports = seg.get("memory_ports")  # None (older artifacts): one per column
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
                           mesh=mesh, protect=protect, check_races=check_races,
                           memory_ports=ports)
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
                        "cores": cores, "network": res.network,
                        # bytes through the external-memory ports (local memory excluded)
                        "port_bytes": [(r + wr) * compiled.config.axi_data_bits // 8
                                       for r, wr in res.port_beats]})
        return out
    from snpu.verif.tb import rtl_sim

    results = rtl_sim.run_many([rtl_sim.ArrayJob(roms, im, mesh, memory_ports=ports)
                                for im in images],
                               compiled.config, mesh=mesh, memory_ports=ports,
                               **(rtl_options or {}))
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
