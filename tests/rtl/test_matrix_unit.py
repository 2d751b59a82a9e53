"""The MX datapath (lanes + caches) against the golden model's fc, every format combination."""

import random

import numpy as np
import pytest

from snpu.config import CoreConfig
from snpu.rtl.matrix_unit import MatrixUnit
from snpu.verif import gen

from snpu.verif.tb.mx_driver import load_case, run_case
from snpu.verif.tb.amaranth_sim import seeded, simulate

CFG = CoreConfig(lanes=4, nbuf_bytes=2048, nidx_bytes=512, wbuf_bytes=2048, widx_bytes=1024,
                 acc_words=64, obuf_bytes=256, param_rows=4)

COMBOS = [  # (nfmt, npacked, wfmt, mixed); the merge exactly with stride weights (FORMAT else)
    ("dense", 0, "dense", 0), ("dense", 0, "direct", 0),
    ("direct", 0, "dense", 0), ("direct", 0, "direct", 0), ("direct", 1, "direct", 0),
    ("direct", 0, "stride", 1), ("direct", 1, "stride", 1),
    ("stride", 1, "direct", 0), ("stride", 0, "direct", 0), ("stride", 1, "stride", 0),
    ("stride", 0, "dense", 0),
]


def _check(case, seed, idle=0.3):
    want = case.golden()
    dut = MatrixUnit(case.config)
    rng = random.Random(seed)
    out = {}

    async def bench(ctx):
        await load_case(ctx, dut, case)
        out["acc"], out["cycles"] = await run_case(ctx, dut, case, rng, idle)
        await ctx.tick().repeat(3)
        out["pairs"], out["busy"], out["error"] = (ctx.get(dut.pairs), ctx.get(dut.busy),
                                                   ctx.get(dut.error))

    simulate(dut, bench)
    got = out["acc"].astype(np.uint32).view(np.int32)
    np.testing.assert_array_equal(got, want)
    assert out["pairs"] == case.meta["pairs"]
    assert not out["busy"] and not out["error"]
    return out


@pytest.mark.parametrize("nfmt,npacked,wfmt,mixed", COMBOS,
                         ids=[f"{a}{'p' if b else ''}-{c}{'-c10' if d else ''}" for a, b, c, d in COMBOS])
@pytest.mark.parametrize("seed", range(2))
@seeded
def test_fc_matches_golden(nfmt, npacked, wfmt, mixed, seed):
    rng = np.random.default_rng(seed)
    case = gen.random_fc_case(rng, CFG, nfmt=nfmt, wfmt=wfmt, npacked=npacked, mixed=mixed,
                              n_in=int(rng.integers(1, 200)), rows=int(rng.integers(1, 11)),
                              nvec=int(rng.integers(1, 3)))
    _check(case, seed)


@pytest.mark.parametrize("edge", ["empty_rows", "all_zero", "all_kept", "first_only", "last_only"])
def test_edge_cases(edge):
    rng = np.random.default_rng(7)
    kw = dict(n_in=130, rows=6, nvec=1)
    if edge == "all_zero":
        kw.update(n_density=0.0, w_density=0.0)
    elif edge == "all_kept":
        kw.update(n_density=1.0, w_density=1.0, thresh=0)
    case = gen.random_fc_case(rng, CFG, nfmt="direct", wfmt="stride", mixed=1, **kw)
    if edge == "empty_rows":  # fewer rows than lanes: some lanes have nothing to do
        case = gen.random_fc_case(rng, CFG, nfmt="direct", wfmt="direct", n_in=64, rows=2, nvec=2)
    elif edge in ("first_only", "last_only"):
        k = 0 if edge == "first_only" else 129
        case.x[:] = 0
        case.x[:, k] = 5
        case.nbuf[:130] = case.x[0].view(np.uint8)
        case.nidx[:] = 0
        case.nidx[k // 8] = 1 << (k % 8)
    _check(case, 0)


@pytest.mark.parametrize("nfmt,wfmt,mixed", [("direct", "direct", 0), ("direct", "stride", 1),
                                             ("stride", "direct", 0), ("stride", "stride", 0)])
def test_lanes_with_uneven_work(nfmt, wfmt, mixed):
    """Lane 0's rows are dense, the other lanes' nearly empty: the lanes sharing the neuron
    source drift apart by far more than their queues hold, and the rows (13 on 4 lanes)
    leave the last round to lane 0 alone."""
    rng = np.random.default_rng(11)
    w = gen.sparse_int8(rng, (13, 200), 0.02)
    w[::CFG.lanes] = gen.sparse_int8(rng, (4, 200), 1.0)
    case = gen.random_fc_case(rng, CFG, nfmt=nfmt, wfmt=wfmt, mixed=mixed, nvec=2,
                              npacked=int(nfmt == "stride"), n_density=0.5, thresh=0, weights=w)
    _check(case, 0)


@pytest.mark.parametrize("wfmt", ["dense", "direct"])
def test_one_pair_per_lane_per_cycle(wfmt):
    """Dense data through every path: a lane multiplies one pair per cycle, rows back to back."""
    rng = np.random.default_rng(3)
    case = gen.random_fc_case(rng, CFG, nfmt="direct", wfmt=wfmt, n_in=192, rows=8, nvec=1,
                              n_density=1.0, w_density=1.0, thresh=0)
    out = _check(case, 0, idle=0.0)
    ideal = 2 * 192  # rows per lane * pairs per row
    latency = 40  # the pipeline's
    assert out["cycles"] <= ideal + latency, out["cycles"]
