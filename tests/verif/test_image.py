"""ROM and memory images: formats, manifests, errors, atomic writes."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from snpu.errors import ImageError
from snpu.verif import image


@given(st.lists(st.integers(0, (1 << 128) - 1), max_size=20))
def test_rom_hex_and_bin_round_trip(words):
    assert image.rom_from_hex(image.rom_to_hex(words)) == words
    assert image.rom_from_bin(image.rom_to_bin(words)) == words


def test_rom_files(tmp_path):
    words = [1, (1 << 128) - 1, 0x1234]
    for suffix in (".hex", ".bin"):
        path = image.write_rom(tmp_path / f"p{suffix}", words)
        assert image.read_rom(path) == words
    text = (tmp_path / "p.hex").read_text().splitlines()
    assert all(len(line) == 32 for line in text), "one 32-digit word per line for $readmemh"


@pytest.mark.parametrize("text,message", [
    ("12\nzz\n", "p.hex:2: 'zz' is not a hexadecimal word"),
    ("1" * 33 + "\n", "wider than 128 bits"),
    ("@10\n", "address records"),
])
def test_bad_hex_rom(tmp_path, text, message):
    (tmp_path / "p.hex").write_text(text)
    with pytest.raises(ImageError, match=message):
        image.read_rom(tmp_path / "p.hex")


def test_bad_bin_rom(tmp_path):
    (tmp_path / "p.bin").write_bytes(bytes(17))
    with pytest.raises(ImageError, match="17 bytes is not a whole number"):
        image.read_rom(tmp_path / "p.bin")


def test_memory_image_round_trip(tmp_path):
    img = image.MemoryImage(4096)
    img.add_region("rom", 0, 256, "rom")
    a = np.arange(-5, 5, dtype=np.int8).reshape(2, 5)
    img.alloc("x", a.nbytes, "input", "int8", a.shape)
    img.write("x", a)
    img.alloc("y", 64, "output", "int32", (4, 4))
    binp, manp = img.save(tmp_path / "m.bin")
    again = image.MemoryImage.load(binp)
    np.testing.assert_array_equal(again.read("x"), a)
    assert again.region("y").shape == (4, 4) and again.region("y").dtype == "int32"
    assert json.loads(manp.read_text())["format"] == "snpu-mem/1"
    hexp = img.to_readmemh(tmp_path / "m.hex")
    lines = hexp.read_text().split()
    assert len(lines) == 4096 // 8
    assert int(lines[img.region("x").addr // 8], 16) & 0xFF == 0xFB  # -5, little-endian lanes


@pytest.mark.parametrize("build,message", [
    (lambda m: m.add_region("a", 4000, 200, "input"), "lies outside memory"),
    (lambda m: (m.add_region("a", 0, 64, "input"), m.add_region("b", 32, 64, "input")),
     "overlaps 'a'"),
    (lambda m: m.add_region("a", 0, 64, "secret"), "kind 'secret'"),
    (lambda m: m.add_region("a", 0, 8, "input", "int32", (4,)), "needs more than 8 bytes"),
    (lambda m: m.read("nope"), "no region named 'nope'"),
    (lambda m: m.alloc("big", 1 << 20, "input"), "out of external memory placing 'big'"),
])
def test_region_errors(build, message):
    with pytest.raises(ImageError, match=message):
        build(image.MemoryImage(4096))


def test_bad_manifest(tmp_path):
    (tmp_path / "m.bin").write_bytes(bytes(64))
    (tmp_path / "m.json").write_text("{nope")
    with pytest.raises(ImageError, match="m.json: not valid JSON"):
        image.MemoryImage.load(tmp_path / "m.bin")
    (tmp_path / "m.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ImageError, match="not an snpu-mem/1 manifest"):
        image.MemoryImage.load(tmp_path / "m.bin")
    (tmp_path / "m.json").write_text(json.dumps({"format": "snpu-mem/1", "size": 64,
                                                 "regions": [{"name": "x"}]}))
    with pytest.raises(ImageError, match="region #0 is malformed"):
        image.MemoryImage.load(tmp_path / "m.bin")


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    from snpu import fileio

    target = tmp_path / "out.bin"
    target.write_bytes(b"old")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(fileio.os, "replace", boom)
    with pytest.raises(OSError):
        fileio.atomic_write(target, b"new contents")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_outputs_get_the_usual_permissions(tmp_path):
    """Temporary files and directories are private (0600 / 0700); what replaces the output
    gets the permissions of any new file under the umask."""
    from snpu import fileio

    f = fileio.atomic_write(tmp_path / "out.bin", b"x")
    d = fileio.temp_dir_beside(tmp_path / "dir")
    assert f.stat().st_mode & 0o777 == 0o666 & ~fileio._UMASK
    assert d.stat().st_mode & 0o777 == 0o777 & ~fileio._UMASK
