"""The compiler pipeline: every pass, in order, in one place.

    ONNX  -> load_onnx
          -> fold_constants      (Constant, ConstantOfShape, Shape arithmetic, weight transforms)
          -> remove_noops        (Dropout, Identity)
          -> [random_weights]    (option: seeded Kaiming-normal weights)
          -> fold_shuffle        (channel shuffles -> the weights of the convolutions reading them)
          -> fold_affine         (BatchNormalization, Mul/Add by channel vectors -> Affine,
                                  folded into the convolution before it)
          -> fuse_relu           (ReLU into the producer's requantisation)
          -> partition           (seed 004: core / host subgraphs)
          -> prune               (magnitude + group pruning of core weights)
          -> quantize            (calibration, int8 scales, per-channel weights)
          -> neurons             (the sparse processing unit's threshold / group pruning of
                                  every core layer's input, neuron densities)
          -> [parallelize]       (a tiled array: each layer's parts on the cores)
          -> split               (seed 002: operators whose operands exceed the on-chip
                                  memory become pieces; one core)
          -> allocate            (activation layouts in external memory, and on an array in
                                  the cores' local memories)
          -> [schedule]          (seed 002: key nodes, topological-order search on the cost
                                  model; one core)
          -> [place_parts]       (a tiled array: the parts' cores placed by the seed-003
                                  mapper on the traffic between them)
          -> codegen             (kernels -> ROM segments re-rolled into hardware loops,
                                  memory image; on an array codegen_mesh: one ROM per core,
                                  send / recv between them)

Each pass is a function ``Graph -> Graph`` (its options bound here).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from snpu.config import CoreConfig
from snpu.errors import CompileError
from snpu.verif.image import MemoryImage

from .artifact import Compiled
from .frontend import load_onnx
from .ir import Graph
from .memory import allocate
from .passes.codegen import codegen
from .passes.codegen_mesh import codegen_mesh
from .passes.parallelize import parallelize
from .passes.place_parts import place_parts
from .passes.fold_affine import fold_affine
from .passes.fold_shuffle import fold_shuffle
from .passes.fold_constants import fold_constants
from .passes.fuse_relu import fuse_relu
from .passes.neurons import NeuronOptions, neurons
from .passes.partition import partition
from .passes.prune import PruneOptions, prune
from .passes.quantize import quantize
from .passes.random_weights import random_weights
from .passes.schedule import ScheduleOptions, schedule
from .passes.split import split
from .passes.memory_budget import MemoryOptions, memory_budget
from .passes.remove_noops import remove_noops


@dataclass
class CompileOptions:
    config: CoreConfig = field(default_factory=CoreConfig)
    density: float = 1.0                 #: target weight density of pruned layers
    group_size: int = 0                  #: weight group pruning (0: off)
    group_small: float = 0.05            #: t5: a weight is small if |w| <= this * max |w| of its layer
    group_max_small: int = 0             #: t6: delete a group with more than this many small weights
    keep_dense: tuple[str, ...] = ()     #: layers (node names) not to prune
    random_weights: int | None = None    #: seed: substitute Kaiming-normal weights
    calibration: list | None = None      #: calibration inputs (default: seeded normal)
    calibration_count: int = 4
    calibration_seed: int = 0
    force_host: tuple[str, ...] = ()     #: nodes to run on the host
    dense: bool = False                  #: dense mode: no sparse skipping (speedup baseline)
    neurons: NeuronOptions = field(default_factory=NeuronOptions)  #: neuron threshold / groups
    loops: bool = True                   #: re-roll programs into hardware loops
    #: "size": the fewest ROM words; "speed": tokens for the most overlap between units
    #: (fewer cycles, more ROM words; :mod:`.emit`)
    optimize: str = "size"
    mesh: tuple[int, int] = (1, 1)       #: (width, height) of the tiled array
    unusable: tuple[tuple[int, int], ...] = ()  #: cores of the mesh not to use
    #: the array's external-memory ports (None: one per mesh column)
    memory_ports: int | None = None
    split: str = "auto"                  #: array: auto (cost model) / rows / channels / tiles / images / pipeline
    placement: str = "mapper"            #: array: mapper (seed 003) / row-major
    batch: int = 1                       #: the value of symbolic (dynamic) input dimensions
    schedule: ScheduleOptions = field(default_factory=ScheduleOptions)  #: program order
    #: split operators into pieces of at most this many operand bytes (None: the core's
    #: on-chip memory; 0: no splitting)
    split_threshold: int | None = None
    #: activations' fast-memory budget and the memory plan's knobs (seed 001)
    memory: MemoryOptions = field(default_factory=MemoryOptions)

    @property
    def array(self) -> bool:
        return tuple(self.mesh) != (1, 1) or bool(self.unusable)


def pipeline(options: CompileOptions, calibration: list, image: MemoryImage) -> list[tuple[str, Callable[[Graph], Graph]]]:
    if options.optimize not in ("size", "speed"):
        raise CompileError(f"optimize: {options.optimize!r} is not size or speed")
    overlap = options.optimize == "speed"
    if overlap and options.config.token_depth < 2:
        raise CompileError("--optimize speed keeps up to two tokens per channel in flight "
                           "(one per half of a double buffer): it needs token_depth >= 2, "
                           f"the core has {options.config.token_depth}")
    if overlap and options.array:
        raise CompileError("--optimize speed emits the tokens of one core's program; on a mesh "
                           "use --optimize size (the array's programs synchronise through "
                           "the network unit as well)")
    if options.array and options.memory.budget is not None:
        raise CompileError("--memory-budget plans the memory of one core; on a mesh the "
                           "activations live in the cores' local memories (use --mesh 1x1)")
    passes = [("fold_constants", fold_constants), ("remove_noops", remove_noops)]
    if options.random_weights is not None:
        passes.append(("random_weights", lambda g: random_weights(g, options.random_weights)))
    passes += [
        ("fold_shuffle", fold_shuffle),
        ("fold_affine", fold_affine),
        ("fuse_relu", fuse_relu),
        ("partition", lambda g: partition(g, force_host=set(options.force_host),
                                          config=options.config)),
        ("prune", lambda g: prune(g, PruneOptions(density=options.density,
                                                  group_size=options.group_size,
                                                  t5=options.group_small, t6=options.group_max_small,
                                                  keep_dense=frozenset(options.keep_dense)))),
        ("quantize", lambda g: quantize(g, calibration)),
        ("neurons", lambda g: neurons(g, options.neurons, calibration, options.config,
                                      dense=options.dense)),
    ]
    if options.array:
        passes += [
            ("parallelize", lambda g: parallelize(g, tuple(options.mesh), options.config,
                                                  tuple(options.unusable), options.split,
                                                  options.memory_ports)),
            ("allocate", lambda g: allocate(g, image, options.config.local_bytes)),
            ("place_parts", lambda g: place_parts(g, method=options.placement)),
            ("codegen", lambda g: codegen_mesh(g, options.config, image, options.dense,
                                               options.loops)),
        ]
    elif options.memory.budget is None:
        passes += [
            ("split", lambda g: split(g, options.config, options.split_threshold)),
            ("allocate", lambda g: allocate(g, image)),
            ("schedule", lambda g: schedule(g, options.schedule, options.config, image,
                                            options.dense)),
            ("codegen", lambda g: codegen(g, options.config, image, options.dense, options.loops,
                                          overlap)),
        ]
    else:  # a memory plan: orders are timed on a scratch allocation, then the plan places
        scratch = MemoryImage(1 << 16, growable=True)
        passes += [
            ("split", lambda g: split(g, options.config, options.split_threshold)),
            ("allocate", lambda g: allocate(g, scratch)),
            ("schedule", lambda g: schedule(g, options.schedule, options.config, scratch,
                                            options.dense)),
            ("memory_budget", lambda g: memory_budget(g, options.memory, options.config, image,
                                                      scratch, options.dense)),
            ("codegen", lambda g: codegen(g, options.config, image, options.dense, options.loops,
                                          overlap)),
        ]
    return passes


def compile_model(model, options: CompileOptions | None = None, *, progress=None) -> Compiled:
    """ONNX model (path or ModelProto) -> :class:`Compiled`."""
    options = options or CompileOptions()
    t0 = time.time()
    source = _model_bytes(model)
    graph = load_onnx(model, batch=options.batch)
    _check_node_options(graph, options)
    calibration = options.calibration
    if calibration is None:
        rng = np.random.default_rng(options.calibration_seed)
        shapes = {i: graph.tensor(i).shape for i in graph.inputs}
        calibration = [{i: rng.standard_normal(s).astype(np.float32) for i, s in shapes.items()}
                       for _ in range(options.calibration_count)]
    image = MemoryImage(1 << 16, growable=True)
    timings = {}
    passes = pipeline(options, calibration, image)
    with _no_cycle_collection():
        for k, (name, fn) in enumerate(passes):
            t = time.time()
            graph = fn(graph)
            timings[name] = round(time.time() - t, 3)
            if progress is not None:
                progress(k + 1, len(passes), name)
    image.trim()
    return Compiled(graph, image, graph.meta["layouts"], graph.meta["segments"], options.config,
                    _report(graph, options, timings, time.time() - t0), source)


@contextlib.contextmanager
def _no_cycle_collection():
    """Pause Python's cyclic garbage collector while the passes run.  Code generation makes
    about a million small objects (instructions, footprints, clock snapshots) that live
    until it ends; the collector's full passes over them took 15 % of vgg19's compile time
    (about 3 s of 21).  The passes make little cyclic garbage: vgg19's peak memory was
    the same with the collector paused or not (1.43 GB; 1.30 GB since loops keep only the
    tokens they may still read), and it is collected once at the end."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
            gc.collect()


def _check_node_options(g: Graph, options: CompileOptions) -> None:
    names = {n.name for n in g.nodes}
    for option, values in (("--host", options.force_host), ("--keep-dense", options.keep_dense)):
        for v in values:
            if v not in names:
                close = sorted(n for n in names if v.lower() in n.lower())[:5]
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                raise CompileError(f"{option} {v!r}: {g.name} has no node of that name{hint}")


def reference_graph(source, options: CompileOptions) -> Graph:
    """The float graph the compiled model approximates: the model after constant folding,
    no-op removal and (option) random weights, before fusion, pruning and quantisation.
    Exportable with :func:`.export.to_onnx` for onnxruntime."""
    g = remove_noops(fold_constants(load_onnx(source, batch=options.batch)))
    if options.random_weights is not None:
        g = random_weights(g, options.random_weights)
    return g


def _model_bytes(model) -> bytes | None:
    from pathlib import Path

    if isinstance(model, (str, Path)):
        try:
            return Path(model).read_bytes()
        except OSError:
            return None  # load_onnx reports the problem
    return model.SerializeToString()


def _report(g: Graph, options: CompileOptions, timings: dict, total: float) -> dict:
    layers = []
    segs = {n: s for s in g.meta["segments"] if s["kind"] == "core" for n in s["nodes"]}
    for n in g.nodes:
        entry = {"node": n.name, "op": n.op, "device": n.device}
        if n.device == "host" and n.meta.get("core_reason"):
            entry["why_host"] = n.meta["core_reason"]
        if n.name in segs and n.name in segs[n.name]["layers"]:
            entry.update(segs[n.name]["layers"][n.name])
        if "prune" in n.meta:
            entry["density_before_pruning"] = n.meta["prune"].get("density_before", n.meta["prune"]["density"])
        layers.append(entry)
    core = sum(1 for n in g.nodes if n.device == "core")
    return {
        "model": g.name, "compile_seconds": round(total, 3), "pass_seconds": timings,
        "ops_on_core": core, "ops_on_host": len(g.nodes) - core,
        "host_ops": sorted({n.op for n in g.nodes if n.device == "host"}),
        "segments": [{"kind": s["kind"], "nodes": len(s["nodes"]),
                      **({"instructions": s["instructions"], "token_nops": s["token_nops"],
                          "tokens": s["tokens"],
                          "dispatched_instructions": s["dispatched_instructions"],
                          **{k: s[k] for k in ("instructions_per_core", "noc") if k in s}}
                         if s["kind"] == "core" else {})} for s in g.meta["segments"]],
        **({"schedule": g.meta["schedule"]} if "schedule" in g.meta else {}),
        **({"split": g.meta["split"]} if "split" in g.meta else {}),
        **({"memory": g.meta["memory"]} if "memory" in g.meta else {}),
        **({"mesh": {**g.meta["mesh"], "local_tensors": g.meta.get("local", []),
                          "local_peak_bytes": g.meta.get("local_peak_bytes", 0)}}
           if "mesh" in g.meta else {}),
        "options": {"density": options.density, "group_size": options.group_size,
                    "random_weights": options.random_weights, "dense": options.dense,
                    "optimize": options.optimize, "batch": options.batch,
                    "neurons": dataclasses.asdict(options.neurons)},
        "layers": layers,
    }
