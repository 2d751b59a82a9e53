"""Assembler and disassembler: text <-> words."""

import pytest
from hypothesis import given

from snpu.errors import AsmError, IllegalInstruction
from snpu.verif import isa
from snpu.verif.asm import assemble, disassemble, format_instr

from .strategies import legal_instr


@given(legal_instr())
def test_text_round_trip(instr):
    """asm -> words -> disasm -> asm is the identity."""
    text = format_instr(instr)
    words = assemble(text)
    assert words == [isa.encode(instr)]
    again = disassemble(words, addresses=False)
    assert again == text + "\n"
    assert assemble(disassemble(words)) == words  # with address comments too


def test_source_features():
    src = """
    ; a comment
    .equ N 256
    .equ BASE 0x1000   # another comment
    cfg reg=ld.thresh value=3
    ld buf=wbuf lane=2 ext=BASE+N*2 dst=N // 2 cols=N - 1 wait=mx,vx signal=st
    fc nbuf=0 nidx=0 wbuf=0 widx=0 acc=16 n_in=N rows=(N >> 2) accumulate=1
    vew dst=0 a=16 b=32 ma=-3 mb=0x7fff relu=1
    halt
    """
    words = assemble(src)
    ins = [isa.decode(w) for w in words]
    assert ins[0].op == "cfg" and ins[0].value == 3
    assert ins[1].args == {"buf": 2, "lane": 2, "ext": 0x1200, "dst": 128, "n3": 1, "rows": 1,
                           "cols": 255, "walk": 0}
    assert ins[1].wait == {isa.Unit.MX, isa.Unit.VX} and ins[1].signal == {isa.Unit.ST}
    assert ins[2].rows == 64 and ins[2].accumulate == 1
    assert ins[3].ma == -3 and ins[3].mb == 0x7FFF
    assert ins[4].op == "halt"


BAD = [
    ("fcc a=1", "unknown mnemonic 'fcc'"),
    ("ldc buf=wbuf dst=0 ext=0 cols=8", "ldc: buf=wbuf is not one of nbuf, acc"),
    ("fc nbuf=0", "missing operand nidx"),
    ("halt x=1", "halt has no operand 'x'"),
    ("ld buf=nbuf ext=0 dst=0 cols=70000", "cols=70000 is outside 0..65535"),
    ("ld buf=dram ext=0 dst=0 cols=1", "ld: buf=dram is not one of nbuf, nidx"),
    ("ld buf=nbuf ext=0 dst=0 cols=1 wait=ld", "own unit LD"),
    ("ld buf=nbuf ext=0 dst=0 cols=1 wait=gpu", "unknown unit 'gpu'"),
    ("cfg reg=mx.bogus value=1", "unknown register 'mx.bogus'"),
    ("cfg reg=mx.nfmt value=9", "does not fit 2-bit register"),
    ("vew dst=0 a=0 b=0 ma=40000", "ma=40000 is outside -32768..32767"),
    ("ld buf=nbuf ext=0 dst=0 cols=1 cols=2", "given twice"),
    ("ld buf=nbuf ext=1/0 dst=0 cols=1", "division by zero"),
    ("ld buf=nbuf ext=__import__ dst=0 cols=1", "unknown name"),
    (".equ 5 5", ".equ needs a name"),
    ("halt junk", "not name=value"),
]


@pytest.mark.parametrize("line,message", BAD, ids=[m for _, m in BAD])
def test_errors_name_file_line_and_reason(line, message):
    with pytest.raises(AsmError) as e:
        assemble("halt\n" + line + "\n", name="prog.s")
    assert str(e.value).startswith("prog.s:2: ")
    assert message in str(e.value)


def test_disassembler_rejects_illegal_word_with_address():
    with pytest.raises(IllegalInstruction, match="at ROM word 1 "):
        disassemble([isa.encode(isa.make("halt")), 0])
