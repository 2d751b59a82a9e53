"""The cfg pass: register writes hoisted ahead of the tile they set up and up to three writes
of one unit in one word, never changing what any unit does."""

from snpu.compiler.passes.pair_cfg import HOIST_WORDS, _pair, _per_body, pair_cfg
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
        "cfg reg=ld.ext_stride value=1 reg2=ld.dst_stride value2=2 reg3=ld.ext_stride3 value3=3",
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
    out = _per_body(prog, _pair)  # pairing alone (hoisting would move ld.ext_stride to the top)
    assert len(out) == 8
    assert out[0].args["two"] == 1 and out[0].wait == {Unit.LD}
    assert [i.args["two"] for i in out[1:7]] == [0] * 6
    # what the units are asked to do is unchanged: the same writes, in order, per unit
    assert _per_unit(out) == _per_unit(prog)
    assert _per_unit(pair_cfg(prog)) == _per_unit(prog)


def _per_unit(instrs):
    """What each unit is asked to do, in its order: its instructions with their tokens, a
    cfg word as its register writes."""
    per = {}
    for _, i in unroll(instrs):
        if i.op == "cfg":
            regs = [(i.args["reg"], i.args["value"])]
            if i.args["two"]:
                regs.append((i.args["reg2"], i.args["value2"]))
            per.setdefault(i.unit, []).append(("cfg", tuple(regs), i.wait, i.signal))
        else:
            per.setdefault(i.unit, []).append((i.op, tuple(sorted(i.args.items())), i.wait, i.signal))
    # consecutive writes of one unit are one step, however they are paired (pairing keeps
    # the first one's waits and gives both ones' signals after both writes)
    for u, seq in per.items():
        merged = []
        for x in seq:
            if merged and x[0] == merged[-1][0] == "cfg" and not x[2]:
                merged[-1] = ("cfg", merged[-1][1] + x[1], merged[-1][2], merged[-1][3] | x[3])
            else:
                merged.append(x)
        per[u] = merged
    return per


_LD = make("ld", buf="nbuf", ext=0, dst=0, cols=16, signal=[Unit.MX])
_FC = make("fc", nbuf=0, nidx=0, wbuf=0, widx=0, acc=0, n_in=16, rows=16, wait=[Unit.LD],
           signal=[Unit.VX])
_REQ = make("req", dst=0, src=0, param=0, n_o=1, n_i=1, wait=[Unit.MX], signal=[Unit.ST])
_ST = make("st", src=0, ext=0, cols=16, wait=[Unit.VX])


def test_a_tiles_writes_move_ahead_of_it():
    """A layer's first tile, each write right before the instruction reading it, becomes
    the writes then the tile: what the later tiles look like."""
    param = make("ld", buf="param", ext=0, dst=0, cols=64)
    weights = make("ld", buf="wbuf", ext=64, dst=0, cols=64, n3=16)
    prog = [_FC, param, weights, _LD, _cfg("mx.nvec", 4), _FC, _cfg("vx.src_stride", 16), _REQ,
            _cfg("st.src_stride", 16), _ST, make("halt")]
    out = pair_cfg(prog)
    assert [str(i) for i in out] == [
        str(_FC),  # the MX write stops at the MX unit's word before
        "cfg reg=mx.nvec value=4", str(param),
        "cfg reg=vx.src_stride value=16",  # past HOIST_WORDS = 3 words: fc, ld, ld
        str(weights), "cfg reg=st.src_stride value=16",
        str(_LD), str(_FC), str(_REQ), str(_ST), "halt"]
    assert _per_unit(out) == _per_unit(prog)


def test_what_a_write_may_not_move_past():
    others = [_REQ, _ST, _LD, _LD][-HOIST_WORDS - 1:]
    tokens = _cfg("mx.nvec", 5, wait=[Unit.VX])
    loop = make("loop", count=2, body=2)
    prog = ([_REQ] + others + [_cfg("mx.nvec", 4)]     # at most HOIST_WORDS words
            + [_LD, tokens]                              # a write carrying tokens stays
            + [loop, _LD, _cfg("mx.nstride", 64)]        # to the body's start, not out
            + [_cfg("mx.acc_stride", 16)]                # not into the loop before it
            + [make("sync"), _LD, _cfg("ld.dst_stride", 8), _cfg("mx.mixed", 1), make("halt")])
    out = pair_cfg(prog)
    text = [str(i) for i in out]
    at = text.index("cfg reg=mx.nvec value=4")
    assert text[at - 1] == str(others[0]) and text[at + 1:at + 1 + HOIST_WORDS] == [str(i) for i in others[1:]]
    assert text[at + HOIST_WORDS + 1:at + HOIST_WORDS + 3] == [str(_LD), str(tokens)]
    body = text.index(str(loop))
    assert text[body + 1:body + 3] == ["cfg reg=mx.nstride value=64", str(_LD)]
    assert text[body + 3] == "cfg reg=mx.acc_stride value=16"
    # the ld write stops at the ld; the mx write passes both but not the sync
    assert text[-5:] == ["sync", "cfg reg=mx.mixed value=1", str(_LD), "cfg reg=ld.dst_stride value=8", "halt"]
    assert _per_unit(out) == _per_unit(prog)


def test_three_writes_per_word_and_the_third_holds_22_bits():
    prog = [_cfg("vx.src_stride", 1), _cfg("vx.dst_stride", 2), _cfg("vx.k1_stride", 3),
            _cfg("vx.k2_stride", 4),                          # a fourth starts a new word
            _cfg("ld.ext_stride", 1), _cfg("ld.dst_stride", 2),
            _cfg("ld.ext_stride3", 1 << 22),                  # does not fit the third slot
            make("halt")]
    out = _per_body(prog, _pair)
    assert [str(i) for i in out] == [
        "cfg reg=vx.src_stride value=1 reg2=vx.dst_stride value2=2 reg3=vx.k1_stride value3=3",
        "cfg reg=vx.k2_stride value=4",
        "cfg reg=ld.ext_stride value=1 reg2=ld.dst_stride value2=2",
        "cfg reg=ld.ext_stride3 value=4194304", "halt"]
