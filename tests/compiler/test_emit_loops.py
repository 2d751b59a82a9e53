"""Loops formed while emitting (compiler/emit_loops.py): the program with them dispatches
exactly the instructions full emission gives, tokens included, on real models and on
synthetic loops built to trip the steady-state proof (in-place streams, kernel state that
does not come back, token patterns that settle late).  And the re-roller's work on them:
copies of a body beside its loop are taken in, small loops are re-rolled from flat words."""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from snpu.compiler.emit import Kernels
from snpu.compiler.passes.codegen import emit_nodes, subgraph_units
from snpu.compiler.passes.reroll import _splice, _unwalked, reroll, same_stream
from snpu.compiler.pipeline import CompileOptions, compile_model
from snpu.verif import isa
from snpu.verif.image import MemoryImage
from snpu.verif.program import Program
from snpu.verif.sequencer import dispatch_count, unroll

from .models import TEST_CORE, dense_cnn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import branchy  # noqa: E402
import unet  # noqa: E402

ZOO = Path(__import__("onnx").__file__).parent / "backend/test/data/light"


def _flat(instrs):
    return [_unwalked(i) for _, i in unroll(instrs)]


def _emit_both(compiled):
    """Every core subgraph emitted with and without loops on copies of the same image:
    (flat stream, looped program) pairs."""
    g, out = compiled.graph, []
    for k, sg in enumerate(g.meta["subgraphs"]):
        if sg["device"] != "core":
            continue
        progs = []
        for loops in (False, True):
            p = Program(compiled.config, image=compiled.image.copy_image(), rom_name=f"t{k}")
            em = Kernels(p, loops=loops)
            emit_nodes(em, g, subgraph_units(g, sg), f"t{k}:", 0, False)
            em.halt()
            progs.append(p.instrs)
        out.append(progs)
    return out


def _check_exact(compiled) -> int:
    """The looped emission unrolls to the flat one; returns how many loops it formed."""
    loops = 0
    for flat, looped in _emit_both(compiled):
        assert not any(i.op == "loop" for i in flat)
        assert _flat(looped) == flat
        assert dispatch_count(looped) == len(flat)
        loops += sum(i.op == "loop" for i in looped)
    return loops


@pytest.mark.parametrize("build", [
    lambda: unet.build(0, depth=3, channels=8, size=24),
    lambda: unet.build(1, depth=3, channels=8, size=24, resample=True),
    lambda: branchy.build(2, blocks=2, channels=16, size=20),
], ids=["unet", "unet-classic", "branchy"])
def test_loops_at_emission_dispatch_exactly_what_full_emission_does(build):
    c = compile_model(build(), CompileOptions(config=TEST_CORE))
    assert _check_exact(c) > 0


def test_a_zoo_model_forms_loops_at_emission_and_stays_exact():
    c = compile_model(ZOO / "light_squeezenet.onnx")
    assert _check_exact(c) > 10


def test_map_kernels_walk_their_rows_in_loops_at_emission():
    """Batch norm and pooling walk their maps in loops formed at emission
    (``kernels.walk_rows``), as convolutions do, in the default mode too: emission time
    stops growing with the map."""
    c = compile_model(dense_cnn(), CompileOptions(config=TEST_CORE))
    g = c.graph
    (sg,) = [sg for sg in g.meta["subgraphs"] if sg["device"] == "core"]
    p = Program(c.config, image=c.image.copy_image(), rom_name="t")
    em = Kernels(p, credits=True)
    emit_nodes(em, g, subgraph_units(g, sg), "t:", 0, False)
    em.halt()
    assert {"conv1", "bn1", "pool"} <= {p.tags[i] for i, ins in enumerate(p.instrs)
                                        if ins.op == "loop"}


@pytest.mark.skipif(not os.environ.get("SNPU_ZOO"), reason="set SNPU_ZOO=1 for every zoo model")
@pytest.mark.parametrize("name", ["resnet50", "inception_v1", "shufflenet", "densenet121",
                                  "bvlc_alexnet", "zfnet512", "vgg19", "inception_v2"])
def test_every_zoo_model_forms_loops_exactly(name):
    assert _check_exact(compile_model(ZOO / f"light_{name}.onnx")) > 0


# ---------------------------------------------------------------------------------------------
# Synthetic loops


def _program() -> tuple[Program, Kernels, Kernels]:
    image = MemoryImage(1 << 20)
    image.add_region("rom", 0, 1 << 12, "rom")
    a = Program(TEST_CORE, image=image.copy_image())
    b = Program(TEST_CORE, image=image.copy_image())
    return a, Kernels(a, loops=False), Kernels(b, loops=True)


def _both(body, n, state=lambda: None, prologue=None):
    """Emit ``n`` iterations of ``body(k, i)`` flat and as a loop; returns both programs."""
    _, flat, looped = _program()
    for k in (flat, looped):
        if prologue:
            prologue(k)
        k.repeat(n, lambda i, k=k: body(k, i), state)
        k.st(0, 0x9000, 8)  # code after the loop takes tokens from its last iteration
        k.halt()
    return flat.p.instrs, looped.p.instrs


def _tile(k: Kernels, i: int, src: int, dst: int, step_in: int, step_out: int) -> None:
    half = i % 2
    k.ld("acc", src + i * step_in, half * 64, 32)
    k.req(half * 32, half * 64, 0, 2, 2, src_stride=TEST_CORE.lanes * 2,
          dst_stride=TEST_CORE.lanes * 2)
    k.st(half * 32, dst + i * step_out, 32)


def _loops(instrs) -> int:
    return sum(i.op == "loop" for i in instrs)


def test_a_streaming_loop_becomes_one_hardware_loop():
    flat, looped = _both(lambda k, i: [_tile(k, 2 * i + j, 0x10000, 0x20000, 32, 32)
                                       for j in range(2)], 40)
    assert _flat(looped) == _flat(flat)
    assert _loops(looped) == 1 and len(looped) < len(flat) / 5


@pytest.mark.parametrize("step_out", [32, -32, 16, 64])
def test_a_loop_writing_over_what_it_reads_stays_exact(step_out):
    """In place: the stores walk over the region the loads read, at another step: the
    emitter's overlap tests change answer with the iteration, so no loop may form unless
    the ranges stay apart."""
    flat, looped = _both(lambda k, i: [_tile(k, 2 * i + j, 0x10000, 0x10000 + 96, 32, step_out)
                                       for j in range(2)], 30)
    assert _flat(looped) == _flat(flat)
    if step_out != 32:
        assert _loops(looped) == 0


def test_kernel_state_that_does_not_come_back_keeps_the_iterations_flat():
    """One tile per iteration: the ping-pong half alternates, so iterations differ."""
    toggles = {"n": 0}

    def body(k, i):
        toggles["n"] += 1
        _tile(k, i, 0x10000, 0x20000, 32, 32)

    flat, looped = _both(body, 20, state=lambda: toggles["n"] % 2)
    assert _flat(looped) == _flat(flat)
    assert _loops(looped) == 0


@pytest.mark.parametrize("seed", range(20))
def test_random_loops_dispatch_exactly_what_full_emission_does(seed):
    """Random bodies: tiles over random streams, some over the same region, a varying
    prologue whose tokens the loop settles after."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    per = int(rng.integers(1, 4)) * 2
    streams = [(int(rng.choice([0x10000, 0x14000, 0x20000])), int(rng.choice([0x20000, 0x10000 + 64 * int(rng.integers(0, 4))])),
                int(rng.choice([0, 32, 64, -32])), int(rng.choice([0, 32, 64, -32])))
               for _ in range(int(rng.integers(1, 3)))]
    pro = int(rng.integers(0, 5))

    def prologue(k):
        for j in range(pro):
            _tile(k, j, 0x30000, 0x10000 + 32 * j, 32, 0)

    def body(k, i):
        for j in range(per):
            src, dst, si, so = streams[j % len(streams)]
            _tile(k, per * i + j, src + 0x8000 * (si < 0), dst + 0x8000 * (so < 0), si, so)

    flat, looped = _both(body, n, prologue=prologue)
    assert _flat(looped) == _flat(flat)


# ---------------------------------------------------------------------------------------------
# The re-roller on loops from the emitter


def test_copies_beside_an_emitted_loop_are_taken_in():
    body = [isa.make("ld", buf="acc", ext=0x1000, dst=0, cols=8, walk=1),
            isa.make("st", src=0, ext=0x8000, cols=8, walk=1)]
    loop = isa.make("loop", count=3, body=2, in_inc=64, out_inc=16)

    def copy(t):
        return [_unwalked(isa.make(x.op, **{**x.args, "ext": x.args["ext"] + t * d}))
                for x, d in zip(body, (64, 16))]

    big = [isa.make("loop", count=600, body=2, in_inc=64, out_inc=16)]
    for head in (loop, big[0]):  # small loops are re-rolled from flat words, big ones kept
        prog = copy(-1) + [head] + body + copy(head.args["count"]) + [isa.make("halt")]
        out = reroll(prog)
        assert same_stream(out, prog)
        assert len(out) == 4 and out[0].args["count"] == head.args["count"] + 2


def _group(half: int, x: int, y: int) -> list:
    """A ping-pong pixel group: load into ``half``, requantise, store (tokens of a real
    kernel's steady state: the two halves wait and signal differently)."""
    LD, VX, ST = isa.Unit.LD, isa.Unit.VX, isa.Unit.ST
    return [isa.make("ld", buf="acc", ext=x, dst=64 * half, cols=8, wait=[VX] if half else [],
                     signal=[VX]),
            isa.make("req", dst=64 * half, src=64 * half, param=0, n_i=2, wait=[LD, ST],
                     signal=[LD, ST] if half else [ST]),
            isa.make("st", src=64 * half, ext=y, cols=8, wait=[VX], signal=[VX])]


def _rows(group, width: int, rows: int) -> list:
    """``rows`` rows of ``width`` pixel groups alternating halves, then ``halt``."""
    prog, k = [], 0
    for r in range(rows):
        for c in range(width):
            prog += group(k % 2, 0x1000 + 0x400 * r + 0x40 * c, 0x9000 + 0x200 * r + 0x20 * c)
            k += 1
    return prog + [isa.make("halt")]


@pytest.mark.parametrize("width,rows", [(7, 1), (5, 6), (9, 3), (9, 4), (3, 7), (2, 5)])
def test_rows_of_an_odd_number_of_ping_pong_groups_are_rotated_loops(width, rows):
    """Rows of an odd number of pixel groups alternate between starting on the first and
    on the second half: each row is a loop of group pairs entered at its second half where
    the row starts on it (``entry``), and the rows a loop of row pairs.  The stream is the
    flat program's, and the ROM does not grow with the width or the rows."""
    prog = _rows(_group, width, rows)
    out = reroll(prog)
    assert same_stream(out, prog)
    if width % 2:
        assert any(w.op == "loop" and w.args["entry"] for w in out)
    assert len(out) <= 24, "\n".join(map(str, out))


#: the halves of ``_group``'s buffers (acc and obuf halves of 64) and of the weight banks
HALVES = {"nbuf": 512, "nidx": 64, "acc": 64, "obuf": 64, "wbuf": 512, "widx": 256}


def _steady_group(half: int, x: int, y: int) -> list:
    """A ping-pong pixel group whose tokens are the same in both halves (precise tokens:
    the load waits for the requantisation two groups back)."""
    LD, VX, ST = isa.Unit.LD, isa.Unit.VX, isa.Unit.ST
    return [isa.make("ld", buf="acc", ext=x, dst=64 * half, cols=8, wait=[VX], signal=[VX]),
            isa.make("req", dst=64 * half, src=64 * half, param=0, n_i=2, wait=[LD, ST],
                     signal=[LD, ST]),
            isa.make("st", src=64 * half, ext=y, cols=8, wait=[VX], signal=[VX])]


@pytest.mark.parametrize("width,rows", [(8, 1), (7, 1), (4, 6), (5, 6), (9, 3), (3, 7), (1, 9)])
def test_groups_alternating_halves_become_flip_loops(width, rows):
    """Pixel groups alternating the halves of acc and obuf, with the same tokens in both:
    one group is the body of a ``flip`` loop (odd iterations use the other halves); rows
    of an odd number of groups start on alternate halves, and the loop over rows flips as
    well (nested flips compose).  The stream, flips applied, is the flat program's."""
    prog = _rows(_steady_group, width, rows)
    out = reroll(prog, halves=HALVES)
    assert same_stream(out, prog, HALVES)
    assert [_unwalked(i) for _, i in unroll(out, halves=HALVES)] == prog
    assert any(w.op == "loop" and w.args["flip"] for w in out)
    assert len(out) <= 6 + (width == 1), "\n".join(map(str, out))
    assert len(reroll(prog)) > len(out)  # without the halves: no flips, longer


def test_a_flip_loop_with_the_start_of_one_more_copy_is_rotated():
    """Groups that end on the first words of one more group: a rotated ``flip`` loop whose
    skipped words are written in the other half (the copy before the first)."""
    prog = []
    for k in range(5):
        prog += _steady_group(k % 2, 0x1000 + 0x40 * k, 0x9000 + 0x20 * k)
    prog += _steady_group(1, 0x1000 + 0x40 * 5, 0x9000 + 0x20 * 5)[:2]
    prog.append(isa.make("halt"))
    out = reroll(prog, halves=HALVES)
    assert same_stream(out, prog, HALVES)
    assert [_unwalked(i) for _, i in unroll(out, halves=HALVES)] == prog
    assert out[0].op == "loop" and out[0].args["flip"] and out[0].args["entry"]


@pytest.mark.parametrize("tiles,groups", [(5, 4), (5, 3), (2, 1), (7, 2)])
def test_weight_tiles_alternating_weight_halves_become_one_tile_loops(tiles, groups):
    """A convolution's weight tiles load into alternate halves of the weight banks, and
    each tile's pixel groups alternate the activations' halves: one weight tile is the
    body of a loop flipping the weights' halves (``flip`` bit 1), and the activations' too
    (bit 0) where a tile has an odd number of groups.  Without the weights' kind the body
    is two tiles."""
    LD, MX, VX, ST = isa.Unit.LD, isa.Unit.MX, isa.Unit.VX, isa.Unit.ST
    prog, g = [], 0
    for t in range(tiles):
        wb, ib = 512 * (t % 2), 256 * (t % 2)
        prog += [isa.make("ld", buf="wbuf", ext=0x8000 + 0x100 * t, dst=wb, cols=64, walk=1),
                 isa.make("ld", buf="widx", ext=0xC000 + 0x100 * t, dst=ib, cols=32, walk=1)]
        for _ in range(groups):
            h = g % 2
            prog += [isa.make("ld", buf="nbuf", ext=0x1000 + 0x40 * (g % groups), dst=512 * h,
                              cols=64, walk=1, wait=[MX], signal=[MX]),
                     isa.make("fc", nbuf=512 * h, nidx=64 * h, wbuf=wb, widx=ib, acc=64 * h,
                              n_in=64, rows=8, wait=[LD, VX], signal=[LD, VX]),
                     isa.make("req", dst=64 * h, src=64 * h, param=0, n_i=2, wait=[MX, ST],
                              signal=[MX, ST]),
                     isa.make("st", src=64 * h, ext=0x9000 + 0x20 * g, cols=8, walk=1,
                              wait=[VX], signal=[VX])]
            g += 1
    prog.append(isa.make("halt"))
    out = reroll(prog, halves=HALVES)
    assert same_stream(out, prog, HALVES)
    assert [_unwalked(i) for _, i in unroll(out, halves=HALVES)] == [_unwalked(i) for i in prog]
    flips = {w.args["flip"] for w in out if w.op == "loop" and w.args["count"] == tiles}
    assert flips == {2 | groups % 2}, "\n".join(map(str, out))
    assert len(out) <= 2 + 2 + 4 + 1 + 1, "\n".join(map(str, out))
    two = reroll(prog, halves=HALVES | {"wbuf": 1 << 20, "widx": 1 << 20})  # weights never flip
    assert len(two) > len(out)


def test_splice_takes_the_shorter_rolling_of_every_stretch_between_common_points():
    """Two rollings of one stream, each better on a different stretch: the splice takes
    each stretch from the one that rolled it shorter, cut where both are outside every
    loop having dispatched the same words, and dispatches the same stream."""
    def ld(k):
        return isa.make("ld", buf="acc", ext=0x1000 + 0x40 * k, dst=0, cols=8, walk=1)

    def st(k):
        return isa.make("st", src=0, ext=0x8000 + 0x40 * k, cols=8, walk=1)

    halt = isa.make("halt")
    first = [ld(k) for k in range(6)]
    second = [st(k) for k in range(5)]
    rolled_first = [isa.make("loop", count=6, body=1, in_inc=0x40), ld(0)]
    rolled_second = [isa.make("loop", count=5, body=1, out_inc=0x40), st(0)]
    a = rolled_first + second + [halt]
    b = first + rolled_second + [halt]
    out = _splice(a, b)
    assert out == rolled_first + rolled_second + [halt]
    assert same_stream(out, first + second + [halt])
    # a loop of one rolling across the other's cut: that stretch is taken whole
    across = [isa.make("loop", count=11, body=1), isa.make("cfg", reg="vx.k1_stride", value=0)]
    flat = [isa.make("cfg", reg="vx.k1_stride", value=0)] * 11
    assert _splice(across + [halt], flat[:6] + [isa.make("loop", count=5, body=1), flat[0], halt]) \
        == across + [halt]


def test_an_idle_network_unit_keeps_the_emitters_history_bounded():
    """A core of an array whose network unit stays idle (a batch split by images) never
    learns that the other units' accesses are done, so their records of external memory
    used to pile up (emission time grew with the square of the program).  Past
    ``HISTORY_CAP`` records, each unit's records of nearby ranges merge into one (the
    newest instruction's count): the history stays small and the program stays exact."""
    from snpu.compiler.emit import HISTORY_CAP, HISTORY_GAP, _coalesce

    recs = [(1, k + 1, 100 * k, 100 * k + 90, True, k) for k in range(10)]   # stores, 10 B apart
    recs += [(0, 5, 50_000, 50_100, False, 3)]                               # a load far away
    merged = _coalesce(recs)
    assert (1, 10, 0, 990, True, 9) in merged and (0, 5, 50_000, 50_100, False, 3) in merged
    assert len(merged) == 2
    far = [(1, 1, 0, 8, True, 0), (1, 2, 8 + HISTORY_GAP + 1, 9 + HISTORY_GAP + 8, True, 1)]
    assert _coalesce(far) == far                                              # too far apart

    em = Kernels(Program(TEST_CORE, image=MemoryImage(1 << 20)), net=True)
    for k in range(4 * HISTORY_CAP):                # loads and stores of separate rows
        em.ld("acc", 0x1000 + 512 * k, 0, 64)
        em.st(0, 0x40000 + 512 * k, 64)
    # pruned every 128 instructions: at most the cap plus what came since (not all 512)
    assert max(len(r) for r in em.history.values()) <= HISTORY_CAP + 128


def test_a_long_loop_keeps_only_the_tokens_it_may_still_read():
    """A loop fast-forwarded over 2 000 iterations gives one token per channel and iteration,
    but its channels' logs keep only the few after each channel's latest wait
    (``emit.TokenLog``): memory stays proportional to the instructions emitted.  The
    program stays exact, and a forgotten token says so if anything asks for it."""
    flat, looped = _both(lambda k, i: [_tile(k, 2 * i + j, 0x10000, 0x200000, 32, 32)
                                       for j in range(2)], 2000)
    assert _flat(looped) == _flat(flat)
    _, _, em = _program()
    em.repeat(2000, lambda i: [_tile(em, 2 * i + j, 0x10000, 0x200000, 32, 32) for j in range(2)])
    logs = [log for log in em.sig_list.values() if len(log) > 1000]
    assert logs, "the loop's tokens are counted in full"
    for log in logs:
        assert len(log.items) < 16 and log.base > 1000
        with pytest.raises(IndexError, match="forgotten"):
            log[0]


def test_an_emitter_loop_over_row_pairs_around_a_flip_loop_becomes_one_loop():
    """The emitter loops over pairs of rows when a row holds an odd number of ping-pong
    groups; re-rolled, the pair is a flip loop of two rows.  The two loops become one over
    all the rows (a nesting level fewer, which an enclosing loop over weight tiles needs)."""
    width, pairs = 5, 40  # more than UNROLL_LIMIT dispatched words: the loop is kept
    flat = _rows(_steady_group, width, 2)[:-1]  # the first row pair, as the loop's body
    row_in, row_out = 0x400, 0x200
    body = [isa.make(i.op, **{**i.args, "walk": 1}, wait=i.wait, signal=i.signal)
            if i.op in ("ld", "st") else i for i in flat]
    prog = ([isa.make("loop", count=pairs, body=len(body), in_inc=2 * row_in,
                      out_inc=2 * row_out)] + body + [isa.make("halt")])
    out = reroll(prog, halves=HALVES)
    assert same_stream(out, prog, HALVES)
    loops = [w for w in out if w.op == "loop"]
    assert loops[0].args["count"] == 2 * pairs and loops[0].args["flip"], "\n".join(map(str, out))
    assert len(loops) == 2 and len(out) <= 7, "\n".join(map(str, out))


def _tiles(tiles: int, rows: int, width: int) -> list:
    """``tiles`` weight tiles, each a weight load and ``rows`` rows of ``width`` ping-pong
    pixel groups (the same input for every tile, its own outputs), then ``halt``."""
    prog = []
    for t in range(tiles):
        prog.append(isa.make("ld", buf="wbuf", ext=0x40000 + 0x100 * t, dst=0, cols=64))
        k = 0
        for r in range(rows):
            for c in range(width):
                prog += _steady_group(k % 2, 0x1000 + 0x400 * r + 0x40 * c,
                                      0x9000 + 0x4000 * t + 0x200 * r + 0x20 * c)
                k += 1
    return prog + [isa.make("halt")]


@pytest.mark.parametrize("max_depth", [2, 3])
def test_an_inner_loop_too_deep_for_the_blocks_around_it_is_written_out(max_depth):
    """Rolled innermost first, a row's two pixel groups are a flip loop, the rows a loop
    around it, and the weight tiles around those would be one loop too deep.  The flip
    loops are then written out again inside the loop over rows, so that the tiles still
    become a loop: fewer words than three copies of the rows.  The stream is the flat
    program's, flips and walks applied."""
    prog = _tiles(3, 4, 2)
    inner = _tiles(1, 4, 2)
    out = reroll(prog, halves=HALVES, max_depth=max_depth)
    assert same_stream(out, prog, HALVES)
    assert [_unwalked(i) for _, i in unroll(out, halves=HALVES)] == prog
    assert out[0].op == "loop" and out[0].args["count"] == 3 and out[0].args["w_inc"] == 0x100
    assert len(out) < 2 * len(reroll(inner, halves=HALVES, max_depth=max_depth)), \
        "\n".join(map(str, out))
    depth, ends = 0, []
    for k, w in enumerate(out):
        ends = [e for e in ends if e >= k]
        if w.op == "loop":
            ends.append(k + w.body)
            depth = max(depth, len(ends))
    assert depth <= max_depth


def test_rows_of_uneven_pixel_groups_are_walked_in_two_passes():
    """A row of 14 pixels in groups of 5 is walked as 5, 5 in every row, then 4 in every
    row (each pass one loop over rows of equal groups), where the whole groups are an even
    number; 11 groups of 5 and one of 1 stay one pass (12 groups, the halves come back)."""
    from snpu.compiler.kernels import _pixel_groups, column_passes
    from snpu.compiler.memory import TensorLayout

    assert column_passes(14, 5) == [(0, 10), (10, 14)]
    assert column_passes(7, 3) == [(0, 6), (6, 7)]
    assert column_passes(56, 5) == [(0, 56)]
    assert column_passes(12, 4) == [(0, 12)] and column_passes(4, 5) == [(0, 4)]
    assert column_passes(14, 5, split=False) == [(0, 14)]
    X = TensorLayout(0, 3, 14, 8, 8, 14 * 8)
    groups = list(_pixel_groups(X, 5))
    assert groups == [(y, x, 5) for y in range(3) for x in (0, 5)] + [(y, 10, 4) for y in range(3)]
    assert list(_pixel_groups(X, 5, split=False)) == [(y, x, min(5, 14 - x)) for y in range(3)
                                                      for x in (0, 5, 10)]
    # a block of pixels (a core's share on an array): partial first and last rows
    part = list(_pixel_groups(X, 5, rows=(0, 3), cols=(3, 12)))
    covered = sorted((y, x + i) for y, x, g in part for i in range(g))
    assert covered == sorted({(0, x) for x in range(3, 14)} | {(1, x) for x in range(14)}
                             | {(2, x) for x in range(12)})
