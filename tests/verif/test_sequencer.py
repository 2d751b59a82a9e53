"""The program sequencer: loops, walking loads and stores, illegal loops, and the
instruction cache's hit / miss / prefetch counts."""

import numpy as np
import pytest

from snpu.config import CoreConfig
from snpu.errors import ExecutionError
from snpu.verif import golden, isa
from snpu.verif.isa import make
from snpu.verif.program import Program
from snpu.verif.progen import loop_program
from snpu.verif.sequencer import (InstructionCache, dispatch_arrays, dispatch_count, half_sizes,
                                  ping_pong, unroll)

SMALL = CoreConfig(lanes=4, nbuf_bytes=1024, nidx_bytes=128, wbuf_bytes=1024, widx_bytes=512,
                   acc_words=64, obuf_bytes=256, param_rows=8)


def _cfg(v):
    return make("cfg", reg="ld.thresh", value=v)


def _trace(prog):
    return [(a, i.op, i.args.get("value", i.args.get("ext"))) for a, i in unroll(prog)]


def test_loop_repeats_its_body_and_walks():
    prog = [make("loop", count=3, body=2, in_inc=64, out_inc=-8),
            make("ld", buf="nbuf", ext=100, dst=0, cols=8, walk=1),
            make("st", src=0, ext=500, cols=8, walk=1),
            _cfg(7), make("halt")]
    assert _trace(prog) == [(1, "ld", 100), (2, "st", 500), (1, "ld", 164), (2, "st", 492),
                            (1, "ld", 228), (2, "st", 484), (3, "cfg", 7), (4, "halt", None)]


def test_nested_loops_zero_and_one_trip_and_shared_ends():
    prog = [make("loop", count=2, body=5, in_inc=1000),        # 0: outer, body 1..5
            make("loop", count=3, body=1, in_inc=10),          # 1: inner, body 2
            make("ld", buf="acc", ext=0, dst=0, cols=1, walk=1),   # 2
            make("loop", count=0, body=1),                     # 3: zero trip: skips 4
            _cfg(1),                                           # 4
            make("loop", count=1, body=0 + 1),                 # 5: one trip, ends with outer
            _cfg(2),                                           # 6 -- outside the outer body
            make("halt")]
    prog[0] = make("loop", count=2, body=6, in_inc=1000)      # outer body 1..6 ends on 6
    exts = [e for _, op, e in _trace(prog) if op == "ld"]
    assert exts == [0, 10, 20, 1000, 1010, 1020]
    ops = [op for _, op, _ in _trace(prog)]
    assert ops == ["ld"] * 3 + ["cfg"] + ["ld"] * 3 + ["cfg", "halt"]


def test_entry_starts_the_first_iteration_inside_the_body():
    """``entry``: the first iteration runs the body's tail (at iteration 0's addresses),
    the others all of it; one trip runs the tail only."""
    prog = [make("loop", count=3, body=3, in_inc=64, entry=2),
            make("st", src=0, ext=400, cols=8, walk=1),
            _cfg(1),
            make("ld", buf="nbuf", ext=100, dst=0, cols=8, walk=1),
            make("loop", count=1, body=2, entry=1), _cfg(2), _cfg(3),
            make("halt")]
    assert _trace(prog) == [(3, "ld", 100), (1, "st", 400), (2, "cfg", 1), (3, "ld", 164),
                            (1, "st", 400), (2, "cfg", 1), (3, "ld", 228), (6, "cfg", 3),
                            (7, "halt", None)]


def test_entry_past_an_inner_loop_word_runs_its_body_once_as_plain_words():
    prog = [make("loop", count=2, body=4, entry=2),
            _cfg(1),
            make("loop", count=3, body=2),   # skipped by the first iteration
            _cfg(2), _cfg(3),
            make("halt")]
    values = [v for _, op, v in _trace(prog) if op == "cfg"]
    assert values == [2, 3] + [1] + [2, 3] * 3


def _entry_example():
    return [make("loop", count=3, body=6, in_inc=1000, out_inc=7, entry=4),
            make("st", src=0, ext=50, cols=1, walk=1),
            make("loop", count=2, body=2, in_inc=10, entry=1),
            make("ld", buf="acc", ext=0, dst=0, cols=1, walk=1), _cfg(9),
            make("loop", count=2, body=1),    # the outer loop enters here
            make("ld", buf="acc", ext=5, dst=0, cols=1, walk=1),
            make("halt")]


def _nested_example():
    prog = [make("loop", count=2, body=6, in_inc=1000), make("loop", count=3, body=1, in_inc=10),
            make("ld", buf="acc", ext=0, dst=0, cols=1, walk=1), make("loop", count=0, body=1),
            _cfg(1), make("loop", count=1, body=1), _cfg(2), make("halt")]
    return prog


def test_flip_loops_alternate_the_halves_of_ping_pong_operands():
    """Odd iterations of a ``flip`` loop use the other half of nbuf / nidx / acc / obuf
    operands (not weights, parameters or external addresses); nested flipping loops
    compose: the half flips when an odd number of them are on odd iterations."""
    h = half_sizes(SMALL)
    assert h == {"nbuf": 512, "nidx": 64, "acc": 128, "obuf": 128, "wbuf": 512, "widx": 256}
    prog = [make("loop", count=2, body=5, flip=1),
            make("loop", count=2, body=2, flip=1),
            make("fc", nbuf=8, nidx=1, wbuf=16, widx=4, acc=0, n_in=8, rows=4),
            make("ld", buf="wbuf", ext=100, dst=32, cols=8),
            make("req", dst=4, src=130, param=1, n_o=1, n_i=1),
            make("st", src=4, ext=200, cols=8),
            make("halt")]
    got = [(i.op, i.args) for _, i in unroll(prog, halves=h)]
    fcs = [(a["nbuf"], a["nidx"], a["acc"], a["wbuf"], a["widx"]) for op, a in got if op == "fc"]
    # outer 0: inner 0, 1; outer 1: inner 0, 1 (flipped once more)
    assert fcs == [(8, 1, 0, 16, 4), (520, 65, 128, 16, 4), (520, 65, 128, 16, 4), (8, 1, 0, 16, 4)]
    assert [a["dst"] for op, a in got if op == "ld"] == [32] * 4  # weights stay
    assert [(a["dst"], a["src"]) for op, a in got if op == "req"] == [(4, 130), (132, 2)]
    assert [(a["src"], a["ext"]) for op, a in got if op == "st"] == [(4, 200), (132, 200)]
    with pytest.raises(ValueError, match="halves"):
        unroll(prog)
    _, _, flip = dispatch_arrays(prog)
    assert flip.tolist() == [0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0]  # the halt last


def test_flip_masks_move_activations_and_weights_separately():
    """``flip`` bit 1 moves the weights' halves (wbuf, widx operands and loads into them),
    bit 0 the activations'; nested loops compose per kind: a weight-tile loop flipping the
    weights around a pixel loop flipping the activations, and a loop flipping both."""
    h = half_sizes(SMALL)
    prog = [make("loop", count=2, body=5, flip=2),        # weight tiles
            make("ld", buf="wbuf", ext=100, dst=32, cols=8, walk=1),
            make("ld", buf="widx", ext=300, dst=8, cols=8, walk=1),
            make("loop", count=2, body=1, flip=1),        # pixels
            make("fc", nbuf=8, nidx=1, wbuf=32, widx=8, acc=0, n_in=8, rows=4),
            make("ld", buf="param", ext=500, dst=3, cols=8),
            make("loop", count=2, body=1, flip=3),
            make("fc", nbuf=8, nidx=1, wbuf=32, widx=8, acc=0, n_in=8, rows=4),
            make("halt")]
    got = [(i.op, i.args) for _, i in unroll(prog, halves=h)]
    fcs = [(a["nbuf"], a["nidx"], a["acc"], a["wbuf"], a["widx"]) for op, a in got if op == "fc"]
    assert fcs == [(8, 1, 0, 32, 8), (520, 65, 128, 32, 8),      # weight tile 0
                   (8, 1, 0, 544, 264), (520, 65, 128, 544, 264),  # weight tile 1
                   (8, 1, 0, 32, 8), (520, 65, 128, 544, 264)]     # both flip
    loads = [(a["buf"], a["dst"]) for op, a in got if op == "ld"]
    wbuf, widx, param = (isa.BUFFERS[b] for b in ("wbuf", "widx", "param"))
    assert loads == [(wbuf, 32), (widx, 8), (param, 3), (wbuf, 544), (widx, 264), (param, 3)]
    _, _, flip = dispatch_arrays(prog)
    assert flip.tolist() == [0, 0, 0, 1, 0, 2, 2, 2, 3, 2, 0, 3, 0]  # the halt last


@pytest.mark.parametrize("seed", range(12))
def test_dispatch_arrays_and_count_match_the_sequencer(seed):
    """The vectorised stream (the re-roller's exactness check) is :func:`unroll`'s."""
    rng = np.random.default_rng(seed)
    prog = (_nested_example() if seed == 0 else _entry_example() if seed == 1
            else loop_program(rng, SMALL, flip=seed % 2 == 0).instrs)
    stream = unroll(prog, halves=half_sizes(SMALL))
    idx, ext, flip = dispatch_arrays(prog)
    assert dispatch_count(prog) == len(stream) == len(idx)
    assert idx.tolist() == [a for a, _ in stream]
    assert ext.tolist() == [i.args.get("ext", 0) if i.op in ("ld", "st") else 0 for _, i in stream]
    moved = [int(any(i.args[f] != prog[a].args[f] for f in ping_pong(i))) for a, i in stream]
    assert [m for m, i in zip(moved, stream) if ping_pong(i[1])] == \
        [f for f, i in zip(flip.tolist(), stream) if ping_pong(i[1])]
    if seed:
        assert any(i.op == "loop" for i in prog)
    if seed > 1 and seed % 2 == 0:
        flips = [i.args["count"] for i in prog if i.op == "loop" and i.args["flip"]]
        assert flips and any(moved) == (max(flips) > 1)


@pytest.mark.parametrize("prog,message,word", [
    ([make("loop", count=2, body=5), make("halt")], "runs past the ROM", 0),
    ([make("loop", count=2, body=2), make("loop", count=2, body=2), _cfg(1), _cfg(2),
      make("halt")], "leaves its enclosing body", 1),
    ([make("loop", count=2, body=isa.LOOP_DEPTH + 1 - k) for k in range(isa.LOOP_DEPTH + 1)] +
     [_cfg(1), make("halt")], f"nest deeper than {isa.LOOP_DEPTH}", isa.LOOP_DEPTH),
    ([_cfg(1)], "past the ROM .*no halt", 1),
])
def test_illegal_loops_fault_at_the_loop_word(prog, message, word):
    with pytest.raises(ExecutionError, match=message) as e:
        unroll(prog)
    assert (e.value.fault, e.value.address) == ("ILLEGAL", word)


def test_entry_outside_the_body_is_an_illegal_word():
    entry = isa.OPCODE_BY_NAME["loop"].offsets["entry"]
    word = isa.encode(make("loop", count=2, body=3, entry=2)) | (3 << entry)
    with pytest.raises(Exception, match="entry 3 must lie inside the body"):
        isa.decode(word)


def test_zero_body_is_an_illegal_word():
    word = isa.encode(make("loop", count=2, body=1)) & ~(0xFFF << 32)
    with pytest.raises(Exception, match="body must hold at least one word"):
        isa.decode(word)


def test_cache_counts_hits_misses_and_prefetches():
    c = InstructionCache(lines=4, rom_words=40)
    for a in range(8):  # two lines: miss on line 0 (prefetch 1), hit line 1 (prefetch 2)
        c.access(a, 0)
    assert (c.stats.misses, c.stats.hits, c.stats.prefetches) == (1, 7, 2)
    c.access(16, 0)     # line 4 maps onto line 0's slot: a miss, prefetching line 5
    c.access(0, 0)      # line 0 was evicted: a miss again
    assert (c.stats.misses, c.stats.prefetches) == (3, 4)  # line 5 then line 1 again


def _tiles_program(looped: bool, a_values: np.ndarray) -> Program:
    """Requantise ``tiles`` rows of ``n`` int8 values, one tile per iteration, with the
    load / compute / store token protocol a loop body needs (each iteration's tokens
    balance): LD -> VX (acc loaded), VX -> LD (acc free), VX -> ST (obuf ready), ST -> VX
    (obuf free)."""
    from snpu.verif import numerics

    LD, VX, ST = isa.Unit.LD, isa.Unit.VX, isa.Unit.ST
    P = SMALL.lanes
    tiles, n = a_values.shape
    p = Program(SMALL, mem_bytes=1 << 16, rom_bytes=1 << 12)
    a = p.data("a", a_values)
    y = p.space("y", (tiles, n))
    prm = numerics.pack_params(np.zeros(P, np.int64), np.full(P, 1 << 14), np.full(P, 15))
    p.emit("ld", buf="param", ext=p.data("params", prm, "params"), dst=0, cols=prm.size,
           signal=[VX])
    p.emit("cfg", reg="vx.src_stride", value=0, wait=[LD], signal=[LD])  # acc starts free
    p.emit("cfg", reg="st.src_stride", value=0, signal=[VX])              # obuf starts free
    body = [make("ld", buf="acc", ext=a, dst=0, cols=n, walk=1, wait=[VX], signal=[VX]),
            make("req", dst=0, src=0, param=0, n_i=n // P, wait=[LD, ST], signal=[LD, ST]),
            make("st", src=0, ext=y, cols=n, walk=1, wait=[VX], signal=[VX])]
    if looped:
        p.instrs.append(make("loop", count=tiles, body=len(body), in_inc=n, out_inc=n))
        p.instrs += body
    else:
        for t in range(tiles):
            p.instrs += [make(i.op, wait=i.wait, signal=i.signal,
                              **{**i.args, "walk": 0, "ext": i.args["ext"] + t * n})
                         if i.op in ("ld", "st") else i for i in body]
    p.emit("cfg", reg="ld.thresh", value=0, wait=[VX])      # the last iteration's tokens
    p.emit("cfg", reg="vx.dst_stride", value=0, wait=[ST])
    p.emit("halt")
    return p


def test_looped_program_equals_its_unrolled_form_on_the_golden_model():
    """Tiles walked by a loop give the bytes of the unrolled program, race-free; the loop's
    body is fetched once, then hits."""
    a_values = np.random.default_rng(3).integers(-50, 50, (6, 8), dtype=np.int8)
    runs = []
    for looped in (False, True):
        p = _tiles_program(looped, a_values)
        r = golden.run_image(p.place_rom(), p.image, SMALL)
        y = p.image.region("y")
        runs.append((r, len(p.instrs), r.ext[y.addr:y.end]))
    (r0, n0, y0), (r1, n1, y1) = runs
    np.testing.assert_array_equal(y0, y1)
    assert y0.any()
    assert r0.stats.instructions == r1.stats.instructions and n1 < n0
    assert r1.stats.icache_misses == 1 and r1.stats.icache_hits >= 3 * 6
