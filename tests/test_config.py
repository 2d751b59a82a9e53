"""Core configuration: validation and JSON round trip."""

import json

import pytest

from snpu.config import CoreConfig
from snpu.errors import ConfigError


def test_defaults_and_round_trip(tmp_path):
    c = CoreConfig()
    (tmp_path / "c.json").write_text(json.dumps(c.to_dict()))
    assert CoreConfig.load(tmp_path / "c.json") == c
    assert c.acc_elems == c.acc_words * c.lanes


@pytest.mark.parametrize("kw,message", [
    ({"lanes": 12}, "lanes=12 must be a power of two"),
    ({"chunk_bits": 32}, "chunk_bits=32 must be 64"),
    ({"nidx_bytes": 64}, "nidx_bytes=64"),
    ({"axi_data_bits": 96}, "axi_data_bits=96 must be 64, 128 or 256"),
    ({"lanes": 4, "vx_lanes": 8}, "vx_lanes=8 must be 0 .* or a power of two in 1..lanes"),
    ({"vx_lanes": 3}, "vx_lanes=3"),
])
def test_bad_parameters_are_named(kw, message):
    with pytest.raises(ConfigError, match=message):
        CoreConfig(**kw)


def test_unknown_and_mistyped_keys(tmp_path):
    with pytest.raises(ConfigError, match="unknown parameter\\(s\\) lane"):
        CoreConfig.from_dict({"lane": 4})
    with pytest.raises(ConfigError, match="lanes must be an integer"):
        CoreConfig.from_dict({"lanes": "4"})
    with pytest.raises(ConfigError, match="no such core config"):
        CoreConfig.load(tmp_path / "none.json")


def test_vx_width_defaults_to_the_lanes():
    """``vx_lanes = 0`` follows ``lanes`` (a copy with other lanes keeps it following)."""
    import dataclasses
    c = CoreConfig(lanes=8)
    assert (c.vx_width, c.vx_slices) == (8, 1)
    assert dataclasses.replace(c, lanes=16).vx_width == 16
    n = CoreConfig(lanes=16, vx_lanes=4)
    assert (n.vx_width, n.vx_slices) == (4, 4)
    assert CoreConfig.from_dict(n.to_dict()) == n
