"""``--optimize speed`` (compiler/emit.py with ``overlap``): precise tokens decided from what
each unit took itself, loops that take their last iteration in, carriers after sealed loop
words, channels drained at ``halt``.  The programs do what full emission does, in tokens
only differently: the same instructions, race-free on the golden model, every channel
balanced; real models stay bit-exact with the int8 reference."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from snpu.compiler import check, runtime
from snpu.compiler.passes import codegen as codegen_pass
from snpu.compiler.emit import Kernels
from snpu.compiler.pipeline import CompileOptions, compile_model
from snpu.config import CoreConfig
from snpu.errors import CompileError
from snpu.verif import golden, isa
from snpu.verif.image import MemoryImage
from snpu.verif.numerics import pack_params
from snpu.verif.program import Program
from snpu.verif.sequencer import half_sizes, unroll

from .models import TEST_CORE, dense_cnn, fire_cnn, inputs, tiny_cnn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import branchy  # noqa: E402
import unet  # noqa: E402

ZOO = Path(__import__("onnx").__file__).parent / "backend/test/data/light"
P = TEST_CORE.lanes
OUT = slice(0x20000, 0x30000)


def _kernels(loops: bool, mode: str = "overlap") -> Kernels:
    """An emitter for speed (``mode="credits"``: the default mode's) over an image with
    random inputs at 0x10000 and two rows of requantisation parameters at 0x8000."""
    image = MemoryImage(1 << 20)
    image.add_region("rom", 0, 1 << 14, "rom")
    rng = np.random.default_rng(5)
    image.data[0x10000:0x18000] = rng.integers(0, 256, 0x8000, np.uint8)
    params = pack_params(rng.integers(-50, 50, 2 * P), np.full(2 * P, 3), np.ones(2 * P))
    image.data[0x8000:0x8000 + params.size] = params
    return Kernels(Program(TEST_CORE, image=image), loops=loops, **{mode: True})


def _tile(k: Kernels, i: int) -> None:
    """Tile ``i``: 32 input bytes into acc half ``i % 2``, requantised into obuf half
    ``i % 2``, stored to ``0x20000 + 32 i``."""
    half = i % 2
    k.ld("acc", 0x10000 + 32 * i, half * 64, 32)
    k.req(half * 32, half * 64, 0, 2, 2, src_stride=P * 2, dst_stride=P * 2)
    k.st(half * 32, 0x20000 + 32 * i, 32)


def _work(k: Kernels) -> list:
    """What a program dispatches, tokens aside: its instructions as dispatched (walks
    applied) without the ``cfg`` words that rewrite a register with the value it holds
    (token no-ops and carriers)."""
    regs = {r.name: r.reset for r in isa.REGISTERS}
    out = []
    for _, ins in unroll(k.p.instrs, halves=half_sizes(k.p.config)):
        if ins.op == "cfg":
            name = isa.REGISTER_BY_NUMBER[ins.args["reg"]].name
            writes = [(name, ins.args["value"])]
            if ins.args["two"]:
                writes.append((isa.REGISTER_BY_NUMBER[ins.args["reg2"]].name, ins.args["value2"]))
            if all(regs[n] == v for n, v in writes):
                continue
            regs.update(writes)
        args = {a: v for a, v in ins.args.items() if a != "walk"}
        out.append((ins.op, tuple(sorted(args.items()))))
    return out


def _balanced(instrs, config: CoreConfig = TEST_CORE) -> None:
    """Every channel ends the program empty: as many waits as signals."""
    given, taken = {}, {}
    for _, ins in unroll(instrs, halves=half_sizes(config)):
        for u in ins.signal:
            given[(ins.unit, u)] = given.get((ins.unit, u), 0) + 1
        for v in ins.wait:
            taken[(v, ins.unit)] = taken.get((v, ins.unit), 0) + 1
    assert given == taken


def _both(body, n: int, after=None, mode: str = "overlap"):
    """``n`` iterations of ``body(k, i)`` emitted flat and with loops, then ``after(k)``."""
    out = []
    for loops in (False, True):
        k = _kernels(loops, mode)
        k.ld("param", 0x8000, 0, 16 * P)  # the requantisations' parameters (2 rows)
        k.repeat(n, lambda i, k=k: body(k, i))
        if after:
            after(k)
        k.halt()
        out.append(k)
    return out


def _check(flat: Kernels, looped: Kernels) -> None:
    assert _work(looped) == _work(flat)
    for k in (flat, looped):
        _balanced(k.p.instrs, k.p.config)
    runs = [golden.run_image(k.p.place_rom(), k.p.image, TEST_CORE, check_races=True)
            for k in (flat, looped)]
    np.testing.assert_array_equal(runs[0].ext[OUT], runs[1].ext[OUT])
    assert runs[1].ext[OUT].any()


def test_a_loop_takes_its_last_iteration_in_and_later_code_takes_its_tokens():
    n = 30
    flat, looped = _both(lambda k, i: [_tile(k, 2 * i + j) for j in range(2)], n,
                         after=lambda k: _tile(k, 2 * n))
    _check(flat, looped)
    loops = [ins for ins in looped.p.instrs if ins.op == "loop"]
    assert len(loops) == 1
    start = looped.p.instrs.index(loops[0])
    # the loop runs every iteration from its first: nothing of the body is written out after
    # it but the tile emitted after the loop (3 instructions), its token no-ops and the halt
    assert start // 6 + loops[0].args["count"] == n
    assert len(looped.p.instrs) - start - 1 - loops[0].args["body"] <= 3 + 4 + 1


def _tile_b(k: Kernels, i: int) -> None:
    """Like :func:`_tile`, but into acc above the first tiles' (at 256) and from / to
    other external bytes."""
    half = i % 2
    k.ld("acc", 0x14000 + 32 * i, 256 + half * 64, 32)
    k.req(half * 32, 256 + half * 64, 0, 2, 2, src_stride=P * 2, dst_stride=P * 2)
    k.st(half * 32, 0x28000 + 32 * i, 32)


@pytest.mark.parametrize("take", [True, False])
def test_a_kernels_first_tiles_take_the_credits_the_loop_before_left(monkeypatch, take):
    """Default mode: the first loop leaves the tokens its next iteration would have taken
    (the req on each acc half tells the load two tiles on that the half is free).  The
    second loop's first loads touch no acc byte the first loop did, yet take those credits
    (``Emitter._take_credits``): its tiles then all wait alike and no token no-op skips
    the credits.  Without taking them, the third load's token (from the second loop's
    first req) comes after them, and two no-ops take them first."""
    if not take:
        monkeypatch.setattr(Kernels, "_take_credits", lambda *a: None)
    n = 10

    def second(k):
        k.repeat(n, lambda i: [_tile_b(k, 2 * i + j) for j in range(2)])

    flat, looped = _both(lambda k, i: [_tile(k, 2 * i + j) for j in range(2)], n, second,
                         mode="credits")
    _check(flat, looped)
    # both loops form while emitting: the first loop's records of the accumulators, which
    # the idle MX unit never learns of, decide no wait of the second (its units know them)
    assert sum(i.op == "loop" for i in looped.p.instrs) == 2
    assert flat.nops == 0  # flat: no loop carries credits out
    assert (_midway_nops(looped) == 0) == take
    if take:
        loads = [i for _, i in unroll(looped.p.instrs) if i.op == "ld" and i.args["dst"] >= 256]
        assert all(isa.Unit.VX in i.wait for i in loads)  # the first two as every later one


def _tile_c(k: Kernels, i: int) -> None:
    """Like :func:`_tile_b`, but its 32 bytes come in two loads (the two inputs of a sum)."""
    half = i % 2
    for part in (0, 16):
        k.ld("acc", 0x14000 + 32 * i + part, 256 + half * 64 + part, 16)
    k.req(half * 32, 256 + half * 64, 0, 2, 2, src_stride=P * 2, dst_stride=P * 2)
    k.st(half * 32, 0x28000 + 32 * i, 32)


def test_one_credit_per_tile_of_two_loads():
    """Default mode: the second kernel's tiles load their accumulators in two loads; only
    the first waits for the VX unit, the second follows it with no VX word between (one
    token covers both).  So the credits the first loop left go to the first loads of its
    first two tiles, which then wait as every later tile does."""
    n = 10
    flat, looped = _both(lambda k, i: [_tile(k, 2 * i + j) for j in range(2)], n,
                         lambda k: k.repeat(n, lambda i: [_tile_c(k, 2 * i + j) for j in range(2)]),
                         mode="credits")
    _check(flat, looped)
    loads = [i for _, i in unroll(looped.p.instrs) if i.op == "ld" and i.args["dst"] >= 256]
    assert [isa.Unit.VX in i.wait for i in loads] == [True, False] * (2 * n)
    assert _midway_nops(looped) == 0


def test_an_odd_row_left_over_is_emitted_before_the_loop():
    """Default mode: 27 rows of one tile each loop over row pairs (the ping-pong halves come
    back after two).  The row left over is emitted before the loop, not after it: the loop
    takes the kernel's last tile in and leaves its credits (a row after the loop gave the
    next kernel's tokens from its own words, unlike every other row, and stayed out of the
    loop); its flat first row waits as the later ones do (the credits of the loop before)."""
    from types import SimpleNamespace

    from snpu.compiler.kernels import loop_rows

    def rows(k):
        loop_rows(SimpleNamespace(k=k, _toggles={}), (0, 27), 2, lambda r: _tile_b(k, r))

    flat, looped = _both(lambda k, i: [_tile(k, 2 * i + j) for j in range(2)], 8, rows,
                         mode="credits")
    _check(flat, looped)
    words = looped.p.instrs
    last_loop = max(j for j, i in enumerate(words) if i.op == "loop")
    end = last_loop + 1 + words[last_loop].args["body"]
    assert not any(i.op in ("ld", "req", "st") for i in words[end:])
    assert _midway_nops(looped) == 0


def test_a_loop_left_flat_gives_the_credits_a_folded_one_would():
    """Default mode: a kernel's loop of three iterations (too few to prove a steady state)
    stays flat; its last iteration then gives the tokens the one before gave its next
    iteration, so its words are the others' (the re-roller rolls all three) and the next
    loop's first tiles take those tokens as credits."""
    flat, looped = _both(lambda k, i: [_tile(k, 2 * i + j) for j in range(2)], 3,
                         lambda k: k.repeat(8, lambda i: [_tile_b(k, 2 * i + j) for j in range(2)]),
                         mode="credits")
    _check(flat, looped)
    def tiles(k):  # the first loop's six tiles: (ld, req, st) each, after the param load
        words = [i for i in k.p.instrs if i.op in ("ld", "req", "st")][1:19]
        return [tuple((w.op, w.wait, w.signal) for w in words[3 * t:3 * t + 3]) for t in range(6)]
    t = tiles(looped)
    assert t[4] == t[2] and t[5] == t[3]  # the last iteration as the one before
    assert tiles(flat)[5] != tiles(flat)[3]  # without loops nothing is carried
    # the second loop's first loads take the credits: no no-op takes them
    assert _midway_nops(looped) == 0
    assert all(isa.Unit.VX in i.wait for i in looped.p.instrs
               if i.op == "ld" and i.args["dst"] >= 256)


def _midway_nops(k: Kernels) -> int:
    """Token no-ops before the program's last load, requantisation or store (the ones
    after it are the halt's, taking the tokens the last loop leaves)."""
    words = k.p.instrs
    last_work = max(j for j, i in enumerate(words) if i.op in ("ld", "req", "st"))
    return sum(1 for i in words[:last_work] if i.op == "cfg" and i.wait)


def test_code_reading_what_a_loop_stored_takes_its_token_from_a_carrier():
    """After the loop, a load reads what its last store wrote: the store is a word of the
    loop's body, whose tokens are the same in every iteration, so a ``cfg`` on the store
    unit after the loop gives the load its token."""
    n = 20
    flat, looped = _both(lambda k, i: [_tile(k, 2 * i + j) for j in range(2)], n,
                         after=lambda k: k.ld("acc", 0x20000 + 32 * (2 * n - 1), 0, 32))
    _check(flat, looped)
    st = isa.OPCODE_BY_NAME["st"].unit
    carriers = [ins for ins in looped.p.instrs
                if ins.op == "cfg" and ins.unit == st and isa.Unit.LD in ins.signal]
    assert len(carriers) == 1
    loads = [ins for ins in looped.p.instrs if ins.op == "ld" and ins.args["ext"] == 0x20000 + 32 * (2 * n - 1)]
    assert loads and st in loads[-1].wait


@pytest.mark.parametrize("early", [True, False])
def test_earlier_words_take_the_tokens_no_ops_would(monkeypatch, early):
    """Default mode: the loop leaves two credits on the channel from VX to LD.  A ``req``
    after it reads acc half 0 again, and the load into that half after it must wait for
    that ``req``'s token, which comes after the credits.  The two parameter loads emitted
    in between (LD's words since its latest wait on VX) take the credits, instead of two
    token no-ops before the load (``Emitter._early_waits``): the loads of parameters the
    loop does not read wait for nothing else."""
    if not early:
        monkeypatch.setattr(Kernels, "_early_waits", lambda *a: [])

    def after(k):  # rows 2 and 3 of the parameters: no instruction of the loop reads them
        k.ld("param", 0x8000, 16 * P, 8 * P)
        k.ld("param", 0x8000 + 8 * P, 24 * P, 8 * P)
        k.req(0, 0, 0, 2, 2, src_stride=P * 2, dst_stride=P * 2)
        k.ld("acc", 0x10000, 0, 32)

    flat, looped = _both(lambda k, i: [_tile(k, 2 * i + j) for j in range(2)], 10, after,
                         mode="credits")
    _check(flat, looped)
    params = [i for i in looped.p.instrs if i.op == "ld" and i.args["buf"] == isa.BUFFERS["param"]]
    assert [isa.Unit.VX in i.wait for i in params] == [False, early, early]
    assert _midway_nops(looped) == (0 if early else 2)


def test_kernel_boundaries_wait_like_steady_tiles():
    """Default mode on a chain of kernels of different kinds (convolution, batch norm,
    pooling, 1x1 convolution, residual sum, 1x1 convolution): the batch norm's and the
    pooling's first tiles wait as their later tiles do, so each walks its map in one loop
    (``Emitter.prime``); no load into the accumulators waits for MX (the convolutions'
    credits on MX wait for the next convolution's neuron loads, ``credit_for``, and a
    wait another implies is left out after a loop too); the program is race-free and
    bit-exact, in few words."""
    m = dense_cnn()
    c = compile_model(m, CompileOptions(config=TEST_CORE, density=0.5))
    (seg,) = [s for s in c.report["segments"] if s["kind"] == "core"]
    words = [isa.decode(w) for w in c.graph.meta["segments"][0]["words"]]
    _balanced(words)
    loads = {b: [j for j, i in enumerate(words) if i.op == "ld" and i.args["buf"] == isa.BUFFERS[b]]
             for b in ("acc", "wbuf")}
    into_acc = loads["acc"]
    assert into_acc and not any(isa.Unit.MX in words[j].wait for j in into_acc)
    maps = [j for j in into_acc if j < loads["wbuf"][1]]  # the batch norm's and the pooling's
    assert maps and all(words[j].wait == {isa.Unit.VX} for j in maps)
    for j in maps:  # each a word of a loop's body
        assert any(w.op == "loop" and w.args["count"] >= 16 and h < j <= h + w.args["body"]
                   for h, w in enumerate(words[:j]))
    assert seg["instructions"] <= 100 and seg["dispatched_instructions"] >= 600
    xs = inputs(m, 1)
    reps = runtime.run_batch(c, xs, check_races=True)
    assert check.compare(c, xs, reps, onnxruntime=False).bit_exact == 1


@pytest.mark.parametrize("seed", range(12))
def test_random_loops_keep_the_work_and_stay_race_free(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    per = int(rng.integers(1, 4)) * 2
    pro = int(rng.integers(0, 4))
    src = int(rng.choice([0x10000, 0x14000]))
    step = int(rng.choice([32, 64]))

    def body(k, i):
        for j in range(per):
            t = per * i + j
            half = t % 2
            k.ld("acc", src + step * t, half * 64, 32)
            k.req(half * 32, half * 64, 0, 2, 2, src_stride=P * 2, dst_stride=P * 2)
            k.st(half * 32, 0x20000 + 32 * t, 32)

    def after(k):
        for j in range(pro):
            k.ld("acc", 0x20000 + 32 * j, 0, 32)  # reads what the loop stored
            k.req(0, 0, 0, 2, 2, src_stride=P * 2, dst_stride=P * 2)
            k.st(0, 0x28000 + 32 * j, 32)

    _check(*_both(body, n, after))


@pytest.mark.parametrize("build", [
    lambda: tiny_cnn(1), lambda: fire_cnn(2),
    lambda: unet.build(0, depth=3, channels=8, size=24),
    lambda: branchy.build(2, blocks=2, channels=16, size=20),
], ids=["tiny_cnn", "fire_cnn", "unet", "branchy"])
def test_models_compiled_for_speed_are_race_free_and_bit_exact(build):
    m = build()
    xs = inputs(m, 2)
    runs = {}
    for optimize in ("size", "speed"):
        c = compile_model(m, CompileOptions(config=TEST_CORE, density=0.5, optimize=optimize))
        assert c.report["options"]["optimize"] == optimize
        for s in c.graph.meta["segments"]:
            if s["kind"] == "core":
                _balanced([isa.decode(w) for w in s["words"]])
        reps = runtime.run_batch(c, xs, check_races=True)
        assert check.compare(c, xs, reps, onnxruntime=False).bit_exact == len(xs)
        runs[optimize] = reps
    for a, b in zip(runs["size"], runs["speed"]):
        for name in a.outputs_int8:
            np.testing.assert_array_equal(a.outputs_int8[name], b.outputs_int8[name])


@pytest.mark.parametrize("races", [
    False, pytest.param(True, marks=pytest.mark.skipif(
        not os.environ.get("SNPU_ZOO"), reason="set SNPU_ZOO=1 to race-check (about 2 min)"))],
    ids=["bit-exact", "race-checked"])
def test_a_zoo_network_compiled_for_speed(races):
    c = compile_model(ZOO / "light_squeezenet.onnx",
                      CompileOptions(random_weights=0, density=0.5, calibration_count=2,
                                     optimize="speed"))
    g = c.graph
    x = [np.random.default_rng(9).standard_normal(g.tensor(g.inputs[0]).shape).astype(np.float32)]
    reps = runtime.run_batch(c, x, check_races=races)
    assert check.compare(c, x, reps, onnxruntime=False).bit_exact == 1


def test_bad_optimize_settings_are_errors():
    with pytest.raises(CompileError, match="'fast' is not size or speed"):
        compile_model(tiny_cnn(0), CompileOptions(config=TEST_CORE, optimize="fast"))
    with pytest.raises(CompileError, match="on a mesh use --optimize size"):
        compile_model(tiny_cnn(0), CompileOptions(config=TEST_CORE, optimize="speed", mesh=(2, 2)))
    one = CoreConfig(**{**TEST_CORE.to_dict(), "token_depth": 1})
    with pytest.raises(CompileError, match="needs token_depth >= 2, the core has 1"):
        compile_model(tiny_cnn(0), CompileOptions(config=one, optimize="speed"))


@pytest.mark.parametrize("depth", [2, 3])
def test_shallow_token_channels(depth):
    """Two tokens in flight per channel is all speed mode needs: with channels of 2 or 3
    tokens no loop leaves tokens behind it, and the programs run (no deadlock)."""
    cfg = CoreConfig(**{**TEST_CORE.to_dict(), "token_depth": depth})
    m = tiny_cnn(4)
    xs = inputs(m, 1)
    c = compile_model(m, CompileOptions(config=cfg, density=0.3, optimize="speed"))
    reps = runtime.run_batch(c, xs, check_races=True)
    assert check.compare(c, xs, reps, onnxruntime=False).bit_exact == 1


def test_tokens_from_before_a_loop_keep_its_first_iterations_steady(monkeypatch):
    """A loop's first iterations may take precise tokens from the words before the loop
    (not only the latest instruction's): they then wait as the steady iterations do and
    the loop takes them in -- fewer words, race-free, bit-exact (the default mode; the
    speed mode has them too)."""
    m = tiny_cnn(4)
    xs = inputs(m, 1)
    opts = CompileOptions(config=TEST_CORE, density=0.3)
    words = {}
    for pre_loop in (True, False):
        with monkeypatch.context() as mp:
            if not pre_loop:
                run = codegen_pass._codegen
                mp.setattr(codegen_pass, "_codegen", lambda *a: run(*a[:-1], False))
            c = compile_model(m, opts)
        words[pre_loop] = sum(s.get("instructions", 0) for s in c.report["segments"])
        reps = runtime.run_batch(c, xs, check_races=True)
        assert check.compare(c, xs, reps, onnxruntime=False).bit_exact == 1
    assert words[True] < words[False]


def test_channels_too_shallow_for_tokens_from_before_a_loop(monkeypatch):
    """Where tokens from before loops would fill a channel (the timing-free check,
    :mod:`snpu.verif.token_flow`, finds the deadlock; here made to for the first try),
    codegen emits the program again without them, and it runs.  A program that
    deadlocks even then is an error, in either mode."""
    tries = []
    run = codegen_pass._codegen
    monkeypatch.setattr(codegen_pass, "_codegen", lambda *a: (tries.append(a[-1]), run(*a))[1])
    cfg = CoreConfig(**{**TEST_CORE.to_dict(), "token_depth": 2})
    m = tiny_cnn(4)
    real, checks = codegen_pass.deadlock, []
    monkeypatch.setattr(codegen_pass, "deadlock",  # the first try would deadlock
                        lambda *a: checks.append(1) or ("stuck" if len(checks) == 1 else real(*a)))
    c = compile_model(m, CompileOptions(config=cfg, density=0.3, optimize="speed"))
    assert tries == [True, False]
    xs = inputs(m, 1)
    assert check.compare(c, xs, runtime.run_batch(c, xs), onnxruntime=False).bit_exact == 1
    monkeypatch.setattr(codegen_pass, "deadlock", lambda *a: "ST waits for ever")
    with pytest.raises(CompileError, match="would deadlock on its token channels.*ST waits"
                                           ".*or --optimize size"):
        compile_model(m, CompileOptions(config=cfg, density=0.3, optimize="speed"))
    # the default mode's programs are checked too: an error, not a hang
    with pytest.raises(CompileError, match="would deadlock on its token channels.*ST waits"):
        compile_model(m, CompileOptions(config=cfg, density=0.3))


def test_the_default_mode_falls_back_to_latest_tokens(monkeypatch):
    """A segment that would deadlock with precise tokens from before loops is emitted again
    without them, then with every token from the latest instruction; the report says which
    tokens it has.  On an array, a core's program that would deadlock sends the segment to
    latest tokens; one that deadlocks with those too is an error."""
    from snpu.compiler.passes import codegen_mesh

    m = tiny_cnn(4)
    xs = inputs(m, 1)
    real, checks = codegen_pass.deadlock, []
    monkeypatch.setattr(codegen_pass, "deadlock",  # the first two tries would deadlock
                        lambda *a: checks.append(1) or ("stuck" if len(checks) <= 2 else real(*a)))
    c = compile_model(m, CompileOptions(config=TEST_CORE, density=0.3))
    (seg,) = [s for s in c.report["segments"] if s["kind"] == "core"]
    assert seg["tokens"] == "latest" and len(checks) == 3
    assert check.compare(c, xs, runtime.run_batch(c, xs, check_races=True),
                         onnxruntime=False).bit_exact == 1
    monkeypatch.setattr(codegen_pass, "deadlock", real)
    assert [s["tokens"] for s in compile_model(m, CompileOptions(config=TEST_CORE, density=0.3))
            .report["segments"] if s["kind"] == "core"] == ["credits from before loops"]

    opts = CompileOptions(config=TEST_CORE, density=0.3, mesh=(2, 1))
    assert {s["tokens"] for s in compile_model(m, opts).report["segments"]
            if s["kind"] == "core"} == {"credits"}
    monkeypatch.setattr(codegen_mesh._Segment, "deadlock",
                        lambda seg: "stuck" if next(iter(seg.em.values())).fold else None)
    c = compile_model(m, opts)
    assert {s["tokens"] for s in c.report["segments"] if s["kind"] == "core"} == {"latest"}
    assert check.compare(c, xs, runtime.run_batch(c, xs, check_races=True),
                         onnxruntime=False).bit_exact == 1
    monkeypatch.setattr(codegen_mesh._Segment, "deadlock", lambda seg: "ST waits for ever")
    with pytest.raises(CompileError, match="would deadlock on its token channels.*ST waits"):
        compile_model(m, opts)
