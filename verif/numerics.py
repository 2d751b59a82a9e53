"""Numerics of the core, defined once (see the ISA reference, section Numerics).

int8 activations and weights, int32 accumulators with wrap-around, requantisation
``y = sat8(round_half_up(wrap32(acc + bias) * mult / 2**shift))``.
"""

from __future__ import annotations

import numpy as np

INT8_MIN, INT8_MAX = -128, 127
MULT_MIN, MULT_MAX = -(1 << 15), (1 << 15) - 1
SHIFT_MAX = 47


def wrap32(x: np.ndarray | int) -> np.ndarray:
    """Reduce integers modulo 2**32 into int32 (two's complement wrap-around)."""
    return np.asarray(x, dtype=np.int64).astype(np.uint32).view(np.int32)


def sat8(x: np.ndarray, relu: bool = False) -> np.ndarray:
    return np.clip(x, 0 if relu else INT8_MIN, INT8_MAX).astype(np.int8)


def round_shift(p: np.ndarray, shift: np.ndarray | int) -> np.ndarray:
    """``p / 2**shift`` rounded half up (toward +inf at .5), for int64 ``p`` and 0..47 shifts."""
    p = np.asarray(p, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    half = np.where(shift > 0, np.left_shift(1, np.maximum(shift - 1, 0)), 0)
    return np.right_shift(p + half, shift)


def requantize(acc: np.ndarray, bias: np.ndarray, mult: np.ndarray, shift: np.ndarray,
               relu: bool = False) -> np.ndarray:
    """int32 accumulators -> int8, per channel (arrays broadcast together)."""
    v = wrap32(np.asarray(acc, dtype=np.int64) + np.asarray(bias, dtype=np.int64))
    p = v.astype(np.int64) * np.asarray(mult, dtype=np.int64)
    return sat8(round_shift(p, shift), relu)


def quantize_multiplier(scale: float, mult_bits: int = 15) -> tuple[int, int]:
    """Choose ``(mult, shift)`` with ``mult / 2**shift ~= scale``, ``|mult| < 2**mult_bits``.

    Raises ``ValueError`` when ``scale`` cannot be represented (not finite, or needs a
    shift outside 0..47)."""
    if not np.isfinite(scale) or scale == 0:
        if scale == 0:
            return 0, 0
        raise ValueError(f"scale {scale} is not finite")
    m, e = np.frexp(abs(scale))  # scale = m * 2**e, 0.5 <= m < 1
    shift = mult_bits - int(e)
    mult = int(round(m * (1 << mult_bits)))
    if mult == 1 << mult_bits:  # rounding overflow
        mult //= 2
        shift -= 1
    if shift < 0:
        raise ValueError(f"scale {scale} is too large for a {mult_bits}-bit multiplier")
    while shift > SHIFT_MAX:  # tiny scale: drop precision
        mult = (mult + 1) // 2
        shift -= 1
    return (mult if scale > 0 else -mult), shift


def pack_params(bias: np.ndarray, mult: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """Per-channel requantisation parameters -> bytes (8 per channel, see ISA numerics)."""
    n = len(bias)
    rec = np.zeros(n, dtype=[("bias", "<i4"), ("mult", "<i2"), ("shift", "u1"), ("pad", "u1")])
    rec["bias"], rec["mult"], rec["shift"] = bias, mult, shift
    return rec.view(np.uint8).reshape(-1)


#: the bytes of a parameter row ``vewp`` reads: its multipliers ma, mb (int16 each)
EW_MULTIPLIER_BYTES = 4


def pack_ew_multipliers(ma: int, mb: int, row_bytes: int) -> np.ndarray:
    """One parameter row holding ``vewp``'s multipliers: int16 ``ma`` at bytes 0-1, ``mb``
    at bytes 2-3 (little-endian), the rest zero."""
    for name, v in (("ma", ma), ("mb", mb)):
        if not -32768 <= v <= 32767:
            raise ValueError(f"vewp multiplier {name}={v} is outside -32768..32767")
    row = np.zeros(row_bytes, np.uint8)
    row[:EW_MULTIPLIER_BYTES] = np.array([ma, mb], "<i2").view(np.uint8)
    return row


def unpack_ew_multipliers(raw: np.ndarray) -> tuple[int, int]:
    """``vewp``'s (ma, mb) from the start of a parameter row."""
    ma, mb = np.ascontiguousarray(raw[:EW_MULTIPLIER_BYTES], dtype=np.uint8).view("<i2")
    return int(ma), int(mb)


def unpack_params(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rec = np.ascontiguousarray(raw, dtype=np.uint8).view(
        [("bias", "<i4"), ("mult", "<i2"), ("shift", "u1"), ("pad", "u1")])
    return rec["bias"].astype(np.int64), rec["mult"].astype(np.int64), rec["shift"].astype(np.int64)
