"""The compressed-activation format (verif/act_compress.py): round trips for every density,
all three formats, empty and full rows and tensors; malformed rows are named."""

import numpy as np
import pytest

from snpu.errors import IndexFormatError
from snpu.verif import act_compress as A


def _rows(rng, n, c, density):
    x = rng.integers(-128, 128, (n, c)).astype(np.int8)
    x[x == 0] = 1
    return np.where(rng.random((n, c)) < density, x, 0).astype(np.int8)


@pytest.mark.parametrize("c", [1, 7, 64, 65, 300])
@pytest.mark.parametrize("density", [0.0, 0.05, 0.3, 0.7, 1.0])
@pytest.mark.parametrize("fmt", ["dense", "direct", "stride"])
def test_round_trip(c, density, fmt):
    rng = np.random.default_rng(c * 100 + int(density * 10))
    rows = _rows(rng, 9, c, density)
    buf = A.encode_rows(rows, fmt)
    back, kept, used = A.decode_rows(buf + b"\xff\xff", 9, c, fmt)  # trailing bytes unread
    np.testing.assert_array_equal(back, rows)
    assert used == len(buf) == A.sizes(rows)[fmt]
    if fmt != "dense":
        np.testing.assert_array_equal(kept, rows != 0)  # the index the MX unit would use


def test_the_smallest_format_is_chosen():
    rng = np.random.default_rng(1)
    assert A.choose_format(_rows(rng, 16, 64, 1.0)) == "dense"
    assert A.choose_format(_rows(rng, 16, 64, 0.5)) == "direct"   # 8-byte bitmaps win
    assert A.choose_format(_rows(rng, 16, 256, 0.02)) == "stride"  # a few entries win
    assert A.choose_format(np.zeros((0, 64), np.int8)) == "dense"  # an empty tensor
    assert A.encode_rows(np.zeros((0, 64), np.int8)) == b""
    assert A.decode_rows(b"", 0, 64, "stride")[0].shape == (0, 64)


@pytest.mark.parametrize("fmt, buf, what", [
    ("dense", b"\x01\x02", "runs past"),
    ("direct", b"\xff\xff" + b"\x00" * 6 + b"\x05", "runs past"),  # 16 kept values, 1 given
    ("direct", b"\x00\x00\x00\x00\x00\x00\x00\x80", "past the row's 40"),  # bit 63 set
    ("stride", b"\x01\x00\x32\x05", "reaches position 50"),  # stride 50 in a row of 40
    ("stride", b"\x05\x00\x01", "entries"),
])
def test_malformed_rows_are_named(fmt, buf, what):
    good = A.encode_row(np.arange(40, dtype=np.int8) % 3, fmt)
    with pytest.raises(IndexFormatError, match=f"compressed row 1 at byte {len(good)}") as e:
        A.decode_rows(good + buf, 2, 40, fmt)
    assert what in str(e.value)
