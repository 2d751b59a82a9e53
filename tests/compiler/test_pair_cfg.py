"""The cfg pairing pass: two register writes of one unit in one word, never changing what
the program does."""

from snpu.compiler.passes.pair_cfg import pair_cfg
from snpu.verif.isa import Unit, make
from snpu.verif.sequencer import unroll


def _cfg(reg, value, **tokens):
    return make("cfg", reg=reg, value=value, **tokens)


def test_writes_of_one_unit_pair_up_inside_their_own_body():
    loop = make("loop", count=3, body=3)
    prog = [_cfg("ld.ext_stride", 1), _cfg("ld.dst_stride", 2), _cfg("ld.ext_stride3", 3),
            loop, _cfg("mx.nvec", 4), _cfg("mx.nstride", 5),
            make("fc", nbuf=0, nidx=0, wbuf=0, widx=0, acc=0, n_in=8, rows=4),
            _cfg("mx.nvec", 6), make("halt")]
    out = pair_cfg(prog)
    assert [str(i) for i in out] == [
        "cfg reg=ld.ext_stride value=1 reg2=ld.dst_stride value2=2",
        "cfg reg=ld.ext_stride3 value=3",
        "loop count=3 body=2 in_inc=0 w_inc=0 out_inc=0 entry=0 flip=0",
        "cfg reg=mx.nvec value=4 reg2=mx.nstride value2=5",
        str(prog[6]),
        # the body's last word and the one after the loop stay apart
        "cfg reg=mx.nvec value=6", "halt"]


def test_tokens_decide_what_may_merge():
    prog = [_cfg("vx.src_stride", 1, wait=[Unit.LD]), _cfg("vx.dst_stride", 2),   # merge
            _cfg("st.src_stride", 1), _cfg("st.ext_stride", 2, wait=[Unit.VX]),   # B waits
            _cfg("mx.nvec", 1, signal=[Unit.LD]), _cfg("mx.nstride", 2, signal=[Unit.LD]),
            _cfg("ld.ext_stride", 1), _cfg("mx.nvec", 2),                         # two units
            make("halt")]
    out = pair_cfg(prog)
    assert len(out) == 8
    assert out[0].args["two"] == 1 and out[0].wait == {Unit.LD}
    assert [i.args["two"] for i in out[1:7]] == [0] * 6
    # what the units are asked to do is unchanged: the same writes, in order, per unit
    def writes(instrs):
        per = {}
        for _, i in unroll(instrs):
            if i.op == "cfg":
                regs = [(i.args["reg"], i.args["value"])]
                if i.args["two"]:
                    regs.append((i.args["reg2"], i.args["value2"]))
                per.setdefault(i.unit, []).extend(regs)
        return per
    assert writes(out) == writes(prog)
