"""The cupy backend's KV codec arithmetic (cupy_kernels.cu: f32_to_bf16, f32_to_e4m3,
e4m3_to_f32, kv_store), emulated step by step in numpy, gives the bytes of engine/kv/codec.py.
Runs on the CPU; the same bytes are checked on a GPU by tests/conformance/test_kv_bytes.py."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from engine.kv import codec

F32 = np.float32


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    u = x.view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, (u >> 16) | 0x40, r).astype(np.uint16)


def f32_to_e4m3(x: np.ndarray) -> np.ndarray:
    sign = ((x.view(np.uint32) >> 24) & 0x80).astype(np.uint8)
    a = np.abs(x)
    _, e = np.frexp(a)
    big_e = np.maximum(e - 1, -6)
    r = np.rint(np.ldexp(a, (3 - big_e).astype(np.int32))).astype(np.int32)
    code = np.where(a == 0, 0, ((big_e + 6) << 3) + r).astype(np.uint8)
    return sign | code


def e4m3_to_f32(c: np.ndarray) -> np.ndarray:
    c = c.astype(np.int32)
    ef, m = (c >> 3) & 15, c & 7
    v = np.where(
        ef == 0,
        np.ldexp(m.astype(F32), np.full_like(m, -9)),
        np.ldexp((8 + m).astype(F32), ef - 10),
    ).astype(F32)
    return np.where(c & 0x80, -v, v)


def kv_store_fp8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    amax = np.max(np.abs(x), axis=-1)
    _, e = np.frexp(amax)
    ex = np.clip(e - 8, -128, 127)
    scaled = np.clip(np.ldexp(x, -ex[..., None].astype(np.int32)), F32(-448), F32(448))
    return f32_to_e4m3(scaled.astype(F32)), ex.astype(np.int8)


def edge_values() -> np.ndarray:
    rng = np.random.default_rng(0)
    codes = np.arange(256, dtype=np.uint8)
    finite = codes[(codes & 0x7F) != 0x7F]
    vals = finite.view(ml_dtypes.float8_e4m3fn).astype(F32)
    mids = (vals[:-1].astype(np.float64) + vals[1:]) / 2  # ties between neighbours
    rand = rng.standard_normal(20000) * 10.0 ** rng.integers(-12, 3, 20000)
    return np.concatenate([vals, mids, np.nextafter(mids, 0), rand]).astype(F32)


def test_e4m3_rounding_equals_ml_dtypes() -> None:
    x = edge_values()
    x = x[np.abs(x) <= 448]
    want = x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    assert f32_to_e4m3(x).tobytes() == want.tobytes()


def test_e4m3_decode_equals_ml_dtypes() -> None:
    codes = np.arange(256, dtype=np.uint8)
    codes = codes[(codes & 0x7F) != 0x7F]
    want = codes.view(ml_dtypes.float8_e4m3fn).astype(F32)
    assert e4m3_to_f32(codes).tobytes() == want.tobytes()


def test_bf16_rounding_equals_ml_dtypes() -> None:
    x = edge_values()
    ties = ((np.arange(0x3F00, 0x3F40, dtype=np.uint32) << 16) | 0x8000).view(F32)  # even, odd
    x = np.concatenate([x, ties, -ties, np.array([np.inf, -np.inf, 3.4e38, -0.0], F32)])
    want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    assert f32_to_bf16(x).tobytes() == want.tobytes()


def test_kv_store_fp8_equals_codec() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 4, 32)) * 10.0 ** rng.integers(-40, 30, (64, 4, 1))
    x = x.astype(F32)
    x[0] = 0.0
    x[1] = -0.0
    codes, exps = kv_store_fp8(x)
    want_codes, want_exps = codec.encode("fp8", x)
    assert codes.tobytes() == want_codes.view(np.uint8).tobytes()
    assert exps.tobytes() == want_exps.tobytes()
