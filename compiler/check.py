"""Agreement of a compiled model's runs with its references.

* **bit-exact**: the run's int8 outputs against :mod:`.int8_ref` (the int8 semantics computed
  from the quantised IR, independent of instruction selection, tiling and memory layout);
* **float**: the dequantised outputs against onnxruntime on the float model the compiled
  model approximates (:func:`.pipeline.reference_graph`: the source model, with the same
  random weights when they were substituted).  Reports top-1 agreement, max abs error and
  the error relative to the largest |reference output|; differences come from pruning and int8
  quantisation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import int8_ref
from .artifact import Compiled
from .frontend import input_arrays
from .runtime import RunReport


@dataclass
class Agreement:
    inputs: int = 0
    bit_exact: int = 0                       #: runs equal to the int8 reference
    mismatches: list[str] = field(default_factory=list)
    onnxruntime: bool = False                #: whether the float comparison ran
    images: int = 0                          #: images compared (a batched input has several)
    top1_agree: int = 0                      #: images whose top-1 matches onnxruntime's
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0                 #: max abs error / max |reference output|
    reference_top1: list[int] = field(default_factory=list)
    run_top1: list[int] = field(default_factory=list)
    note: str = ""

    def to_dict(self) -> dict:
        d = {"inputs": self.inputs, "bit_exact_vs_int8_reference": self.bit_exact,
             "mismatches": self.mismatches}
        if self.onnxruntime:
            d.update({"top1_agreement_vs_onnxruntime": self.top1_agree / max(1, self.images),
                      "max_abs_err_vs_onnxruntime": self.max_abs_err,
                      "max_rel_err_vs_onnxruntime": self.max_rel_err})
        if self.note:
            d["note"] = self.note
        return d


def top1(y: np.ndarray) -> int:
    return int(np.argmax(np.asarray(y).reshape(-1)))


def top1_per_image(y: np.ndarray) -> list[int]:
    """Top-1 of every image of a batched output ([N, ...] with N > 1), else of the whole."""
    y = np.asarray(y)
    if y.ndim >= 2 and y.shape[0] > 1:
        return [int(v) for v in np.argmax(y.reshape(y.shape[0], -1), axis=1)]
    return [top1(y)]


def compare(compiled: Compiled, xs: list, reports: list[RunReport], *,
            onnxruntime: bool = True) -> Agreement:
    g = compiled.graph
    out = g.outputs[0]
    a = Agreement(inputs=len(xs))
    for k, (x, rep) in enumerate(zip(xs, reports)):
        ref = int8_ref.run(g, x)
        bad = [o for o in ref if not np.array_equal(rep.outputs_int8[o], ref[o])]
        if bad:
            n = int(np.count_nonzero(rep.outputs_int8[bad[0]] != ref[bad[0]]))
            a.mismatches.append(f"input {k}: {bad[0]} differs from the int8 reference in {n} elements")
        else:
            a.bit_exact += 1
        a.run_top1.extend(top1_per_image(rep.outputs[out]))
    if not onnxruntime:
        return a
    if compiled.source is None:
        a.note = "no source.onnx in the compiled model: onnxruntime comparison skipped"
        return a
    from .export import onnxruntime_run, to_onnx
    from .pipeline import CompileOptions, reference_graph

    opts = compiled.report.get("options", {})
    rg = reference_graph(compiled.source, CompileOptions(random_weights=opts.get("random_weights"),
                                                         batch=opts.get("batch", 1)))
    model = to_onnx(rg)
    a.onnxruntime = True
    for x, rep in zip(xs, reports):
        want = onnxruntime_run(model, input_arrays(rg, x))[out]
        got = rep.outputs[out].reshape(want.shape)
        err = float(np.abs(got - want).max())
        a.max_abs_err = max(a.max_abs_err, err)
        a.max_rel_err = max(a.max_rel_err, err / max(float(np.abs(want).max()), 1e-12))
        ref1, got1 = top1_per_image(want), top1_per_image(got)
        a.reference_top1.extend(ref1)
        a.images += len(ref1)
        a.top1_agree += sum(int(r == t) for r, t in zip(ref1, got1))
    return a
