"""Index formats (seed 000 claims 5-11, 16-22): every path selects the same pairs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snpu.errors import IndexFormatError
from snpu.verif import index as ix
from snpu.verif.index import Index


@st.composite
def sparse_vector(draw, n=None):
    """int8 vector with a random density 0..100 % (and the edge cases drawn often)."""
    n = draw(st.integers(1, 4096)) if n is None else n
    seed = draw(st.integers(0, 2**32 - 1))
    kind = draw(st.sampled_from(["random", "random", "random", "zero", "all", "first", "last"]))
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, n).astype(np.int8)
    x[x == 0] = 1
    if kind == "random":
        x[rng.random(n) >= draw(st.floats(0, 1))] = 0
    elif kind == "zero":
        x[:] = 0
    elif kind == "first":
        x[1:] = 0
    elif kind == "last":
        x[:-1] = 0
    return x


def _all_paths(a_bits, b_bits):
    """Pairs selected by every way of combining the two indices, in every format."""
    n = a_bits.size
    a = {"direct": Index.direct(a_bits), "stride": Index.stride(ix.direct_to_stride(a_bits), n)}
    b = {"direct": Index.direct(b_bits), "stride": Index.stride(ix.direct_to_stride(b_bits), n)}
    results = {}
    for fa, ia in a.items():
        for fb, ib in b.items():
            for mixed in ("to_direct", "to_stride"):
                results[(fa, fb, mixed)] = ix.combine(ia, ib, mixed).positions()
    return results


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_every_combination_path_selects_the_same_pairs(data):
    x = data.draw(sparse_vector())
    w = data.draw(sparse_vector(n=x.size))
    t = data.draw(st.integers(0, 127))
    a, b = ix.threshold(x, t), ix.threshold(w, 0)
    want = np.flatnonzero(a & b)
    for path, got in _all_paths(a, b).items():
        np.testing.assert_array_equal(got, want, err_msg=str(path))
    # compaction: the processed pairs, from dense and from packed storage
    for fx in ("direct", "stride"):
        xi = Index.direct(a) if fx == "direct" else Index.stride(ix.direct_to_stride(a), x.size)
        wi = Index.direct(b)
        pos, xs, ws = ix.compact(x, xi, w, wi)
        np.testing.assert_array_equal(pos, want)
        np.testing.assert_array_equal(xs, x[want])
        np.testing.assert_array_equal(ws, w[want])
        pos2, xs2, ws2 = ix.compact(x[a], xi, w[b], wi, x_packed=True, w_packed=True)
        np.testing.assert_array_equal(xs2, x[want])
        np.testing.assert_array_equal(ws2, w[want])


def test_stride_example_from_the_spec():
    bits = np.zeros(12, bool)
    bits[[0, 3, 4, 9]] = True
    np.testing.assert_array_equal(ix.direct_to_stride(bits), [0, 3, 1, 5])
    np.testing.assert_array_equal(ix.stride_to_direct([0, 3, 1, 5], 12), bits)


def test_stride_merge_is_prefix_sum_intersect_redifference():
    # positions a: 1 4 6 10, b: 0 4 5 10 11 -> common 4 10 -> strides 4 6
    np.testing.assert_array_equal(ix.merge_stride([1, 3, 2, 4], [0, 4, 1, 5, 1]), [4, 6])
    assert ix.merge_stride([], [0, 1]).size == 0


@pytest.mark.parametrize("n", [0, 1, 7, 8, 64, 65, 4096])
@pytest.mark.parametrize("kind", ["zero", "all", "first", "last"])
def test_edge_cases(n, kind):
    bits = np.zeros(n, bool)
    if n:
        bits[{"zero": [], "all": slice(None), "first": [0], "last": [-1]}[kind]] = True
    s = ix.direct_to_stride(bits)
    np.testing.assert_array_equal(ix.stride_to_direct(s, n), bits)
    enc = ix.encode_direct(bits, 64)
    assert len(enc) == ix.direct_row_bytes(n, 64) and len(enc) % 8 == 0
    np.testing.assert_array_equal(ix.decode_direct(enc, n), bits)
    dec, used = ix.decode_stride(ix.encode_stride(s))
    np.testing.assert_array_equal(dec, s)
    if n:
        for paths in _all_paths(bits, bits).values():
            np.testing.assert_array_equal(paths, np.flatnonzero(bits))


@settings(max_examples=300)
@given(st.lists(st.integers(0, 2000), max_size=50))
def test_stride_encoding_round_trip_with_escapes(gaps):
    strides = np.array([g if i == 0 else g + 1 for i, g in enumerate(gaps)], dtype=np.int64)
    enc = ix.encode_stride(strides)
    dec, used = ix.decode_stride(enc + b"\x07junk")
    assert used == len(enc)
    np.testing.assert_array_equal(dec, strides)


@pytest.mark.parametrize("stride,entries", [
    (0, [0]), (254, [254]), (255, [255, 0]), (256, [255, 1]), (510, [255, 255, 0]),
])
def test_escape_encoding(stride, entries):
    assert ix.stride_entries([stride]).tolist() == entries
    assert ix.strides_from_entries(np.array(entries)).tolist() == [stride]


@pytest.mark.parametrize("entries,message", [
    ([3, 0], "repeats a position"),
    ([3, 255], "ends with an escape"),
])
def test_malformed_stride_entries(entries, message):
    with pytest.raises(IndexFormatError, match=message):
        ix.strides_from_entries(np.array(entries))


def test_truncated_encodings():
    with pytest.raises(IndexFormatError, match="only 1 bytes follow"):
        ix.decode_stride(bytes([5, 0, 1]))
    with pytest.raises(IndexFormatError, match="runs past the end"):
        ix.decode_stride(bytes([5]))
    with pytest.raises(IndexFormatError, match="runs past the end"):
        ix.decode_direct(bytes(2), 17)
    with pytest.raises(IndexFormatError, match="reaches position 9"):
        ix.stride_to_direct([0, 9], 9)


@pytest.mark.parametrize("x,g,t3,t4,keep", [
    ([0, 0, 5, 5], 2, 0, 2, [1, 1, 1, 1]),      # 2 small elements, not more than t4 = 2: kept
    ([0, 0, 5, 5], 2, 0, 1, [0, 0, 1, 1]),      # first group has 2 > 1 small: deleted
    ([1, 2, 3, 9, 9, 9], 3, 3, 2, [0, 0, 0, 1, 1, 1]),
    ([1, 2, 3, 9, 9], 3, 3, 2, [0, 0, 0, 1, 1]),  # short last group
    ([-128, 0], 2, 127, 1, [1, 1]),             # |-128| = 128 > 127: one small, not > 1
    ([-127, 0], 2, 127, 1, [0, 0]),             # two small elements > 1: deleted
])
def test_group_pruning(x, g, t3, t4, keep):
    got = ix.group_prune(np.array(x, np.int8), g, t3, t4)
    np.testing.assert_array_equal(got, np.array(keep, bool))


def test_direct_matrix_orders():
    w = np.array([[0, 3, 0], [4, 0, 5]], np.int8)
    np.testing.assert_array_equal(ix.direct_matrix(w, order="out"), w != 0)
    np.testing.assert_array_equal(ix.direct_matrix(w, order="in"), (w != 0).T)


def test_encoded_size_prefers_stride_when_sparse():
    bits = np.zeros(1024, bool)
    bits[::50] = True
    assert ix.encoded_size(bits, "stride") < ix.encoded_size(bits, "direct", 64)
    assert ix.encoded_size(np.ones(1024, bool), "direct", 64) < ix.encoded_size(np.ones(1024, bool), "stride")


@pytest.mark.parametrize("strides,hexbytes", [
    ([0, 3, 1, 5], "040000030105"), ([300], "0200ff2d"), ([], "0000"),
])
def test_stride_examples_in_docs_formats(strides, hexbytes):
    assert ix.encode_stride(np.array(strides)).hex() == hexbytes
