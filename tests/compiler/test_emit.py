"""The emitter's dependency tokens (compiler/emit.py): precise tokens let a software-pipelined
kernel overlap its loads with the compute before them, race-free on the golden model, and
give the same dispatched stream flat and inside hardware loops."""

from __future__ import annotations

from snpu.compiler.emit import Kernels
from snpu.compiler.passes.reroll import _unwalked
from snpu.verif import golden, isa
from snpu.verif.image import MemoryImage
from snpu.verif.isa import Unit
from snpu.verif.program import Program
from snpu.verif.sequencer import unroll

from .models import TEST_CORE

P = TEST_CORE.lanes
OUT = slice(0x40000, 0x40000 + 256 * 32)  # what the steps store


def _kernels(loops: bool = False) -> Kernels:
    image = MemoryImage(1 << 20)
    image.add_region("rom", 0, 1 << 12, "rom")
    return Kernels(Program(TEST_CORE, image=image), loops=loops)


def _load(k: Kernels, i: int) -> None:
    """Step ``i``'s input: 256 bytes into acc half ``i % 2`` (a long load)."""
    k.ld("acc", 0x10000 + 256 * i, (i % 2) * 512, 256)


def _compute(k: Kernels, i: int) -> None:
    """Step ``i``'s work on the vector unit: read its acc half, write its obuf half, store."""
    half = i % 2
    k.req(half * 256, half * 512, 0, 4, 64 // P, src_stride=64, dst_stride=64)
    k.st(half * 256, 0x40000 + 256 * i, 256)


def _pipelined(k: Kernels, n: int) -> None:
    """Loads one step ahead of the compute in program order."""
    _load(k, 0)
    for i in range(n):
        if i + 1 < n:
            _load(k, i + 1)
        _compute(k, i)


def _run(k: Kernels):
    return golden.run_image(k.p.place_rom(), k.p.image, TEST_CORE, check_races=True)


def test_precise_tokens_wait_for_the_conflicting_instruction_not_the_latest():
    latest, precise = _kernels(), _kernels()
    _pipelined(latest, 8)
    with precise.overlapped():
        _pipelined(precise, 8)
    latest.halt()
    precise.halt()
    # the first req waits for the first load; by default the token comes from the latest
    # load (the second), with precise tokens from the first itself
    first_ld = [i for i in precise.p.instrs if i.op == "ld"][0]
    assert Unit.VX in first_ld.signal
    assert Unit.VX not in [i for i in latest.p.instrs if i.op == "ld"][0].signal
    slow, fast = _run(latest), _run(precise)  # the race checker passes on both
    assert fast.stats.cycles < slow.stats.cycles
    assert (fast.ext[OUT] == slow.ext[OUT]).all()


def test_precise_tokens_inside_a_loop_dispatch_what_flat_emission_does():
    flat, looped = _kernels(loops=False), _kernels(loops=True)
    for k in (flat, looped):
        with k.overlapped():
            _load(k, 0)
            # an iteration is two steps, so that the halves come back
            k.repeat(15, lambda i, k=k: [(_load(k, s + 1), _compute(k, s))
                                         for s in (2 * i, 2 * i + 1)])
            _compute(k, 30)
        k.st(0, 0x9000, 8)
        k.halt()
    assert any(i.op == "loop" for i in looped.p.instrs)
    assert [_unwalked(i) for _, i in unroll(looped.p.instrs)] == \
        [_unwalked(i) for _, i in unroll(flat.p.instrs)]
    a, b = _run(flat), _run(looped)
    assert a.stats.cycles == b.stats.cycles and (a.ext[OUT] == b.ext[OUT]).all()


def test_a_wait_another_wait_implies_is_left_out():
    """The req reads the parameters one load wrote and the accumulators the fc wrote; the
    fc waited for a later load, so its token tells the VX unit that the parameter load is
    done: the req waits for the MX unit only (not for a token from the LD unit as well)."""
    k = _kernels()
    k.ld("param", 0x10000, 0, 64)
    k.ld("nbuf", 0x11000, 0, 64)
    k.fc(nbuf=0, n_in=64, rows=P, acc=0, wbuf=0, widx=0, wbytes=64, ibytes=0, nfmt=0, wfmt=0)
    k.req(0, 0, 0, 1, 1, src_stride=P, dst_stride=P)
    k.st(0, 0x40000, P)
    k.halt()
    req = next(i for i in k.p.instrs if i.op == "req")
    assert req.wait == {Unit.MX}
    assert not any(Unit.VX in i.signal for i in k.p.instrs if i.op == "ld")
    _run(k)  # race-free: the parameter load is ordered before the req all the same
    # a token that tells nothing of the other conflict leaves both waits: an fc that
    # waited for nothing from the LD unit after the parameter load
    k = _kernels()
    k.fc(nbuf=0, n_in=64, rows=P, acc=0, wbuf=0, widx=0, wbytes=64, ibytes=0, nfmt=0, wfmt=0)
    k.ld("param", 0x10000, 0, 64)
    k.req(0, 0, 0, 1, 1, src_stride=P, dst_stride=P)
    k.halt()
    req = next(i for i in k.p.instrs if i.op == "req")
    assert req.wait == {Unit.LD, Unit.MX}
    _run(k)


def test_register_operands_carry_what_changes_from_tile_to_tile():
    """Pixel groups of 8 and 5 alternate (a row of 13): each fc carries its nvec and each
    req its strides in register operands, so the tiles write no register between them and
    stay alike, and the race checker passes."""
    k = _kernels()
    groups = [8, 5, 8, 5]
    for i, g in enumerate(groups):
        half = i % 2
        k.fc(nbuf=half * 2048, n_in=64, rows=P, acc=half * 512, wbuf=0, widx=0, wbytes=64,
             ibytes=0, nvec=g, nstride=64, nfmt=0, wfmt=0, acc_stride=P)
        k.req(half * 1024, half * 512, 0, g, 1, src_stride=P, dst_stride=P)
        k.st(half * 1024, 0x40000 + 64 * i, P, g, src_stride=P, ext_stride=P)
    k.halt()
    written = {isa.REGISTER_BY_NUMBER[i.args[r]].name for i in k.p.instrs if i.op == "cfg"
               for r, on in (("reg", "reg"), ("reg2", "two"), ("reg3", "three"))
               if r == on or i.args.get(on)}
    assert not written & {"mx.nvec", "vx.src_stride", "vx.dst_stride"}
    assert [i.args["nvec"] for i in k.p.instrs if i.op == "fc"] == groups
    assert all(i.args["src_stride"] == i.args["dst_stride"] == P
               for i in k.p.instrs if i.op == "req")
    _run(k)
