"""The ISA tables, encoder and decoder: round trips and illegal words."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snpu.errors import IllegalInstruction
from snpu.verif import isa
from snpu.verif.isa import Unit, decode, encode, make, validate

from .strategies import legal_instr

ROOT = Path(__file__).resolve().parents[2]


@given(legal_instr())
def test_encode_decode_round_trip(instr):
    word = encode(instr)
    assert 0 <= word < 1 << 128
    assert decode(word) == instr


@settings(max_examples=3000)
@given(st.integers(0, (1 << 128) - 1))
def test_every_word_is_rejected_or_canonical(word):
    """A random word is either illegal or decodes to an instruction that encodes back to it."""
    try:
        instr = decode(word)
    except IllegalInstruction as e:
        assert f"0x{word:032x}" in str(e)
        return
    assert encode(instr) == word


@settings(max_examples=500)
@given(legal_instr(), st.integers(16, 127))
def test_reserved_bits_are_rejected(instr, bit):
    word = encode(instr)
    if bit < instr.opcode.used_bits:
        return
    with pytest.raises(IllegalInstruction, match="reserved bits"):
        decode(word | (1 << bit))


def _w(op, **kw):
    return encode(make(op, **kw))


ILLEGAL = [
    (0, "unknown opcode 0x00"),
    (0x3F, "unknown opcode 0x3f"),
    (_w("ldc", buf="acc", dst=0, ext=0, cols=1) & ~(7 << 16) | 2 << 16,  # ldc into wbuf
     "buf=2 is not one of nbuf=0, acc=4"),
    (0x0A, "unknown opcode 0x0a"),
    (_w("ld", buf="nbuf", ext=0, dst=0, cols=1) | 7 << 16, "buf=7 is not one of"),
    (_w("ld", buf="nbuf", ext=0, dst=0, cols=1) | 1 << 6, "own unit LD"),
    (_w("fc", nbuf=0, nidx=0, wbuf=0, widx=0, acc=0, n_in=1, rows=1) | 1 << (11 + 1),
     "own unit MX"),
    (_w("halt") | 1 << 7, "control instructions"),
    (0x03 | 0x7F << 16, "register number 127 is not defined"),
    (0x03 | isa.REGISTER_BY_NAME["mx.nfmt"].number << 16 | 4 << 24,
     "does not fit 2-bit register mx.nfmt"),
    (_w("halt") | 1 << 100, "reserved bits 16..127"),
    (0x03 | isa.REGISTER_BY_NAME["mx.wfmt"].number << 16 | 3 << 24,
     "not a legal value of mx.wfmt"),
]


@pytest.mark.parametrize("word,message", ILLEGAL, ids=[m for _, m in ILLEGAL])
def test_illegal_words(word, message):
    with pytest.raises(IllegalInstruction, match=message):
        decode(word, address=7)
    with pytest.raises(IllegalInstruction, match="at ROM word 7"):
        decode(word, address=7)


# Known answers, written out by hand from the word format in docs/isa.md (opcode bits 0-5,
# wait 6-10, signal 11-15, operands packed from bit 16 in table order): a change to the
# layout or to an opcode breaks these on purpose.
KNOWN = [
    (make("halt"), 0x01),
    # cfg: reg = MX << 5 | 3 (mx.nvec) at bit 16, value at bit 24
    (make("cfg", reg="mx.nvec", value=3), 0x3230003),
    # ld: buf=wbuf(2)@16, lane@19, ext@25, dst@57, n3@77, rows@89, cols@101; wait MX, signal ST
    (make("ld", buf="wbuf", lane=3, ext=0x12345678, dst=5, n3=2, rows=3, cols=7,
          wait=[Unit.MX], signal=[Unit.ST]), 0xE0060040000A2468ACF01A4088),
    # vew: dst@16 a@32 b@48 n_o@64 n_i@76 ma@84 (two's complement) mb@100 relu@116
    (make("vew", dst=16, a=32, b=48, n_o=2, n_i=3, ma=-5, mb=7, relu=1),
     0x10007FFFB030020030002000100019),
    # vewp: vew's dst, a, b, n_o, n_i, then param@84 relu@96
    (make("vewp", dst=16, a=32, b=48, n_o=2, n_i=3, param=5, relu=1),
     0x100503002003000200010001B),
]


@pytest.mark.parametrize("instr,word", KNOWN, ids=[i.op for i, _ in KNOWN])
def test_known_encodings(instr, word):
    assert encode(instr) == word
    assert decode(word) == instr


def test_cfg_executes_on_the_registers_unit():
    assert make("cfg", reg="mx.nvec", value=3).unit == Unit.MX
    assert make("cfg", reg="st.ext_stride", value=3).unit == Unit.ST
    assert make("halt").unit is None


def test_isa_doc_is_generated_from_the_tables():
    doc = (ROOT / "docs" / "isa.md").read_text()
    assert doc == isa.render_markdown(), "docs/isa.md is stale: run `make docs`"


def test_cfg_writes_a_second_register_of_the_same_unit():
    both = make("cfg", reg="ld.ext_stride", value=672, reg2="ld.dst_stride", value2=9)
    assert both.args["two"] == 1
    assert str(both) == "cfg reg=ld.ext_stride value=672 reg2=ld.dst_stride value2=9"
    assert decode(encode(both)) == both
    one = make("cfg", reg="mx.nvec", value=3)
    assert str(one) == "cfg reg=mx.nvec value=3" and one.args["two"] == 0
    assert "is not a register of LD" in validate(
        make("cfg", reg="ld.ext_stride", value=1, reg2="mx.nvec", value2=2))
    assert "does not fit 12-bit register mx.nvec" in validate(
        make("cfg", reg="mx.nstride", value=1, reg2="mx.nvec", value2=1 << 12))
    assert "two=0" in validate(make("cfg", reg="mx.nvec", value=1, value2=5, two=0))
    # the second write lands after the first: the same register twice keeps value2
    from snpu.verif import golden
    from snpu.verif.program import Program
    p = Program()
    p.emit("cfg", reg="mx.nvec", value=5, reg2="mx.nvec", value2=7)
    p.emit("cfg", reg="vx.src_stride", value=3, reg2="vx.dst_stride", value2=4)
    p.emit("halt")
    regs = golden.run_image(p.place_rom(), p.image, p.config).machine.regs
    assert (regs["mx.nvec"], regs["vx.src_stride"], regs["vx.dst_stride"]) == (7, 3, 4)


def test_register_operands_stand_in_for_their_registers():
    """``fc.nvec`` and ``req``'s strides: not 0, the instruction reads them in place of the
    registers, which keep their values; 0 (the default, not printed) is the register."""
    fc = make("fc", nbuf=0, nidx=0, wbuf=0, widx=0, acc=0, n_in=8, rows=4, nvec=5)
    assert isa.register_operands(fc) == {"mx.nvec": 5}
    assert str(fc).endswith("accumulate=0 nvec=5") and decode(encode(fc)) == fc
    plain = make("fc", nbuf=0, nidx=0, wbuf=0, widx=0, acc=0, n_in=8, rows=4)
    assert isa.register_operands(plain) == {} and "nvec" not in str(plain)
    req = make("req", dst=0, src=0, param=0, n_o=2, dst_stride=32)
    assert isa.register_operands(req) == {"vx.dst_stride": 32}
    assert "src_stride" not in str(req) and decode(encode(req)) == req
    assert "nvec=32 is outside 0..31" in validate(isa.Instr("fc", {**fc.args, "nvec": 32}))
    assert set(isa.REGISTER_OPERANDS) == {"fc", "vred", "req", "st"}
    st = make("st", src=0, ext=0, rows=2, cols=8, src_stride=16)
    assert isa.register_operands(st) == {"st.src_stride": 16} and decode(encode(st)) == st
    # in the golden model: the fc runs over 2 vectors with mx.nvec = 3 and leaves it 3
    import numpy as np
    from snpu.config import SMALL_CORE
    from snpu.verif import golden
    from snpu.verif.program import Program
    P = SMALL_CORE.lanes
    p = Program(SMALL_CORE)
    x = p.data("x", np.arange(1, 2 * 64 + 1, dtype=np.int8).reshape(2, 64) % 5)
    p.cfgs(ld__ext_stride=64, ld__dst_stride=64)
    p.emit("ld", buf="nbuf", ext=x, dst=0, rows=2, cols=64)
    p.emit("ld", buf="wbuf", ext=p.data("w", np.ones(64, np.int8)), dst=0, cols=64, n3=P,
           signal=[Unit.MX])
    p.cfgs(mx__nfmt=0, mx__wfmt=0, mx__nvec=3, mx__nstride=64, mx__acc_stride=P)
    p.emit("fc", nbuf=0, nidx=0, wbuf=0, widx=0, acc=0, n_in=64, rows=1, nvec=2,
           wait=[Unit.LD])
    p.emit("halt")
    m = golden.run_image(p.place_rom(), p.image, p.config).machine
    assert m.regs["mx.nvec"] == 3
    sums = (np.arange(1, 2 * 64 + 1).reshape(2, 64).astype(np.int8) % 5).sum(axis=1)
    assert list(m.acc[[0, P, 2 * P]]) == [sums[0], sums[1], 0]


def test_cfg_writes_up_to_three_registers_in_order():
    three = make("cfg", reg="vx.src_stride", value=1, reg2="vx.dst_stride", value2=2,
                 reg3="vx.src_stride", value3=3)
    assert (three.args["two"], three.args["three"]) == (1, 1)
    assert str(three) == ("cfg reg=vx.src_stride value=1 reg2=vx.dst_stride value2=2 "
                          "reg3=vx.src_stride value3=3")
    assert decode(encode(three)) == three
    from snpu.verif.asm import assemble
    assert assemble(str(three)) == [encode(three)]
    assert "is not a register of VX" in validate(
        make("cfg", reg="vx.src_stride", value=1, reg2="vx.dst_stride", value2=2,
             reg3="mx.nvec", value3=1))
    assert "three=1 needs two=1" in validate(
        make("cfg", reg="vx.src_stride", value=1, reg3="vx.dst_stride", value3=1))
    assert "reg3 and value3 must be 0 when three=0" in validate(
        make("cfg", reg="vx.src_stride", value=1, value3=5, three=0))
    # the golden model writes them in order: the third lands last
    from snpu.verif import golden
    from snpu.verif.program import Program
    p = Program()
    p.emit("cfg", reg="vx.src_stride", value=1, reg2="vx.dst_stride", value2=2,
           reg3="vx.src_stride", value3=3)
    p.emit("halt")
    regs = golden.run_image(p.place_rom(), p.image, p.config).machine.regs
    assert (regs["vx.src_stride"], regs["vx.dst_stride"]) == (3, 2)
