"""The compiler's cost model (seed 002): how many cycles a core program takes, estimated at
compile time, without activations.

The estimate *is* the golden model's timing with one difference.  The golden model's
scheduler (:class:`~snpu.verif.core_model.Scheduler`: in-order dispatch into the unit
queues, dependency tokens, the shared memory bus, the instruction cache) runs the compiled
instructions on an :class:`EstimatingMachine`, which executes ``ld`` / ``st`` / VX
instructions as the golden model does (their cycles depend on shapes and on the weights,
which are in the memory image) and times each ``fc`` from its decoded weight tile and the
*density* of its layer's input neurons, measured on the calibration inputs by
:mod:`.passes.neurons`, instead of the activations themselves (which exist only at run
time).  Per (vector, row) that is :func:`~snpu.verif.timing.fc_row_cycles_estimate`: the
expected cycles with each neuron kept independently with that probability.  Stores write
nothing, so the image is only read and candidate programs can be timed one after another
against it.

What the estimate misses: clustering of the zero activations (the real pairs per chunk are
not Poisson) and value-dependent thresholds.  ``bench/schedule.py`` reports its error
against the golden model run on real inputs, which ``bench/core_perf.py`` calibrates
against the RTL.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from snpu.config import CoreConfig
from snpu.errors import ExecutionError, IndexFormatError
from snpu.verif import index as ix
from snpu.verif import timing
from snpu.verif.core_model import Machine, Scheduler, _Exec
from snpu.verif.isa import Instr


class EstimatingMachine(Machine):
    """The golden model's machine with ``fc`` timed from densities (module docstring) and
    stores that leave memory unchanged.  ``density(pc)`` is the neuron density of the layer
    the instruction at ROM word ``pc`` belongs to."""

    def __init__(self, config: CoreConfig, ext: np.ndarray, density: Callable[[int], float],
                 far: timing.FarMemory | None = None):
        super().__init__(config, ext, far=far)
        self.density = density

    def _mem_write(self, addrs, data, op, fault):
        return []

    # the compiler's programs passed the golden model's checks; timing them needs none
    @staticmethod
    def _check_unique(addrs, what):
        return None

    def _fc(self, i: Instr) -> _Exec:
        c, r = self.config, self.regs
        nvec = r["mx.nvec"]
        if nvec == 0 or i.rows == 0:
            return _Exec(timing.FC_PIPELINE, [])
        nfmt, wfmt = ix.FORMATS[r["mx.nfmt"]], ix.FORMATS[r["mx.wfmt"]]
        d = 1.0 if nfmt == "dense" else float(self.density(self.pc))
        kept = self._weights(i, wfmt).mask.astype(np.float64)  # [rows, n_in]
        # where the neurons can be non-zero at all: the loaded (not padding) positions
        self._nbuf_span, self._nidx_span = [], []
        try:
            present = np.stack([self._neurons(i, v, nfmt, bool(r["mx.npacked"]))[1]
                                for v in range(nvec)]).astype(np.float64)  # [nvec, n_in]
        except IndexFormatError:
            present = np.ones((nvec, i.n_in))
        merge = (nfmt == "stride" and wfmt == "stride") or (
            r["mx.mixed"] and {nfmt, wfmt} == {"direct", "stride"})
        if merge:
            pairs = d * (present @ kept.T)
            n_entries = d * present.sum(axis=1)
            rows = n_entries[:, None] + kept.sum(axis=1)[None, :] - pairs + 1 \
                + timing.FC_ROW_OVERHEAD
        else:
            B = c.chunk_bits
            pad = (-i.n_in) % B
            nch = (i.n_in + pad) // B
            pc = np.pad(present, ((0, 0), (0, pad))).reshape(nvec, nch, B)
            kc = np.pad(kept, ((0, 0), (0, pad))).reshape(i.rows, nch, B)
            lam = d * np.einsum("vkb,rkb->vrk", pc, kc)  # expected pairs per chunk
            rows = (lam + np.exp(-lam)).sum(axis=2) + timing.FC_ROW_OVERHEAD
            if nfmt == "stride":  # expanded (claim 9; stride weights take the merge)
                rows = timing.fc_row_cycles_expand(rows, nch, d * present.sum(axis=1),
                                                   c.lanes)
            else:
                rows = np.maximum(rows, timing.FC_ROW_MIN)
        cycles = timing.fc_lane_cycles(rows, c.lanes).max()
        return _Exec(int(round(cycles)) + timing.FC_PIPELINE, [])


def estimate(instrs: Sequence[Instr], ext: np.ndarray, config: CoreConfig,
             density: Callable[[int], float],
             far: timing.FarMemory | None = None) -> tuple[int, dict[str, int]]:
    """Estimated cycles of the unrolled program ``instrs`` (ending in ``halt``) against the
    memory image ``ext`` (read only), and the busy cycles of each unit; ``far``: addresses
    timed as far memory."""
    m = EstimatingMachine(config, ext, density, far)
    s = Scheduler(list(instrs), m, check_races=False)
    t = 0
    while not s.halted:
        s.advance(t)
        if s.halted:
            break
        nxt = s.next_event()
        if nxt is None:
            raise ExecutionError(f"cost model: the program blocks at cycle {t}: "
                                 f"{s.blocked_report()}")
        t = nxt
    return s.time, dict(m.stats.busy)


def layer_density(tags: Sequence, densities: dict) -> Callable[[int], float]:
    """``density(pc)`` for :class:`EstimatingMachine` from a program's per-instruction
    tags (layer names) and each layer's neuron density (1.0 when unknown)."""
    return lambda pc: densities.get(tags[pc], 1.0) if pc < len(tags) else 1.0
