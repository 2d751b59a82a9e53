"""The compressed-activation format (verif/act_compress.py): round trips for every density,
both index formats and dense, empty and full rows and tensors; malformed records name the
row."""

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
@pytest.mark.parametrize("fmt", [None, "dense", "direct", "stride"])
def test_round_trip(c, density, fmt):
    rng = np.random.default_rng(c * 100 + int(density * 10))
    rows = _rows(rng, 9, c, density)
    buf = A.encode_rows(rows, 64, fmt)
    back, kept, used = A.decode_rows(buf + b"\xff\xff", 9, c, 64)  # trailing bytes unread
    np.testing.assert_array_equal(back, rows)
    assert used == len(buf)
    if fmt in ("direct", "stride"):
        np.testing.assert_array_equal(kept, rows != 0)  # the index the MX unit would use
    if fmt is None:
        assert len(buf) == A.compressed_bytes(rows, 64) <= 9 * (c + 1)


def test_the_smallest_format_wins():
    empty, full = np.zeros((1, 64), np.int8), np.ones((1, 64), np.int8)
    assert A.encode_row(empty[0])[0] == 2  # stride: a count of zero entries
    assert A.encode_row(full[0])[0] == 0  # dense
    sparse = np.zeros(64, np.int8)
    sparse[::2] = 3  # half dense, evenly: direct (8-byte bitmap) beats 32 stride entries
    assert A.encode_row(sparse)[0] == 1
    assert A.decode_rows(b"", 0, 64)[0].shape == (0, 64)  # an empty tensor


@pytest.mark.parametrize("buf, what", [
    (b"\x07", "format code 7"),
    (b"\x00\x01\x02", "runs past"),
    (b"\x01\xff\xff" + b"\x00" * 6 + b"\x05", "runs past"),  # 16 kept values, 1 given
    (b"\x01\x00\x00\x00\x00\x00\x00\x00\x80", "past the row's 40"),  # bit 63 set
    (b"\x02\x01\x00\x32\x05", "reaches position 50"),         # stride 50 in a row of 40
    (b"\x02\x05\x00\x01", "entries"),
])
def test_malformed_records_name_the_row(buf, what):
    good = A.encode_row(np.arange(40, dtype=np.int8) % 3)
    with pytest.raises(IndexFormatError, match=f"compressed row 1 at byte {len(good)}.*"):
        try:
            A.decode_rows(good + buf, 2, 40)
        except IndexFormatError as e:
            assert what in str(e), str(e)
            raise
