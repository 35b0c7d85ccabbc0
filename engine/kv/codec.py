"""KV row encodings. Each row's stored bytes depend only on that row.

fp8: e4m3 codes with one power-of-two scale per (position, kv head): the scale exponent is
frexp(amax) - 8, so |x| / scale < 256 <= 448, and scaling by a power of two is exact.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

KV_DTYPES = ("bf16", "fp8", "f32")
FP8_MAX = 448.0


def code_dtype(kind: str) -> np.dtype:
    return {
        "bf16": np.dtype(ml_dtypes.bfloat16),
        "fp8": np.dtype(ml_dtypes.float8_e4m3fn),
        "f32": np.dtype(np.float32),
    }[kind]


def encode(kind: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """x [n, heads, D] float32 -> (codes, per-(row, head) int8 exponents or None)."""
    if kind == "f32":
        return x.astype(np.float32), None
    if kind == "bf16":
        return x.astype(ml_dtypes.bfloat16), None
    amax = np.max(np.abs(x), axis=-1)
    _, exp = np.frexp(amax)
    exp = np.clip(exp - 8, -128, 127).astype(np.int8)  # tiny rows: no int8 wrap-around
    scaled = np.ldexp(x, -exp[..., None].astype(np.int32))
    codes = np.clip(scaled, -FP8_MAX, FP8_MAX).astype(ml_dtypes.float8_e4m3fn)
    return codes, exp


def decode(kind: str, codes: np.ndarray, exp: np.ndarray | None) -> np.ndarray:
    if kind != "fp8":
        return codes.astype(np.float32)
    return np.ldexp(codes.astype(np.float32), exp[..., None].astype(np.int32)).astype(np.float32)
