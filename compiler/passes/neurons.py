"""Pass: how each core layer's input neurons are made sparse (seed 000 claims 5 and 11).

The sparse processing unit in the LD path derives the neuron index while activations load:
a neuron is kept when ``|x| > threshold`` (claim 5) and, with group pruning, only if its
group survives: consecutive neurons are split into groups of ``group`` and a group is
deleted when more than ``t4`` of its neurons have ``|x| <= t3`` (claim 11).  This pass
decides the settings of every core Conv / Gemm / MatMul and records them in
``node.meta["neurons"]``, which the kernels program into ``ld.thresh`` /
``ld.group_log2`` / ``ld.group_t3`` / ``ld.group_t4`` and the int8 reference applies with
the same function (:func:`snpu.verif.index.sparse_unit_mask`, through
:func:`..int8_ref.neuron_mask`).

Groups are consecutive bytes of the neuron buffer.  The kernels load a layer's input in
rows of whole pixels (channels last), so a group is a block of ``group`` channels of one
pixel whenever the channel count is a multiple of ``group``; a layer whose channel count is
not keeps group pruning off and the report says why.  With ``threshold = 0`` and no groups
the index keeps every non-zero neuron and the numbers are those of the dense computation.

``neurons["density"]`` is the fraction of neurons kept over the calibration inputs: what
the kernels' cost model uses to choose between the two mixed-format paths.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from snpu.errors import CompileError

from snpu.config import CoreConfig

from ..int8_ref import neuron_mask
from ..kernels import conv_channel_chunk
from ..int8_ref import run as int8_run
from ..ir import Graph
from ..memory import hwc, view_source

#: group sizes the sparse processing unit supports (``ld.group_log2`` 1..3)
GROUP_SIZES = (2, 4, 8)
T3_MAX, T4_MAX, THRESHOLD_MAX = 127, 15, 127
MIXED_PATHS = ("auto", "expand", "merge")
#: calibration inputs the neuron densities are measured on (an estimate for the cost model)
DENSITY_SAMPLES = 2
MATRIX_OPS = ("Conv", "Gemm", "MatMul")


@dataclass(frozen=True)
class NeuronOptions:
    threshold: int = 0      #: keep |x| > threshold (int8 units)
    group: int = 0          #: group pruning: group size (0: off)
    t3: int = 0             #: a neuron is small if |x| <= t3
    t4: int = 0             #: a group is deleted when more than t4 of its neurons are small
    #: direct neurons x stride weights: "auto" (the cost model picks per layer), "expand"
    #: (stride -> direct, AND: claim 9) or "merge" (direct -> stride, merge: claim 10)
    mixed: str = "auto"

    def __post_init__(self) -> None:
        if self.mixed not in MIXED_PATHS:
            raise CompileError(f"--mixed-path {self.mixed!r}: one of {', '.join(MIXED_PATHS)}")
        if not 0 <= self.threshold <= THRESHOLD_MAX:
            raise CompileError(f"--neuron-threshold {self.threshold}: must be in 0..{THRESHOLD_MAX}")
        if self.group and self.group not in GROUP_SIZES:
            raise CompileError(f"--neuron-groups {self.group}: group sizes are "
                               f"{', '.join(map(str, GROUP_SIZES))} (0: off)")
        if not 0 <= self.t3 <= T3_MAX:
            raise CompileError(f"--t3 {self.t3}: must be in 0..{T3_MAX}")
        if not 0 <= self.t4 <= T4_MAX:
            raise CompileError(f"--t4 {self.t4}: must be in 0..{T4_MAX}")


def neurons(graph: Graph, options: NeuronOptions, calibration: list, config: CoreConfig, *,
            dense: bool = False) -> Graph:
    """Record ``node.meta["neurons"]`` for every core matrix layer (``None`` in dense mode:
    no index, every neuron multiplied)."""
    g = graph.copy()
    for n in g.nodes:
        if n.device != "core" or n.op not in MATRIX_OPS:
            continue
        if dense:
            n.meta["neurons"] = None
            continue
        channels = hwc(g.tensor(view_source(g, n.inputs[0])).shape)[2]
        group, why = None, None
        if options.group:
            if channels % options.group:
                why = (f"group pruning off: {channels} input channels are not a multiple of "
                       f"the group size {options.group}")
            elif n.op == "Conv" and not conv_channel_chunk(
                    channels, *n.meta["geometry"][:2], config.nbuf_bytes // 2, options.group):
                why = (f"group pruning off: no multiple of {options.group} channels fits half "
                       "the neuron buffer as patches")
            else:
                group = (options.group, options.t3, options.t4)
        n.meta["neurons"] = {"threshold": options.threshold, "group": group,
                             "group_off": why, "density": 1.0, "mixed": options.mixed}
    # the neurons kept on (the first two) calibration inputs, with the settings above in force
    kept: dict[str, list[float]] = {}
    for x in calibration[:DENSITY_SAMPLES]:
        vals = int8_run(g, x, keep=True)
        for n in g.nodes:
            s = n.meta.get("neurons")
            if s is not None:
                v = vals[n.inputs[0]]
                v = (v.transpose(0, 2, 3, 1) if v.ndim == 4 else v).reshape(-1)  # channels last
                kept.setdefault(n.name, []).append(float(neuron_mask(v, s).mean()) if v.size else 1.0)
    for n in g.nodes:
        if n.meta.get("neurons") is not None and kept.get(n.name):
            n.meta["neurons"]["density"] = round(float(np.mean(kept[n.name])), 4)
    return g
