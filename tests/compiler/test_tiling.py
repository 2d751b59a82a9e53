"""Row tiles of a layer's weights (compiler/tiling.py): they fit, they cover the layer, and
with the pipeline estimate they overlap loads with compute on the golden model."""

from __future__ import annotations

import numpy as np
import pytest

from snpu.compiler import check, runtime, tiling
from snpu.compiler.pipeline import CompileOptions, compile_model
from snpu.config import CoreConfig
from snpu.errors import CompileError

from .models import inputs, tiny_mlp

P = 4


def _weights(rng, rows, cols, density):
    w = rng.integers(-127, 128, (rows, cols)).astype(np.int8)
    w[rng.random(w.shape) >= density] = 0
    return w


def _pipeline(w, density=1.0):
    return tiling.Pipeline(tiling.fc_row_cycles(w, "direct", [(0, w.shape[1])], density, 64), 8, 8.0)


@pytest.mark.parametrize("fmt", ["dense", "direct", "stride"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tiles_cover_the_rows_and_fit_half_of_every_bank(fmt, seed):
    rng = np.random.default_rng(seed)
    rows, cols = int(rng.integers(1, 200)), int(rng.integers(8, 300))
    w = _weights(rng, rows, cols, rng.choice([0.05, 0.3, 1.0]))
    chunks = [(0, cols // 2), (cols // 2, cols)]
    per_row = tiling.row_bytes(w, fmt, chunks)
    limits = (512, 256)
    for pipeline in (None, tiling.Pipeline(rng.random((2, rows)) * 50, 8, 8.0)):
        tiles = tiling.row_tiles(per_row, P, limits, 64, pipeline)
        assert tiles[0][0] == 0 and tiles[-1][1] == rows
        assert all(a[1] == b[0] for a, b in zip(tiles, tiles[1:]))
        for r0, r1 in tiles:
            assert r0 % P == 0 and r1 - r0 <= 64
            for j in range(2):
                for g in range(P):
                    lane = range(r0 + g, r1, P)
                    assert per_row[j, 0, lane].sum() <= limits[0]
                    assert per_row[j, 1, lane].sum() <= limits[1]


def test_without_a_pipeline_the_tiles_are_the_largest_that_fit():
    w = _weights(np.random.default_rng(3), 256, 128, 0.1)
    per_row = tiling.row_bytes(w, "direct", [(0, 128)])
    assert tiling.row_tiles(per_row, P, (4096, 4096), 4095) == [(0, 256)]
    # 16 bytes of index per row: 64 rows per lane fill 1024 bytes
    assert tiling.row_tiles(per_row, P, (4096, 1024), 4095) == [(0, 256)]
    assert tiling.row_tiles(per_row, P, (4096, 1008), 4095)[0] == (0, 252)


def test_rows_that_do_not_fit_name_the_layer():
    w = np.ones((8, 600), np.int8)
    with pytest.raises(CompileError, match="layer 'fc9'.*do not fit"):
        tiling.row_tiles(tiling.row_bytes(w, "dense", [(0, 600)]), P, (512, 512), 64,
                         where="layer 'fc9'")


def test_the_pipeline_splits_a_layer_whose_load_and_compute_are_alike():
    """One tile that holds a sparse layer serialises its load and its compute; the chosen
    tiling is estimated faster, and never slower than the largest tiles."""
    w = _weights(np.random.default_rng(4), 512, 512, 0.1)
    per_row = tiling.row_bytes(w, "direct", [(0, 512)])
    banks = tiling.LaneBytes(per_row, 16)
    pipe = _pipeline(w)
    pipe.compute *= 8  # eight input vectors: compute about as long as the load
    largest = tiling.row_tiles(per_row, 16, (8192, 4096), 4080)
    chosen = tiling.row_tiles(per_row, 16, (8192, 4096), 4080, pipe)
    assert largest == [(0, 512)]
    assert len(chosen) >= 4
    one, split = (tiling.pipelined_cycles(t, banks, pipe) for t in (largest, chosen))
    load = tiling.pipelined_cycles(largest, banks, tiling.Pipeline(0 * pipe.compute, 8))
    assert split < one - load / 2  # most of the load is hidden


def test_compiled_fc_layers_overlap_loads_and_stay_bit_exact(monkeypatch):
    """A compiled sparse MLP: the fc layers take several tiles, run bit-exact on the golden
    model, and in fewer cycles than with the largest tiles."""
    model = tiny_mlp(5, sizes=(256, 512, 512, 10))
    cfg = CoreConfig(lanes=4, wbuf_bytes=4096, widx_bytes=2048)
    options = CompileOptions(config=cfg, density=0.2)
    xs = inputs(model, 2)
    c = compile_model(model, options)
    runs = runtime.run_batch(c, xs)
    assert check.compare(c, xs, runs, onnxruntime=False).bit_exact == len(xs)
    layers = [r for r in c.report["layers"] if r.get("weight_tiles")]
    largest = tiling.row_tiles
    monkeypatch.setattr(tiling, "row_tiles", lambda *a, **k: largest(*a[:4], None, **k))
    base = compile_model(model, options)
    base_layers = [r for r in base.report["layers"] if r.get("weight_tiles")]
    assert sum(r["weight_tiles"] for r in layers) > sum(r["weight_tiles"] for r in base_layers)
    cycles = sum(r.core_cycles for r in runs)
    base_cycles = sum(r.core_cycles for r in runtime.run_batch(base, xs))
    assert cycles < base_cycles
