"""The topology store: varints, round trips, and damage reported by member and byte offset."""

import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snpu.compiler.mapping import store, varint
from snpu.compiler.mapping.generate import small_world
from snpu.compiler.mapping.topology import TopologyError, from_edges


@given(st.lists(st.integers(0, 2**64 - 1), max_size=200))
@settings(max_examples=200, deadline=None)
def test_varint_round_trip(values):
    a = np.array(values, np.uint64)
    data = varint.encode(a)
    back, starts = varint.decode(data)
    np.testing.assert_array_equal(back, a)
    assert len(data) == sum(max(1, -(-int(v).bit_length() // 7)) for v in values)


def test_varint_bytes_are_the_documented_ones():
    # 7 data bits per byte, least significant group first, top bit 1 = more bytes follow
    assert varint.encode(np.array([0, 127, 128, 300])) == bytes([0x00, 0x7F, 0x80, 0x01, 0xAC, 0x02])


def test_truncated_varint_names_its_offset():
    with pytest.raises(varint.VarintError) as e:
        varint.decode(bytes([0x05, 0x81, 0x82]))
    assert e.value.offset == 1


def _topology(directed=True):
    rng = np.random.default_rng(0)
    V = 300
    s, d = rng.integers(0, V, 2000), rng.integers(0, V, 2000)
    return from_edges(V, s, d, rng.integers(1, 1000, 2000), rng.integers(1, 9, V), name="t",
                      directed=directed)


@pytest.mark.parametrize("directed", [True, False])
def test_round_trip(tmp_path, directed):
    t = _topology(directed)
    t.check()
    store.write(tmp_path / "t.zip", t, group_size=64)
    back = store.read(tmp_path / "t.zip")
    for k in ("indptr", "indices", "weights", "sizes"):
        np.testing.assert_array_equal(getattr(back, k), getattr(t, k))
    if directed:
        np.testing.assert_array_equal(back.flags, t.flags)
    else:
        assert back.flags is None
    with zipfile.ZipFile(tmp_path / "t.zip") as z:
        names = z.namelist()
        assert names[0] == "topology.json" and "groups/000004.bin" in names
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist())


def test_projection_round_trip(tmp_path):
    t = small_world(500, seed=1)
    proj = np.random.default_rng(0).integers(0, 500, 2000)
    store.write(tmp_path / "l.zip", t, group_size=128, level=1, projection=proj)
    np.testing.assert_array_equal(store.read_projection(tmp_path / "l.zip"), proj)


def _rewrite(src, dst, member, change):
    with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zo:
        for info in zi.infolist():
            data = zi.read(info.filename)
            if info.filename == member:
                data = change(data)
                if data is None:
                    continue
            zo.writestr(info.filename, data)


@pytest.fixture
def good(tmp_path):
    store.write(tmp_path / "good.zip", _topology(), group_size=64)
    return tmp_path / "good.zip"


def test_truncated_member_names_member_and_offset(good, tmp_path):
    bad = tmp_path / "bad.zip"
    _rewrite(good, bad, "groups/000002.bin", lambda d: d[:-1] + bytes([0x80]))
    with pytest.raises(TopologyError, match=r"bad.zip: member groups/000002.bin, byte \d+"):
        store.read(bad)


def test_vertex_out_of_range_names_member_and_offset(good, tmp_path):
    bad = tmp_path / "bad.zip"
    # second number of the member is vertex 128's connection count; the fourth its first
    # connection's other vertex: make it huge
    def change(d):
        vals, starts = varint.decode(d)
        vals[3] = 10**6
        return varint.encode(vals)
    _rewrite(good, bad, "groups/000002.bin", change)
    with pytest.raises(TopologyError, match=r"member groups/000002.bin, byte 3: .*out of range"):
        store.read(bad)


def test_missing_member(good, tmp_path):
    bad = tmp_path / "bad.zip"
    _rewrite(good, bad, "groups/000001.bin", lambda d: None)
    with pytest.raises(TopologyError, match="member groups/000001.bin is missing"):
        store.read(bad)


def test_corrupt_compressed_data_is_named(good, tmp_path):
    raw = bytearray(good.read_bytes())
    with zipfile.ZipFile(good) as z:
        info = z.getinfo("groups/000003.bin")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    for k in range(start + 5, start + 25):
        raw[k] ^= 0x5A
    bad = tmp_path / "bad.zip"
    bad.write_bytes(bytes(raw))
    with pytest.raises(TopologyError, match="member groups/000003.bin is damaged"):
        store.read(bad)


def test_truncated_archive(good, tmp_path):
    bad = tmp_path / "bad.zip"
    bad.write_bytes(good.read_bytes()[:200])
    with pytest.raises(TopologyError, match="bad.zip: not a readable zip"):
        store.read(bad)


def test_bad_header(good, tmp_path):
    bad = tmp_path / "bad.zip"
    _rewrite(good, bad, "topology.json", lambda d: b'{"format": "something-else"}')
    with pytest.raises(TopologyError, match="member topology.json: format"):
        store.read(bad)


def test_failed_write_leaves_no_file(tmp_path):
    t = _topology()
    t.sizes = t.sizes[:-1]  # inconsistent: writing fails part-way
    with pytest.raises(Exception):
        store.write(tmp_path / "t.zip", t, group_size=64)
    assert list(tmp_path.iterdir()) == []


def test_streamed_layered_store_equals_the_in_memory_graph(tmp_path):
    from snpu.compiler.mapping.generate import layered, write_layered

    meta = write_layered(tmp_path / "l.zip", 4, 12, 1, group_size=100)
    a, b = store.read(tmp_path / "l.zip"), layered(4, 12, 1)
    assert meta["connections"] == b.n_edges
    for k in ("indptr", "indices", "weights", "sizes", "flags"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k))
