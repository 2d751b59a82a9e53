"""Generated programs: race-free on the golden model, and their lowerings (conv via im2col,
pooling) compute what direct numpy computations compute."""

import numpy as np
import pytest

from snpu.config import CoreConfig
from snpu.verif import act_compress, golden, isa, numerics, progen
from snpu.verif.sequencer import loop_depth

CFG = CoreConfig(lanes=4, nbuf_bytes=4096, nidx_bytes=1024, wbuf_bytes=4096, widx_bytes=2048,
                 acc_words=256, obuf_bytes=2048, param_rows=32)


def _run(p):
    res = golden.run_image(p.place_rom(), p.image, CFG)
    p.image.data[:] = res.ext
    return res


def _params(p, n):
    return [a[:n] for a in numerics.unpack_params(p.image.read("params"))]


def _fc_reference(p) -> np.ndarray:
    """y of an fc program from its inputs with numpy alone: each tile's neurons kept where
    |x| > threshold (no threshold: dense) and outside groups of more than t4 small
    (|x| <= t3) elements; int64 dot products; then requantisation."""
    m = p.meta
    x, w = m["x"].astype(np.int64), m["w"].astype(np.int64)
    keep = np.ones(x.shape, bool)
    for lo, hi, t, group in m["tiles"]:
        xs = np.abs(x[:, lo:hi])
        k = xs > t if t >= 0 else np.ones(xs.shape, bool)
        if group:
            size, t3, t4 = group
            small = (xs <= t3).reshape(x.shape[0], -1, size).sum(axis=2)
            k &= np.repeat(small <= t4, size, axis=1)
        keep[:, lo:hi] = k
    acc = (x * keep) @ w.T
    bias, mult, shift = _params(p, w.shape[0])
    return numerics.requantize(acc, bias, mult, shift, relu=bool(m["relu"]))


def _eltwise_reference(p) -> np.ndarray:
    m = p.meta
    s = m["a"].astype(np.int64) * m["ma"] + m["b"].astype(np.int64) * m["mb"]
    bias, mult, shift = _params(p, s.shape[1])
    return numerics.requantize(np.maximum(s, 0), bias, mult, shift)


def _loop_reference(p) -> np.ndarray:
    m = p.meta
    x = m["x"].astype(np.int64)
    return numerics.requantize(x, 0, m["mult"], m["shift"], relu=bool(m["relu"]))


@pytest.mark.parametrize("seed", range(30))
def test_loop_programs_compute_their_reference(seed):
    """``LOOP_DEPTH`` nested loops walking the activation and output streams, a zero-trip
    and a one-trip loop: race-free, and every tile lands where the walk puts it."""
    rng = np.random.default_rng(seed)
    p = progen.loop_program(rng, CFG)
    res = _run(p)
    tiles = int(np.prod(p.meta["x"].shape[:-1]))
    assert loop_depth(p.instrs) == isa.LOOP_DEPTH
    assert res.stats.instructions["ST"] == tiles + 1  # the tiles' stores and one cfg
    assert res.stats.dma_write_bytes == p.meta["x"].size
    np.testing.assert_array_equal(p.image.read("y"), _loop_reference(p))


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("kind", ["fc", "eltwise"])
def test_random_programs_compute_their_reference(kind, seed):
    """Random programs run race- and deadlock-free (the golden model checks both) and
    compute what numpy computes from the same inputs."""
    rng = np.random.default_rng(seed)
    p = progen.random_program(rng, CFG, kind)
    res = _run(p)
    assert res.stats.instructions["LD"] > 0 and res.stats.dma_write_bytes == p.image.region("y").size
    want = _fc_reference(p) if kind == "fc" else _eltwise_reference(p)
    np.testing.assert_array_equal(p.image.read("y"), want)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["fc", "conv", "pool"])
def test_register_operands_compute_what_the_registers_do(kind, seed):
    """The same program with nvec and its strides (reduction, requantisation, store) in
    register operands, the registers holding decoys meanwhile, computes what it computes
    from the registers."""
    make = getattr(progen, f"{kind}_program")
    while True:  # the first seed from ``seed`` on whose shapes fit the core
        try:
            make(np.random.default_rng(seed), CFG)
            break
        except ValueError:
            seed += 1000
    out = []
    for operands in (False, True):
        p = make(np.random.default_rng(seed), CFG, operands=operands)
        assert any(isa.register_operands(i) for i in p.instrs) == operands
        _run(p)
        out.append(p.image.read("y"))
    np.testing.assert_array_equal(*out)


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


@pytest.mark.parametrize("seed", range(20))
def test_net_programs_move_data_through_local_memory(seed):
    p = progen.net_program(np.random.default_rng(seed), CFG)
    res = _run(p)
    np.testing.assert_array_equal(p.image.read("y"), p.meta["x"])
    assert res.stats.net_bytes_sent == res.stats.net_bytes_received == p.meta["x"].size


@pytest.mark.parametrize("seed", range(20))
def test_compress_programs_round_trip(seed):
    """stc writes the stream act_compress specifies; ldc expands it into acc and, with its
    index, into nbuf, where fc reads every channel back through identity weights."""
    p = progen.compress_program(np.random.default_rng(seed), CFG)
    res = _run(p)
    x = p.meta["x"]
    np.testing.assert_array_equal(p.image.read("y"), x)
    np.testing.assert_array_equal(p.image.read("z"), x)
    stream = act_compress.encode_stream(x)
    if "local_stream" in p.meta:
        at = p.meta["local_stream"]
        assert bytes(res.machine.local[at:at + len(stream)]) == stream
    else:
        assert bytes(p.image.read("stream")[:len(stream)]) == stream
    assert res.stats.dma_write_bytes >= len(stream)
