"""The timing-free deadlock check of token channels agrees with the golden model."""

import numpy as np
import pytest

from snpu.config import SMALL_CORE, CoreConfig
from snpu.errors import ExecutionError
from snpu.verif import golden, isa, progen
from snpu.verif.isa import Unit
from snpu.verif.token_flow import deadlock

LD, VX, ST = Unit.LD, Unit.VX, Unit.ST


def _cfg(reg, wait=(), signal=()):
    return isa.make("cfg", reg=reg, value=0, wait=wait, signal=signal)


#: LD gives ST three tokens before ST takes any; ST first waits for VX, which waits for
#: LD's fourth instruction: with two tokens per channel LD stalls on its third signal
FILLS = [_cfg("ld.thresh", signal=[ST]), _cfg("ld.thresh", signal=[ST]),
         _cfg("ld.thresh", signal=[ST]), _cfg("ld.thresh", signal=[VX]),
         _cfg("vx.k1_stride", wait=[LD], signal=[ST]),
         _cfg("st.src_stride", wait=[VX, LD]), _cfg("st.src_stride", wait=[LD]),
         _cfg("st.src_stride", wait=[LD]), isa.make("halt")]


@pytest.mark.parametrize("depth", [2, 3])
def test_channels_that_fill_deadlock_as_on_the_golden_model(depth):
    cfg = CoreConfig(**{**SMALL_CORE.to_dict(), "token_depth": depth})
    stuck = deadlock(FILLS, depth, cfg.queue_depth)
    words = [isa.encode(i) for i in FILLS]
    if depth == 2:
        assert stuck == ("LD cannot signal ST (channel full) after ROM word 2; "
                         "VX waits for a token from LD at ROM word 4; "
                         "ST waits for a token from VX at ROM word 5; "
                         "dispatcher blocked at ROM word 8 (halt)")
        with pytest.raises(ExecutionError, match="deadlock"):
            golden.run(words, np.zeros(1 << 12, np.uint8), cfg)
    else:
        assert stuck is None
        golden.run(words, np.zeros(1 << 12, np.uint8), cfg)


def test_a_full_queue_behind_a_barrier_is_no_deadlock():
    """``sync`` waits for every unit; queues of one entry still drain."""
    prog = [_cfg("ld.thresh", signal=[VX]), _cfg("vx.k1_stride", wait=[LD]), isa.make("sync"),
            _cfg("ld.thresh"), _cfg("ld.thresh"), isa.make("halt")]
    assert deadlock(prog, 1, 1) is None


@pytest.mark.parametrize("seed", range(8))
def test_random_programs_run_to_their_end(seed):
    """Programs the golden model runs (so they do not deadlock) pass the check."""
    kind = list(progen.GENERATORS)[seed % len(progen.GENERATORS)]
    p = progen.random_program(np.random.default_rng(seed), SMALL_CORE, kind)
    words = p.place_rom()
    golden.run_image(words, p.image, SMALL_CORE)
    assert deadlock(isa.decode_program(words), SMALL_CORE.token_depth,
                    SMALL_CORE.queue_depth) is None
