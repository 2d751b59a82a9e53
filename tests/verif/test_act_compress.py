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


@pytest.mark.parametrize("c", [1, 8, 63, 64, 65, 200])
@pytest.mark.parametrize("density", [0.0, 0.1, 0.5, 1.0])
def test_stream_round_trip(c, density):
    """The hardware stream (stc / ldc): a length header, then word-aligned chunks of a mask
    and packed values."""
    rng = np.random.default_rng(c * 7 + int(density * 10))
    rows = _rows(rng, 5, c, density)
    buf = A.encode_stream(rows)
    assert len(buf) % 8 == 0 and len(buf) == A.stream_size(rows) <= A.stream_bound(5, c)
    assert int.from_bytes(buf[:8], "little") == len(buf) - 8
    back, used = A.decode_stream(buf + bytes(16), 5, c)
    np.testing.assert_array_equal(back, rows)
    assert used == len(buf)
    if density == 1.0:
        assert len(buf) == A.stream_bound(5, c)


def _with_length(chunks: bytes) -> bytes:
    return len(chunks).to_bytes(8, "little") + chunks


def test_stream_layout_and_malformed_input():
    row = np.zeros(70, np.int8)
    row[[0, 9, 64]] = [5, -3, 7]
    buf = A.encode_stream(row[None])
    body = buf[8:]
    # chunk 0: mask bits 0 and 9, two values padded to a word; chunk 1 (6 values): bit 0
    assert body[:8] == (1 | 1 << 9).to_bytes(8, "little")
    assert body[8:16] == bytes([5, 253, 0, 0, 0, 0, 0, 0])
    assert body[16:24] == (1).to_bytes(8, "little") and body[24] == 7 and len(body) == 32
    # a mask bit past the row's end owns a value that is dropped
    odd = bytearray(body)
    odd[16:24] = (1 | 1 << 10).to_bytes(8, "little")
    odd[25] = 99
    back, used = A.decode_stream(_with_length(bytes(odd)), 1, 70)
    np.testing.assert_array_equal(back[0], row)
    assert used == 40
    # bytes the header counts past the last row are read and ignored
    back, used = A.decode_stream(_with_length(body + bytes(16)), 1, 70)
    np.testing.assert_array_equal(back[0], row)
    assert used == 56
    with pytest.raises(IndexFormatError, match="row 0, chunk 1"):
        A.decode_stream(_with_length(body[:24]), 1, 70)
    with pytest.raises(IndexFormatError, match="not a multiple of 8 or exceeds"):
        A.decode_stream(_with_length(body + bytes(200)), 1, 70)
    with pytest.raises(IndexFormatError, match="run past the 20 bytes"):
        A.decode_stream(buf[:20], 1, 70)
    assert A.encode_stream(np.zeros((0, 8), np.int8)) == bytes(8)
    assert A.stream_size(np.zeros((3, 0))) == 8
