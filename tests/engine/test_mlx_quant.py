from __future__ import annotations

import importlib.util

import ml_dtypes
import numpy as np
import pytest

from engine.model import mlx_quant as q

BITS = (2, 3, 4, 5, 6, 8)
GROUPS = (32, 64, 128)
BF16 = ml_dtypes.bfloat16


def _weights(seed: int, rows: int, cols: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = rng.normal(0.0, 0.05, (rows, cols)).astype(np.float32)
    w[1] += 0.04  # groups that are all positive
    w[2, ::5] = 0.0
    w[3, :] = 0.0  # all-zero groups
    w[4, :] = 0.25  # constant groups
    return w


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("group_size", GROUPS)
def test_roundtrip_bounds(bits: int, group_size: int) -> None:
    w = _weights(bits * 1000 + group_size, 9, group_size * 3)
    wq, scales, biases = q.quantize(w, group_size, bits)
    assert wq.dtype == np.uint32 and wq.shape == (9, w.shape[1] * bits // 32)
    assert scales.dtype == biases.dtype == np.float32
    assert scales.shape == biases.shape == (9, 3)
    codes = q.unpack(wq, bits)
    assert codes.shape == w.shape and int(codes.max()) < 2**bits
    deq = q.dequantize(wq, scales, biases, group_size, bits)
    assert deq.dtype == np.float32 and deq.shape == w.shape
    err = np.abs(w - deq).reshape(9, 3, group_size)
    step = np.abs(scales)[..., None]
    tiny = 1e-6
    # Codes inside the range are rounded to the nearest step.
    inside = ((codes > 0) & (codes < 2**bits - 1)).reshape(err.shape)
    assert np.all((err <= step * 0.5 * (1 + 1e-5) + tiny) | ~inside)
    # The far end may be clipped by less than one step (the scale is snapped to the edge).
    assert np.all(err <= step * (1 + 1e-5) + tiny)
    # The larger-magnitude end of each group is exact; zero groups stay exactly zero.
    g = w.reshape(9, 3, group_size)
    idx = np.abs(g).argmax(axis=-1)[..., None]
    edge_err = np.take_along_axis(err, idx, axis=-1)
    assert np.all(edge_err == 0)
    assert np.all(deq[3] == 0)


@pytest.mark.parametrize("bits", (1, *BITS))
def test_pack_unpack_roundtrip(bits: int) -> None:
    rng = np.random.default_rng(bits)
    codes = rng.integers(0, 2**bits, size=(5, 128), dtype=np.uint32)
    packed = q.pack(codes, bits)
    assert packed.dtype == np.uint32 and packed.shape == (5, 128 * bits // 32)
    assert np.array_equal(q.unpack(packed, bits), codes)


def test_pack_bit_order() -> None:
    # 4 bits: code 0 in the lowest nibble of each uint32 word.
    assert q.pack(np.arange(1, 9).reshape(1, 8), 4)[0, 0] == 0x87654321
    # 8 bits: little-endian bytes.
    assert q.pack(np.array([[1, 2, 3, 4]]), 8)[0, 0] == 0x04030201
    # 3 bits: one bit stream over words; code 10 spans bits 30..32.
    codes = np.zeros((1, 32), dtype=np.uint32)
    codes[0, 10] = 7
    assert q.pack(codes, 3).tolist() == [[0xC0000000, 0x1, 0x0]]
    # 6 bits: code 5 spans bits 30..35.
    codes = np.zeros((1, 16), dtype=np.uint32)
    codes[0, 5] = 0b101011
    assert q.pack(codes, 6).tolist() == [[0xC0000000, 0b1010, 0x0]]


def test_bf16_weights_keep_bf16_scales() -> None:
    w = _weights(7, 6, 128).astype(BF16)
    wq, scales, biases = q.quantize(w, 64, 4)
    assert scales.dtype == biases.dtype == BF16
    f32 = q.dequantize(wq, scales, biases, 64, 4)
    native = q.dequantize(wq, scales, biases, 64, 4, dtype=None)
    assert f32.dtype == np.float32 and native.dtype == BF16
    # Two bf16 roundings (product, then sum) apart from the float32 result.
    codes = q.unpack(wq, 4).astype(np.float32).reshape(6, 2, 64)
    mag = (
        np.abs(codes * scales.astype(np.float32)[..., None])
        + np.abs(biases.astype(np.float32))[..., None]
    )
    diff = np.abs(f32 - native.astype(np.float32)).reshape(6, 2, 64)
    assert np.all(diff <= mag * 2**-7)


def test_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError):
        q.quantize(np.zeros((2, 96), np.float32), 64, 4)
    with pytest.raises(ValueError):
        q.quantize(np.zeros((2, 64), np.float32), 64, 7)


HAVE_MLX = importlib.util.find_spec("mlx") is not None


def _to_numpy(a: object) -> np.ndarray:
    import mlx.core as mx

    if a.dtype == mx.bfloat16:
        return np.array(a.view(mx.uint16)).view(BF16)
    return np.array(a)


@pytest.mark.skipif(not HAVE_MLX, reason="mlx is not installed")
@pytest.mark.parametrize("dtype", ("float32", "bfloat16", "float16"))
@pytest.mark.parametrize("bits", (1, *BITS))
@pytest.mark.parametrize("group_size", GROUPS)
def test_bit_exact_against_mlx(dtype: str, bits: int, group_size: int) -> None:
    import mlx.core as mx

    np_dtype = {"float32": np.float32, "bfloat16": BF16, "float16": np.float16}[dtype]
    w = _weights(bits + group_size, 24, group_size * 4).astype(np_dtype)
    mw = mx.array(w.astype(np.float32)).astype(getattr(mx, dtype))
    mq, ms, mb = mx.quantize(mw, group_size, bits)
    wq, scales, biases = q.quantize(w, group_size, bits)
    assert np.array_equal(_to_numpy(mq), wq)
    assert _to_numpy(ms).tobytes() == scales.tobytes() and scales.dtype == np_dtype
    assert _to_numpy(mb).tobytes() == biases.tobytes()
    # mx.dequantize works in the scales' dtype: dtype=None reproduces it bit for bit.
    ref = _to_numpy(mx.dequantize(mq, ms, mb, group_size, bits))
    ours = q.dequantize(wq, scales, biases, group_size, bits, dtype=None)
    assert ref.dtype == ours.dtype and ref.tobytes() == ours.tobytes()
    if dtype == "float32":
        assert q.dequantize(wq, scales, biases, group_size, bits).tobytes() == ref.tobytes()
