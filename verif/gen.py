"""Seeded random generators of test cases (the RTL is checked against the golden model on them).

Every generator takes a ``numpy.random.Generator``; tests build it from a printed seed so a
failure can be replayed exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from snpu.config import CoreConfig

from . import index as ix
from . import isa, layout

FORMAT_CODE = {"dense": 0, "direct": 1, "stride": 2}


@dataclass
class FcCase:
    """The on-chip state right before one ``fc`` and the instruction itself."""

    config: CoreConfig
    nbuf: np.ndarray
    nidx: np.ndarray
    wbuf: np.ndarray  #: [lanes, bytes]
    widx: np.ndarray  #: [lanes, bytes]
    regs: dict[str, int]
    instr: isa.Instr
    x: np.ndarray  #: int8 [nvec, n_in], the neurons before thresholding
    w: np.ndarray  #: int8 [rows, n_in], zero where pruned
    meta: dict = field(default_factory=dict)

    def golden(self) -> np.ndarray:
        """acc after the fc, from the golden model (all other acc words zero)."""
        from .golden import Machine

        m = Machine(self.config, np.zeros(64, np.uint8))
        m.nbuf[:], m.nidx[:], m.wbuf[:], m.widx[:] = self.nbuf, self.nidx, self.wbuf, self.widx
        m.regs.update(self.regs)
        m.execute(self.instr)
        self.meta["pairs"] = m.stats.mac_pairs
        return m.acc.copy()


def sparse_int8(rng: np.random.Generator, shape, density: float) -> np.ndarray:
    x = rng.integers(-128, 128, shape).astype(np.int8)
    x[x == 0] = 1
    x[rng.random(shape) >= density] = 0
    return x


def random_fc_case(rng: np.random.Generator, config: CoreConfig, *, nfmt: str, wfmt: str,
                   npacked: int = 0, mixed: int = 0, n_in: int | None = None,
                   rows: int | None = None, nvec: int | None = None,
                   n_density: float | None = None, w_density: float | None = None,
                   thresh: int | None = None, weights: np.ndarray | None = None) -> FcCase:
    """A random fc whose neuron and weight data fit ``config``'s buffers.

    ``weights`` (int8, ``rows x n_in``), if given, replaces the random weights (and sets
    ``rows`` and ``n_in``)."""
    c = config
    P = c.lanes
    if weights is not None:
        rows, n_in = weights.shape
    n_in = int(rng.integers(1, 300)) if n_in is None else n_in
    rows = int(rng.integers(1, 3 * P + 2)) if rows is None else rows
    nvec = int(rng.integers(1, 4)) if nvec is None else nvec
    n_density = float(rng.choice([0.0, 0.05, 0.3, 0.7, 1.0])) if n_density is None else n_density
    w_density = float(rng.choice([0.0, 0.05, 0.3, 0.7, 1.0])) if w_density is None else w_density
    thresh = int(rng.integers(0, 20)) if thresh is None else thresh
    x = sparse_int8(rng, (nvec, n_in), n_density)
    w = sparse_int8(rng, (rows, n_in), w_density) if weights is None else weights.astype(np.int8)
    if nfmt == "dense":
        npacked = 0

    # Neurons: vector v at nbuf v*nstride; its index at nidx v*nidx_stride.
    nmask = np.ones_like(x, bool) if nfmt == "dense" else ix.threshold(x, thresh)
    nbuf = np.zeros(c.nbuf_bytes, np.uint8)
    nidx = np.zeros(c.nidx_bytes, np.uint8)
    nstride = -(-n_in // 64) * 64
    if nfmt == "direct" and not npacked:
        # as written by the sparse processing unit: bit a of nidx describes nbuf[a]
        nidx_stride = nstride // 8
    else:
        enc = [ix.encode_direct(m, 64) if nfmt == "direct" else
               ix.encode_stride(ix.direct_to_stride(m)) for m in nmask] if nfmt != "dense" else []
        nidx_stride = -(-max((len(e) for e in enc), default=0) // 8) * 8
    for v in range(nvec):
        vals = x[v][nmask[v]] if npacked else x[v]
        nbuf[v * nstride:v * nstride + vals.size] = vals.view(np.uint8)
        if nfmt == "direct" and not npacked:
            raw = ix.encode_direct(nmask[v], 8)
            nidx[v * nidx_stride:v * nidx_stride + len(raw)] = np.frombuffer(raw, np.uint8)
        elif nfmt != "dense":
            nidx[v * nidx_stride:v * nidx_stride + len(enc[v])] = np.frombuffer(enc[v], np.uint8)
    if nvec * nstride > c.nbuf_bytes or nvec * nidx_stride > c.nidx_bytes:
        raise ValueError("case does not fit the neuron buffers; use a bigger config")

    # Weights: one bank per lane.
    wbase, ibase = 8 * int(rng.integers(0, 4)), 8 * int(rng.integers(0, 4))
    banks = layout.encode_weight_tile(w, wfmt, P, 64)
    wbuf = np.zeros((P, c.wbuf_bytes), np.uint8)
    widx = np.zeros((P, c.widx_bytes), np.uint8)
    for g, b in enumerate(banks):
        if wbase + len(b.wbuf) > c.wbuf_bytes or ibase + len(b.widx) > c.widx_bytes:
            raise ValueError("case does not fit the weight banks; use a bigger config")
        wbuf[g, wbase:wbase + len(b.wbuf)] = np.frombuffer(b.wbuf, np.uint8)
        widx[g, ibase:ibase + len(b.widx)] = np.frombuffer(b.widx, np.uint8)
    acc_stride = -(-rows // P) * P
    regs = {"mx.nfmt": FORMAT_CODE[nfmt], "mx.npacked": npacked, "mx.wfmt": FORMAT_CODE[wfmt],
            "mx.nvec": nvec, "mx.nstride": nstride, "mx.nidx_stride": nidx_stride,
            "mx.acc_stride": acc_stride, "mx.mixed": mixed}
    instr = isa.make("fc", nbuf=0, nidx=0, wbuf=wbase, widx=ibase, acc=0, n_in=n_in, rows=rows)
    return FcCase(c, nbuf, nidx, wbuf, widx, regs, instr, x, w,
                  {"nfmt": nfmt, "wfmt": wfmt, "npacked": npacked, "mixed": mixed,
                   "thresh": thresh})
