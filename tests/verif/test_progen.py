"""Generated programs: race-free on the golden model, and their lowerings (conv via im2col,
pooling) compute what direct numpy computations compute."""

import numpy as np
import pytest

from snpu.config import CoreConfig
from snpu.verif import golden, numerics, progen

CFG = CoreConfig(lanes=4, nbuf_bytes=4096, nidx_bytes=1024, wbuf_bytes=4096, widx_bytes=2048,
                 acc_words=256, obuf_bytes=2048, param_rows=32)


def _run(p):
    res = golden.run_image(p.place_rom(), p.image, CFG)
    p.image.data[:] = res.ext
    return res


def _params(p, n):
    return [a[:n] for a in numerics.unpack_params(p.image.read("params"))]


@pytest.mark.parametrize("seed", range(30))
def test_random_programs_are_race_free(seed):
    rng = np.random.default_rng(seed)
    p = progen.random_program(rng, CFG, list(progen.GENERATORS)[seed % 4])
    _run(p)


@pytest.mark.parametrize("seed", range(8))
def test_conv_lowering_equals_direct_convolution(seed):
    rng = np.random.default_rng(seed)
    p = progen.conv_program(rng, CFG)
    _run(p)
    m = p.meta
    x, w, k, s, pad, co = m["x"], m["w"], m["k"], m["stride"], m["pad"], m["c_out"]
    h, wd, ci = x.shape
    xp = np.pad(x.astype(np.int64), ((pad, pad), (pad, pad), (0, 0)))
    wk = w.reshape(co, k, k, ci).astype(np.int64)
    ho, wo = (h + 2 * pad - k) // s + 1, (wd + 2 * pad - k) // s + 1
    acc = np.zeros((ho, wo, co), np.int64)
    for oy in range(ho):
        for ox in range(wo):
            patch = xp[oy * s:oy * s + k, ox * s:ox * s + k]
            acc[oy, ox] = np.einsum("ijc,oijc->o", patch, wk)
    bias, mult, shift = _params(p, co)
    want = numerics.requantize(acc, bias, mult, shift, relu=True)
    np.testing.assert_array_equal(p.image.read("y"), want)


@pytest.mark.parametrize("seed", range(6))
def test_pooling_equals_numpy(seed):
    rng = np.random.default_rng(seed)
    mode = ["max", "sum"][seed % 2]
    p = progen.pool_program(rng, CFG, mode=mode)
    _run(p)
    x = p.image.read("x").astype(np.int64)
    y = p.image.read("y")
    ho, wo, c = y.shape
    k = x.shape[0] // ho
    win = x.reshape(ho, k, wo, k, c)
    red = win.max(axis=(1, 3)) if mode == "max" else win.sum(axis=(1, 3))
    bias, mult, shift = _params(p, c)
    np.testing.assert_array_equal(y, numerics.requantize(red, bias, mult, shift))
    if mode == "sum":  # average pooling within one unit of rounding
        assert np.abs(y - np.clip(np.round(win.mean(axis=(1, 3))), -128, 127)).max() <= 1
