"""Example: one sparse fully connected layer as a hand-built snpu program.

    python examples/sparse_fc.py OUTDIR

writes ``OUTDIR/sparse_fc.s`` (assembly), ``OUTDIR/mem.bin`` + ``mem.json`` (external memory
and its manifest) and ``OUTDIR/expected.npz`` (the output computed with plain numpy).  Then

    snpu asm OUTDIR/sparse_fc.s -o OUTDIR/sparse_fc.hex
    snpu sim OUTDIR/sparse_fc.hex --mem OUTDIR/mem.bin --expect OUTDIR/expected.npz

runs it on the golden model and checks it bit for bit.  The layer is
``y = ReLU(requant(W x + b))`` with W 64x256 int8 pruned to 25 % density (direct index) and
an input with ReLU zeros that the sparse processing unit thresholds at load time.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np

from snpu.config import CoreConfig
from snpu.fileio import atomic_write
from snpu.verif import layout, numerics
from snpu.verif.asm import format_instr
from snpu.verif.image import MemoryImage
from snpu.verif.isa import Unit, make

N_IN, N_OUT, DENSITY, SEED = 256, 64, 0.25, 2024


def build(outdir: Path, cfg: CoreConfig = CoreConfig()) -> None:
    rng = np.random.default_rng(SEED)
    P = cfg.lanes
    x = np.maximum(rng.integers(-100, 100, N_IN), 0).astype(np.int8)  # ReLU output: ~50 % zeros
    w = rng.integers(-127, 128, (N_OUT, N_IN)).astype(np.int8)
    w[rng.random(w.shape) > DENSITY] = 0  # magnitude-free random pruning, 25 % kept
    bias = rng.integers(-2000, 2000, N_OUT)
    mult = rng.integers(8000, 16000, N_OUT)
    shift = np.full(N_OUT, 22)

    banks = layout.encode_weight_tile(w, "direct", P, cfg.chunk_bits)
    img = MemoryImage(1 << 16)
    img.add_region("rom", 0, 0x1000, "rom")
    img.alloc("x", N_IN, "input", "int8", (N_IN,))
    for g, b in enumerate(banks):
        img.alloc(f"wbuf{g}", max(len(b.wbuf), 1), "weights")
        img.write(f"wbuf{g}", np.frombuffer(b.wbuf, np.uint8))
        img.alloc(f"widx{g}", max(len(b.widx), 1), "weights")
        img.write(f"widx{g}", np.frombuffer(b.widx, np.uint8))
    params = numerics.pack_params(bias, mult, shift)
    img.alloc("params", params.size, "params")
    img.write("params", params)
    img.alloc("y", N_OUT, "output", "int8", (N_OUT,))
    img.write("x", x)

    R = img.regions
    prog = [
        "; sparse FC 256 -> 64, weights 25 % dense (direct index), input thresholded at load",
        make("cfg", reg="ld.nidx_mode", value=1),
        make("cfg", reg="ld.thresh", value=0),
        make("ld", buf="nbuf", ext=R["x"].addr, dst=0, cols=N_IN),
    ]
    for g, b in enumerate(banks):  # row r of W lives in lane r % P
        prog.append(make("ld", buf="wbuf", lane=g, ext=R[f"wbuf{g}"].addr, dst=0, cols=len(b.wbuf)))
        prog.append(make("ld", buf="widx", lane=g, ext=R[f"widx{g}"].addr, dst=0, cols=len(b.widx)))
    prog += [
        make("ld", buf="param", ext=R["params"].addr, dst=0, cols=params.size, signal=[Unit.MX]),
        make("cfg", reg="mx.nfmt", value=1),
        make("cfg", reg="mx.wfmt", value=1),
        make("fc", nbuf=0, nidx=0, wbuf=0, widx=0, acc=0, n_in=N_IN, rows=N_OUT,
             wait=[Unit.LD], signal=[Unit.VX]),
        make("req", dst=0, src=0, param=0, n_i=N_OUT // P, relu=1, wait=[Unit.MX],
             signal=[Unit.ST]),
        make("st", src=0, ext=R["y"].addr, cols=N_OUT, wait=[Unit.VX]),
        make("halt"),
    ]
    text = "\n".join(p if isinstance(p, str) else format_instr(p) for p in prog) + "\n"

    # The reference, with numpy only: the hardware semantics written out by hand.
    acc = w.astype(np.int64) @ x.astype(np.int64)
    v = (acc + bias) * mult
    y = np.clip((v + (1 << 21)) >> 22, 0, 127).astype(np.int8)

    outdir.mkdir(parents=True, exist_ok=True)
    atomic_write(outdir / "sparse_fc.s", text)
    img.save(outdir / "mem.bin")
    buf = io.BytesIO()
    np.savez(buf, y=y)
    atomic_write(outdir / "expected.npz", buf.getvalue())
    kept = np.count_nonzero(w) / w.size
    print(f"wrote {outdir}/sparse_fc.s ({sum(1 for p in prog if not isinstance(p, str))} "
          f"instructions), mem.bin, expected.npz; weight density {kept:.2f}, "
          f"input density {np.count_nonzero(x) / x.size:.2f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/sparse_fc.py OUTDIR")
    build(Path(sys.argv[1]))
