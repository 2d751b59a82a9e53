"""The golden model against independent numpy computations, and its error reporting."""

import numpy as np
import pytest

from snpu.config import CoreConfig
from snpu.errors import ExecutionError
from snpu.verif import golden, index as ix, isa, numerics
from snpu.verif.golden import Machine
from snpu.verif.hazards import Access
from snpu.verif.isa import Unit
from snpu.verif.program import Program

LD, MX, VX, ST = Unit.LD, Unit.MX, Unit.VX, Unit.ST
SMALL = CoreConfig(lanes=4, chunk_bits=64, nbuf_bytes=2048, nidx_bytes=512, wbuf_bytes=4096,
                   widx_bytes=2048, acc_words=256, obuf_bytes=1024, param_rows=16)
FMT = {"dense": 0, "direct": 1, "stride": 2}


def run(p: Program, **kw):
    words = p.place_rom()
    return golden.run_image(words, p.image, p.config, **kw)


def _neuron_index(x, fmt, t):
    bits = ix.threshold(x, t) if fmt != "dense" else np.ones(x.size, bool)
    return bits


NEURON_LAYOUTS = [("dense", 0), ("direct", 0), ("direct", 1), ("stride", 0), ("stride", 1)]


@pytest.mark.parametrize("nfmt,npacked", NEURON_LAYOUTS)
@pytest.mark.parametrize("wfmt", ["dense", "direct", "stride"])
@pytest.mark.parametrize("seed", range(3))
def test_fc_all_format_combinations_match_numpy(nfmt, npacked, wfmt, seed):
    """Every neuron layout x weight format.  Stride weights go only into the merge: with
    direct neurons ``mx.mixed = 1`` (claim 10), with dense neurons the fc faults ``FORMAT``
    (the lanes have no weight-side expander; the compiler stores such weights direct)."""
    rng = np.random.default_rng(seed)
    cfg = SMALL
    nvec, n_in, rows = int(rng.integers(1, 4)), int(rng.integers(1, 300)), int(rng.integers(1, 30))
    t = int(rng.integers(0, 40))
    x = rng.integers(-128, 128, (nvec, n_in)).astype(np.int8)
    x[rng.random(x.shape) < rng.random()] = 0
    w = rng.integers(-128, 128, (rows, n_in)).astype(np.int8)
    w[rng.random(w.shape) < rng.random()] = 0
    p = Program(cfg)
    nstride = -(-n_in // 64) * 64
    nmask = np.stack([_neuron_index(v, nfmt, t) for v in x])
    if nfmt == "direct" and not npacked:
        # the sparse processing unit thresholds while loading
        p.cfgs(ld__nidx_mode=1, ld__thresh=t, ld__dst_stride=nstride, ld__ext_stride=n_in)
        p.emit("ld", buf="nbuf", ext=p.data("x", x), dst=0, rows=nvec, cols=n_in)
        p.cfgs(ld__nidx_mode=0)
        nidx_stride = nstride // 8
    else:
        # index and values arrive from memory (claim 21: data with its index attached)
        idx_rows, vals = [], np.zeros((nvec, nstride), np.int8)
        for v in range(nvec):
            if nfmt == "direct":
                idx_rows.append(ix.encode_direct(nmask[v], 8))
            elif nfmt == "stride":
                idx_rows.append(ix.encode_stride(ix.direct_to_stride(nmask[v])))
            kept = x[v][nmask[v]] if npacked else x[v]
            vals[v, :kept.size] = kept
        p.cfgs(ld__dst_stride=nstride, ld__ext_stride=nstride)
        p.emit("ld", buf="nbuf", ext=p.data("x", vals), dst=0, rows=nvec, cols=nstride)
        if nfmt != "dense":
            istride = -(-max(len(r) for r in idx_rows) // 8) * 8
            ibuf = np.zeros((nvec, istride), np.uint8)
            for v, r in enumerate(idx_rows):
                ibuf[v, :len(r)] = np.frombuffer(r, np.uint8)
            p.cfgs(ld__dst_stride=istride, ld__ext_stride=istride)
            p.emit("ld", buf="nidx", ext=p.data("xi", ibuf), dst=0, rows=nvec, cols=istride)
            nidx_stride = istride
        else:
            nidx_stride = 0
    wmask = np.ones_like(w, bool) if wfmt == "dense" else w != 0
    p.load_weight_tile("w", w, wfmt, wbuf=16, widx=8, signal_last=[MX])
    acc_stride = -(-rows // cfg.lanes) * cfg.lanes
    p.cfgs(mx__nfmt=FMT[nfmt], mx__npacked=npacked, mx__wfmt=FMT[wfmt], mx__nvec=nvec,
           mx__nstride=nstride, mx__nidx_stride=nidx_stride, mx__acc_stride=acc_stride,
           mx__mixed=int(wfmt == "stride" and nfmt == "direct"))
    p.emit("fc", nbuf=0, nidx=0, wbuf=16, widx=8, acc=0, n_in=n_in, rows=rows, wait=[LD])
    p.emit("fc", nbuf=0, nidx=0, wbuf=16, widx=8, acc=0, n_in=n_in, rows=rows, accumulate=1)
    p.emit("halt")
    if wfmt == "stride" and nfmt == "dense":
        with pytest.raises(ExecutionError, match="stride weights with dense neurons") as e:
            run(p)
        assert e.value.fault == "FORMAT"
        return
    res = run(p)
    pairs = nmask[:, None, :] & wmask[None, :, :]
    want = 2 * np.einsum("vri,vi,ri->vr", pairs, x.astype(np.int64), w.astype(np.int64))
    got = res.machine.acc[np.arange(nvec)[:, None] * acc_stride + np.arange(rows)]
    np.testing.assert_array_equal(got, want)
    assert res.stats.mac_pairs == 2 * int(pairs.sum())
    assert res.stats.dense_pairs == 2 * nvec * rows * n_in


def test_threshold_and_group_pruning_write_the_neuron_index():
    rng = np.random.default_rng(5)
    x = rng.integers(-20, 20, 256).astype(np.int8)
    p = Program(SMALL)
    p.cfgs(ld__nidx_mode=1, ld__thresh=3, ld__group_log2=2, ld__group_t3=5, ld__group_t4=1)
    p.emit("ld", buf="nbuf", ext=p.data("x", x), dst=64, cols=256)
    p.emit("halt")
    res = run(p)
    want = ix.threshold(x, 3) & ix.group_prune(x, 4, 5, 1)
    got = ix.decode_direct(res.machine.nidx, 64 + 256)[64:]
    np.testing.assert_array_equal(got, want)
    assert not ix.decode_direct(res.machine.nidx, 64).any()


def test_group_pruned_load_must_be_group_aligned():
    p = Program(SMALL)
    p.cfgs(ld__nidx_mode=1, ld__group_log2=3)
    p.emit("ld", buf="nbuf", ext=p.data("x", np.ones(16, np.int8)), dst=4, cols=16)
    p.emit("halt")
    with pytest.raises(ExecutionError, match="ROM word 2 .*group boundary"):
        run(p)


def test_3d_dma_matches_numpy_slicing():
    rng = np.random.default_rng(1)
    src = rng.integers(0, 256, (5, 7, 40)).astype(np.uint8)
    p = Program(SMALL)
    a = p.data("src", src)
    # im2col-style: 3 planes stepping 2 rows, 2 rows each, 24 bytes per row
    p.cfgs(ld__ext_stride=40, ld__ext_stride3=80, ld__dst_stride=24, ld__dst_stride3=48)
    p.emit("ld", buf="nbuf", ext=a + 8, dst=0, n3=3, rows=2, cols=24, signal=[ST])
    # copy nbuf -> obuf is not an instruction, so check nbuf directly and store obuf zeros
    p.emit("halt")
    res = run(p)
    flat = src.reshape(-1)
    want = np.stack([flat[8 + 80 * k + 40 * r: 8 + 80 * k + 40 * r + 24]
                     for k in range(3) for r in range(2)]).reshape(-1)
    np.testing.assert_array_equal(res.machine.nbuf[:144], want)


def test_vector_unit_pooling_eltwise_and_requant():
    P = SMALL.lanes
    rng = np.random.default_rng(2)
    h = w = 4
    c = 2 * P  # two words per pixel
    x = rng.integers(-128, 128, (h, w, c)).astype(np.int8)
    p = Program(SMALL)
    p.emit("ld", buf="acc", ext=p.data("x", x), dst=0, cols=x.size)
    bias = rng.integers(-100, 100, c)
    mult = rng.integers(1, 30000, c)
    shift = rng.integers(0, 20, c)
    p.emit("ld", buf="param", ext=p.data("prm", numerics.pack_params(bias, mult, shift)), dst=0,
           cols=8 * c, signal=[VX])
    # 2x2 max pool, stride 2: one vred per output row
    out = 256
    p.cfgs(vx__src_stride=2 * c, vx__dst_stride=c, vx__k1_stride=c, vx__k2_stride=w * c)
    for oy in range(h // 2):
        p.emit("vred", mode="max", dst=out + oy * (w // 2) * c, src=2 * oy * w * c, n_o=w // 2,
               n_i=2, k1=2, k2=2, wait=[LD] if oy == 0 else [])
    # global sum pool over all 16 pixels
    p.cfgs(vx__src_stride=0, vx__k1_stride=c)
    p.emit("vred", mode="sum", dst=512, src=0, n_o=1, n_i=2, k1=h * w, k2=1)
    # residual add with scales, ReLU
    p.cfgs(vx__src_stride=c, vx__b_stride=c, vx__dst_stride=c)
    p.emit("vew", dst=640, a=0, b=c, n_o=4, n_i=2, ma=3, mb=-2, relu=1)
    # requantise the pooled map to obuf and store it
    p.cfgs(vx__src_stride=c, vx__dst_stride=c)
    p.emit("req", dst=0, src=out, param=0, n_o=(h // 2) * (w // 2), n_i=2, relu=0, signal=[ST])
    y = p.space("y", ((h // 2) * (w // 2), c))
    p.emit("st", src=0, ext=y, cols=(h // 2) * (w // 2) * c, wait=[VX])
    p.emit("halt")
    res = run(p)
    acc = res.machine.acc
    xi = x.astype(np.int64)
    pooled = xi.reshape(h // 2, 2, w // 2, 2, c).max(axis=(1, 3)).reshape(-1, c)
    np.testing.assert_array_equal(acc[out:out + pooled.size].reshape(-1, c), pooled)
    np.testing.assert_array_equal(acc[512:512 + c], xi.reshape(-1, c).sum(axis=0))
    px = xi.reshape(-1, c)
    ew = np.maximum(px[0:4] * 3 + px[1:5] * -2, 0)
    np.testing.assert_array_equal(acc[640:640 + 4 * c].reshape(4, c), ew)
    # requantisation written out independently of verif.numerics
    v = (pooled + bias) * mult
    half = np.where(shift > 0, 1 << np.maximum(shift - 1, 0), 0)
    want = np.clip((v + half) >> shift, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(res.ext[y:y + want.size].view(np.int8), want.reshape(-1))


def test_vewp_reads_its_multipliers_from_the_parameter_memory():
    """``vewp`` computes what ``vew`` does with the int16 pair at the start of its parameter
    row (bytes 0-1 and 2-3; the rest of the row unread); an empty one reads nothing; a row
    past the memory is RANGE."""
    P = SMALL.lanes
    rb = SMALL.param_row_bytes
    rng = np.random.default_rng(4)
    x = rng.integers(-2**20, 2**20, 3 * 2 * P)
    prm = np.concatenate([numerics.pack_ew_multipliers(-7, 12345, rb),
                          numerics.pack_ew_multipliers(-32768, 32767, rb)])
    prm[rb + 4:2 * rb] = 0xAB  # what lies beyond the pair is not read
    m = Machine(SMALL, np.zeros(0, np.uint8))
    m.acc[:x.size] = x
    m.param[:prm.size] = prm
    m.regs["vx.src_stride"] = m.regs["vx.b_stride"] = m.regs["vx.dst_stride"] = 2 * P
    for row, (ma, mb) in enumerate([(-7, 12345), (-32768, 32767)]):
        dst = 512 + 256 * row
        ex = m.execute(isa.make("vewp", dst=dst, a=0, b=2 * P, n_o=2, n_i=2, param=row, relu=0))
        px = x.reshape(3, 2 * P)
        np.testing.assert_array_equal(m.acc[dst:dst + 4 * P].reshape(2, 2 * P),
                                      numerics.wrap32(px[0:2] * ma + px[1:3] * mb))
        assert Access("param", row * rb, row * rb + 4, False) in ex.accesses
        twin = m.execute(isa.make("vew", dst=dst, a=0, b=2 * P, n_o=2, n_i=2, ma=ma, mb=mb))
        assert twin.cycles == ex.cycles
    assert m.execute(isa.make("vewp", dst=0, a=0, b=0, n_o=0, param=SMALL.param_rows)).accesses == []
    with pytest.raises(ExecutionError) as fault:
        m.execute(isa.make("vewp", dst=512, a=0, b=2 * P, n_i=2, param=SMALL.param_rows))
    assert fault.value.fault == "RANGE"


def test_double_buffered_units_overlap():
    """LD of tile k+1 runs while MX computes tile k: tokens express the ping-pong."""
    cfg = SMALL
    rng = np.random.default_rng(3)
    n_in, rows, tiles = 128, 16, 6
    xs = rng.integers(-128, 128, (tiles, n_in)).astype(np.int8)
    w = rng.integers(-128, 128, (rows, n_in)).astype(np.int8)
    p = Program(cfg)
    p.load_weight_tile("w", w, "dense")
    xa = p.data("x", xs)
    for k in range(tiles):
        buf = (k % 2) * 256
        p.emit("ld", buf="nbuf", ext=xa + k * n_in, dst=buf, cols=n_in,
               wait=[MX] if k >= 2 else [], signal=[MX])
        p.emit("fc", nbuf=buf, nidx=0, wbuf=0, widx=0, acc=k * rows, n_in=n_in, rows=rows,
               wait=[LD], signal=[LD] if k + 2 < tiles else [])
    p.emit("halt")
    res = run(p)
    got = res.machine.acc[:tiles * rows].reshape(tiles, rows)
    np.testing.assert_array_equal(got, xs.astype(np.int64) @ w.astype(np.int64).T)
    busy = res.stats.busy
    assert res.stats.cycles < busy["LD"] + busy["MX"], "LD and MX did not overlap"


def test_missing_token_is_reported_as_a_race():
    p = Program(SMALL)
    p.emit("ld", buf="nbuf", ext=p.data("x", np.ones(64, np.int8)), dst=0, cols=64)
    p.load_weight_tile("w", np.ones((4, 64), np.int8), "dense")
    p.emit("fc", nbuf=0, nidx=0, wbuf=0, widx=0, acc=0, n_in=64, rows=4)  # no wait=ld
    p.emit("halt")
    with pytest.raises(ExecutionError, match=r"ROM word \d+ \(fc .*race \(write/read\) on"):
        run(p)


def test_deadlock_names_the_waiting_units():
    p = Program(SMALL)
    p.emit("ld", buf="nbuf", ext=p.data("x", np.ones(8, np.int8)), dst=0, cols=8, wait=[MX])
    p.emit("halt")
    with pytest.raises(ExecutionError, match="deadlock at cycle .*LD waits for a token from MX "
                                             "at ROM word 0"):
        run(p)


def test_token_channel_capacity_stalls_the_producer():
    cfg = CoreConfig(**{**SMALL.to_dict(), "token_depth": 2})
    p = Program(cfg)
    for _ in range(3):
        p.emit("cfg", reg="ld.thresh", value=1, signal=[MX])
    p.emit("halt")
    with pytest.raises(ExecutionError, match="LD cannot signal MX \\(channel full\\)"):
        run(p)


@pytest.mark.parametrize("build,message,fault", [
    (lambda p: p.emit("ld", buf="nbuf", ext=0, dst=SMALL.nbuf_bytes - 4, cols=8),
     "destination nbuf .* lies outside", "RANGE"),
    (lambda p: p.emit("ld", buf="wbuf", lane=4, ext=0, dst=0, cols=8),
     "lane 4 is not a lane of buf=wbuf", "RANGE"),
    (lambda p: p.emit("ld", buf="nbuf", lane=1, ext=0, dst=0, cols=8),
     "lane 1 is not a lane of buf=nbuf", "RANGE"),
    (lambda p: p.emit("ld", buf="nbuf", ext=(1 << 20) - 4, dst=0, cols=8), "external source", None),
    (lambda p: p.emit("st", src=0, ext=0x100, cols=8), "overwrite the program", None),
    (lambda p: p.emit("fc", nbuf=0, nidx=0, wbuf=0, widx=0, acc=2, n_in=8, rows=1),
     "multiples of lanes", "ALIGN"),
    (lambda p: p.emit("vred", mode="max", dst=0, src=1, n_i=1), "src=1 is not a multiple of lanes",
     "ALIGN"),
    (lambda p: p.emit("req", dst=0, src=0, param=SMALL.param_rows, n_i=1), "parameter rows",
     "RANGE"),
])
def test_execution_errors_name_the_instruction_and_the_fault(build, message, fault):
    """The message names the ROM word; ``fault`` is the error code the core must report
    (``None``: a program error the hardware does not detect)."""
    p = Program(SMALL)
    build(p)
    p.emit("halt")
    with pytest.raises(ExecutionError, match=r"ROM word 0 \(.*" + message) as e:
        run(p)
    assert e.value.fault == fault and e.value.address == 0


def test_no_work_is_no_fault():
    """An instruction with a zero extent does nothing, whatever its other operands."""
    p = Program(SMALL)
    p.emit("vred", mode="max", dst=1, src=3, n_o=0)
    p.emit("ld", buf="wbuf", lane=9, ext=0, dst=1 << 19, cols=0)
    p.emit("fc", nbuf=0, nidx=0, wbuf=0, widx=0, acc=1, n_in=8, rows=0)
    p.emit("halt")
    run(p)


def test_bus_errors_are_faults_of_the_instruction_that_touches_them():
    p = Program(SMALL)
    x = p.data("x", np.zeros(32, np.int8))
    p.emit("ld", buf="nbuf", ext=x + 8, dst=0, cols=8)
    p.emit("halt")
    words = p.place_rom()
    golden.run_image(words, p.image, SMALL, bus_error=(x, x + 8))  # the word before: fine
    with pytest.raises(ExecutionError) as e:
        golden.run_image(words, p.image, SMALL, bus_error=(x + 15, x + 16))
    assert (e.value.fault, e.value.address) == ("LOAD_BUS", 0)


def test_in_place_hazard_inside_one_vector_instruction():
    p = Program(SMALL)
    p.cfgs(vx__src_stride=4, vx__dst_stride=4)
    p.emit("vred", mode="max", dst=4, src=0, n_o=3, n_i=1)  # writes word t+1, read at t+1
    p.emit("halt")
    with pytest.raises(ExecutionError, match="read again later"):
        run(p)


def test_program_without_halt_and_illegal_words():
    p = Program(SMALL)
    p.emit("cfg", reg="ld.thresh", value=1)
    with pytest.raises(ExecutionError, match="past the ROM .*no halt") as e:
        run(p)
    assert (e.value.fault, e.value.address) == ("ILLEGAL", 1)
    with pytest.raises(ExecutionError, match="illegal instruction at ROM word 1 ") as e:
        golden.run([p.place_rom()[0], 0x3F], np.zeros(64, np.uint8), SMALL)
    assert (e.value.fault, e.value.address) == ("ILLEGAL", 1)
    # words after halt are never dispatched, so never decoded
    p.emit("halt")
    golden.run(p.place_rom() + [0x3F], np.zeros(1 << 20, np.uint8), SMALL)
