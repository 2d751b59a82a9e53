"""Dispatcher (the program sequencer and decoder): the RTL legality check agrees with the
ISA's decoder on random words, legal words become the microinstruction of the right unit,
and looped programs are dispatched exactly as the golden sequencer unrolls them."""

import random

import numpy as np
import pytest
from hypothesis import given, settings
from amaranth import Elaboratable, Module, Signal
from hypothesis import strategies as st

from snpu.config import CoreConfig
from snpu.errors import ExecutionError, IllegalInstruction
from snpu.rtl.dispatch import Dispatcher
from snpu.rtl.microcode import PC_BITS, UNITS, op_codes
from snpu.rtl.predecode import Predecoder
from snpu.rtl.status import ErrorCode
from snpu.verif import isa, progen
from snpu.verif.sequencer import LINE_WORDS, half_sizes, unroll
from snpu.verif.tb.amaranth_sim import seeded, simulate

from ..verif.strategies import legal_instr


class _Predecoded(Elaboratable):
    """The dispatcher behind the RTL predecoder, as the instruction cache feeds it: the
    test's cache model gives plain words (``word``, ``pc``)."""

    def __init__(self, config=None):
        self.disp = Dispatcher(config)
        self.word = Signal(128)
        self.pc = Signal(PC_BITS)

    def __getattr__(self, name):
        return getattr(self.__dict__["disp"], name)

    def elaborate(self, platform):
        m = Module()
        m.submodules.disp = disp = self.disp
        m.submodules.pre = pre = Predecoder()
        resp = disp.fetch_resp.payload
        m.d.comb += [pre.word.eq(self.word), resp.word.eq(self.word), resp.pc.eq(self.pc),
                     resp.pre.eq(pre.out)]
        return m


def _dispatch(words, rng=None, units_idle=True, config=None):
    """Run the dispatcher (of a core of ``config``) over a ROM served by a model cache
    (random latency with ``rng``); returns [(unit, micro)] until halt or an error, and the
    final (error, error_pc)."""
    dut = _Predecoded(config)
    out, res, announced = [], {}, []
    rom = list(words)

    async def cache(ctx):
        # one request at a time: take it, answer after a random delay, wait until taken
        # (plain ticks: this process is abandoned when the simulation ends)
        ctx.set(dut.fetch_req.ready, 1)
        while True:
            _, _, valid, req = await ctx.tick().sample(dut.fetch_req.valid, dut.fetch_req.payload)
            if not valid:
                continue
            addr = req.pc
            ctx.set(dut.fetch_req.ready, 0)
            if rng is not None:
                for _ in range(rng.choice([0, 0, 0, 1, 3])):
                    await ctx.tick()
            ctx.set(dut.fetch_resp.valid, 1)
            ctx.set(dut.word, rom[addr] if addr < len(rom) else 0)
            ctx.set(dut.pc, addr)
            while True:
                _, _, taken = await ctx.tick().sample(dut.fetch_resp.ready)
                if taken:
                    break
            ctx.set(dut.fetch_resp.valid, 0)
            ctx.set(dut.fetch_req.ready, 1)

    async def control(ctx):
        ctx.set(dut.rom_words, len(rom))
        ctx.set(dut.units_idle, int(units_idle))
        for u in UNITS:
            ctx.set(dut.queue(u).ready, 1)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        for _ in range(40 * len(rom) + 2000):
            await ctx.tick()
            if ctx.get(dut.halted) or ctx.get(dut.error) != ErrorCode.NONE:
                break
        await ctx.tick().repeat(2)
        res["error"], res["pc"] = ctx.get(dut.error), ctx.get(dut.error_pc)

    async def monitor(ctx):
        while True:
            _, _, *v = await ctx.tick().sample(*[dut.queue(u).valid for u in UNITS],
                                               *[dut.queue(u).payload for u in UNITS])
            for k, u in enumerate(UNITS):
                if v[k]:
                    out.append((u, v[len(UNITS) + k]))

    async def promise(ctx):
        # the cache reads the next request's word as the current word goes: the request a
        # cycle after `fetch_next_load` is `fetch_next_pc`, and it changes at no other time;
        # `fetch_next_line` is the line after its line
        expect = None
        line_bits = len(dut.fetch_next_line)
        while True:
            _, _, load, nxt, nxt_line, pc = await ctx.tick().sample(
                dut.fetch_next_load, dut.fetch_next_pc, dut.fetch_next_line,
                dut.fetch_req.payload.pc)
            if expect is not None:
                assert pc == expect, f"request {pc}, fetch_next_pc said {expect}"
            if load:
                assert nxt_line == (nxt // LINE_WORDS + 1) % (1 << line_bits), \
                    f"fetch_next_line {nxt_line} after fetch_next_pc {nxt}"
                expect = nxt
            elif expect is None:
                expect = pc
            announced.append(load)

    simulate(dut, control, processes=[cache, monitor, promise], deadline_cycles=60 * len(rom) + 5000)
    assert any(announced)
    return out, res


def _check_micro(u, micro, ins):
    assert micro.op == op_codes(u)[ins.op]
    assert micro.wait == sum(1 << int(x) for x in ins.wait)
    assert micro.signal == sum(1 << int(x) for x in ins.signal)
    if ins.op == "cfg":
        reg = isa.REGISTER_BY_NUMBER[ins.reg]
        assert (micro.args.cfg.index, micro.args.cfg.value) == (reg.index, ins.value)
        assert micro.args.cfg.two == ins.two
        if ins.two:
            reg2 = isa.REGISTER_BY_NUMBER[ins.reg2]
            assert (micro.args.cfg.index2, micro.args.cfg.value2) == (reg2.index, ins.value2)
    else:
        member = getattr(micro.args, ins.op)
        for f in ins.opcode.fields:
            v = getattr(member, f.name)
            if f.name == "ext" and "walk" in ins.opcode.offsets:
                v = (v + micro.walk) & 0xFFFF_FFFF  # the unit's front end adds the loops' offset
            assert v == ins.args[f.name], f.name


def _check_stream(out, expected):
    """The dispatcher's microinstructions ``out`` are the golden stream ``expected``."""
    assert [u for u, _ in out] == [i.unit for i in expected]
    for (u, micro), ins in zip(out, expected):
        _check_micro(u, micro, ins)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.integers(0, (1 << 128) - 1),
                          legal_instr().filter(lambda i: i.op != "loop").map(isa.encode)),
                min_size=1, max_size=12))
def test_legality_matches_the_isa(words):
    expected, first_bad, halted = [], None, False
    for pc, w in enumerate(words):
        try:
            ins = isa.decode(w)
        except IllegalInstruction:
            first_bad = pc
            break
        if ins.op == "halt":
            halted = True
            break
        if ins.unit is not None:
            expected.append(ins)
    out, res = _dispatch(words)
    if first_bad is not None:
        assert res == {"error": ErrorCode.ILLEGAL, "pc": first_bad}
    elif not halted:  # ran off the end of the ROM
        assert res == {"error": ErrorCode.ILLEGAL, "pc": len(words)}
    else:
        assert res["error"] == ErrorCode.NONE
    _check_stream(out, expected)


SMALL = CoreConfig(lanes=4, nbuf_bytes=1024, nidx_bytes=128, wbuf_bytes=1024, widx_bytes=512,
                   acc_words=64, obuf_bytes=256, param_rows=8)


@pytest.mark.parametrize("seed", range(6))
@seeded
def test_loops_dispatch_the_unrolled_stream(seed):
    """Nested, zero-trip and one-trip loops, walking loads and stores, flipping halves,
    bodies of any length, a cache answering after random delays: the microinstructions
    are the golden sequencer's stream, ext offsets and flipped halves included."""
    p = progen.loop_program(np.random.default_rng(seed), SMALL, flip=seed % 2 == 1)
    words = p.place_rom()
    expected = [ins for _, ins in unroll(isa.decode_program(words), halves=half_sizes(SMALL))
                if ins.unit is not None]
    out, res = _dispatch(words, random.Random(seed), config=SMALL)
    assert res["error"] == ErrorCode.NONE
    _check_stream(out, expected)


def _cfg(value):
    return isa.make("cfg", reg="vx.k1_stride", value=value)


@pytest.mark.parametrize("prog", [
    # a zero-trip loop whose body ends the enclosing one: the skip jumps back, then pops
    [isa.make("loop", count=3, body=3), _cfg(1), isa.make("loop", count=0, body=1), _cfg(2),
     _cfg(3), isa.make("halt")],
    # ... ends two enclosing bodies at once: the inner jumps back, then both pop
    [isa.make("loop", count=2, body=5), _cfg(1), isa.make("loop", count=2, body=3), _cfg(2),
     isa.make("loop", count=0, body=1), _cfg(3), _cfg(4), isa.make("halt")],
    # ... is the first word of the body of the loop just pushed (the frames change the
    # cycle before it arrives)
    [_cfg(1), isa.make("loop", count=3, body=2), isa.make("loop", count=0, body=1), _cfg(2),
     _cfg(3), isa.make("halt")],
    # nested pushes back to back, the innermost zero-trip ending all three bodies
    [isa.make("loop", count=2, body=3), isa.make("loop", count=2, body=2),
     isa.make("loop", count=0, body=1), _cfg(2), _cfg(3), isa.make("halt")],
    # a one-trip loop ending the enclosing body, and a one-word body ending two
    [isa.make("loop", count=2, body=5), _cfg(1), isa.make("loop", count=3, body=3), _cfg(2),
     isa.make("loop", count=1, body=1), _cfg(3), _cfg(4), isa.make("halt")],
])
@pytest.mark.parametrize("delays", [False, True])
def test_loops_ending_together_dispatch_the_unrolled_stream(prog, delays):
    """Loops whose bodies end on the same word (zero-trip and one-trip ones among them),
    right after the frame that encloses them is pushed: the walk through the frames that
    end there, made before the word goes, gives the golden sequencer's stream."""
    words = [isa.encode(i) for i in prog]
    expected = [ins for _, ins in unroll(isa.decode_program(words)) if ins.unit is not None]
    out, res = _dispatch(words, random.Random(len(prog)) if delays else None)
    assert res["error"] == ErrorCode.NONE
    _check_stream(out, expected)


@pytest.mark.parametrize("prog,pc", [
    ([isa.make("loop", count=2, body=isa.LOOP_DEPTH + 1 - k) for k in range(isa.LOOP_DEPTH + 1)] +
     [isa.make("cfg", reg="vx.k1_stride", value=0), isa.make("halt")], isa.LOOP_DEPTH),
    ([isa.make("loop", count=2, body=3), isa.make("halt")], 0),
    ([isa.make("loop", count=2, body=1), isa.make("loop", count=2, body=2),
      isa.make("cfg", reg="vx.k1_stride", value=0), isa.make("halt")], 1),
])
def test_illegal_loops_match_the_golden_sequencer(prog, pc):
    with pytest.raises(ExecutionError) as e:
        unroll(prog)
    assert (e.value.fault, e.value.address) == ("ILLEGAL", pc)
    _, res = _dispatch([isa.encode(i) for i in prog])
    assert res == {"error": ErrorCode.ILLEGAL, "pc": pc}


def test_an_entry_outside_the_body_is_illegal():
    loop = isa.OPCODE_BY_NAME["loop"]
    words = [isa.encode(isa.make("cfg", reg="vx.k1_stride", value=0)),
             isa.encode(isa.make("loop", count=2, body=2, entry=1)) | (2 << loop.offsets["entry"]),
             isa.encode(isa.make("cfg", reg="vx.k1_stride", value=0)),
             isa.encode(isa.make("cfg", reg="vx.k1_stride", value=0)),
             isa.encode(isa.make("halt"))]
    _, res = _dispatch(words)
    assert res == {"error": ErrorCode.ILLEGAL, "pc": 1}


def test_nested_flip_loops_dispatch_the_golden_halves():
    """Two nested ``flip`` loops: their flips compose (the half inverts when an odd number
    of them are on odd iterations), on every kind of ping-pong operand, and weights,
    parameters and external addresses stay as written."""
    acc, ob, nb = SMALL.acc_elems // 2, SMALL.obuf_bytes // 2, SMALL.nbuf_bytes // 2
    prog = [isa.make("loop", count=3, body=8, flip=1, in_inc=16),
            isa.make("loop", count=2, body=6, flip=1, out_inc=8),
            isa.make("ld", buf="nbuf", ext=64, dst=nb + 4, cols=8, walk=1),
            isa.make("ld", buf="acc", ext=96, dst=8, cols=8),
            isa.make("ld", buf="param", ext=128, dst=1, cols=8),
            isa.make("fc", nbuf=8, nidx=1, wbuf=16, widx=4, acc=acc + 4, n_in=8, rows=4),
            isa.make("vew", dst=2, a=acc + 3, b=5, n_o=1, n_i=1, ma=1, mb=1),
            isa.make("st", src=ob + 2, ext=200, cols=8, walk=1),
            isa.make("req", dst=4, src=130, param=1, n_o=1, n_i=1),
            isa.make("halt")]
    words = [isa.encode(i) for i in prog]
    expected = [ins for _, ins in unroll(prog, halves=half_sizes(SMALL)) if ins.unit is not None]
    assert len({ins.args["nbuf"] for ins in expected if ins.op == "fc"}) == 2
    out, res = _dispatch(words, random.Random(7), config=SMALL)
    assert res["error"] == ErrorCode.NONE
    _check_stream(out, expected)


def test_flip_masks_dispatch_the_golden_halves_per_kind():
    """``flip`` bit 1 moves the weights' halves (``fc.wbuf`` / ``widx``, loads into wbuf /
    widx), bit 0 the activations'; nested loops with different masks compose per kind: a
    weight-tile loop flipping both around a pixel loop flipping the activations and one
    flipping the weights.  Parameters and external addresses stay as written."""
    wb, ib = SMALL.wbuf_bytes // 2, SMALL.widx_bytes // 2
    prog = [isa.make("loop", count=3, body=9, flip=3, w_inc=64),
            isa.make("ld", buf="wbuf", ext=64, dst=16, cols=8, walk=1),
            isa.make("ld", buf="widx", ext=96, dst=4, cols=8, walk=1),
            isa.make("ld", buf="param", ext=128, dst=1, cols=8),
            isa.make("loop", count=2, body=1, flip=1),
            isa.make("fc", nbuf=8, nidx=1, wbuf=16, widx=4, acc=4, n_in=8, rows=4),
            isa.make("loop", count=3, body=2, flip=2),
            isa.make("ld", buf="wbuf", ext=200, dst=wb + 8, cols=8),
            isa.make("fc", nbuf=8, nidx=1, wbuf=wb + 8, widx=ib, acc=4, n_in=8, rows=4),
            isa.make("ld", buf="nbuf", ext=300, dst=8, cols=8),
            isa.make("halt")]
    words = [isa.encode(i) for i in prog]
    expected = [ins for _, ins in unroll(prog, halves=half_sizes(SMALL)) if ins.unit is not None]
    fcs = {(ins.args["nbuf"], ins.args["wbuf"], ins.args["widx"]) for ins in expected if ins.op == "fc"}
    assert len({w for _, w, _ in fcs}) == 4 and len({n for n, _, _ in fcs}) == 2
    out, res = _dispatch(words, random.Random(11), config=SMALL)
    assert res["error"] == ErrorCode.NONE
    _check_stream(out, expected)
