"""Batch invariance of the numpy ops, bit for bit: a row alone equals the same row inside
batches of many sizes, at many positions, beside random neighbours."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import EngineFailure
from engine.ops.numpy_ops import NumpyOps

OPS = NumpyOps()
SIZES = [1, 2, 3, 7, 8, 9, 16, 17, 31, 64, 65]
SHAPES = [(64, 96), (128, 384), (384, 128), (128, 1088), (256, 64)]


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


@pytest.mark.parametrize("k,n", SHAPES)
def test_linear_row_alone_equals_row_in_any_batch(k, n):
    r = rng(k + n)
    w = OPS.prepare_linear(r.standard_normal((n, k)).astype(np.float32))
    row = r.standard_normal(k).astype(np.float32)
    alone = OPS.linear(row[None], w)[0]
    for m in SIZES:
        for pos in {0, m // 2, m - 1}:
            x = r.standard_normal((m, k)).astype(np.float32)
            x[pos] = row
            assert np.array_equal(OPS.linear(x, w)[pos], alone), (m, pos)


class TileSkewedOps(NumpyOps):
    """A matmul whose rows at in-tile position ``skew`` come out one ulp off: the way a BLAS
    kernel that splits a tile into row blocks goes wrong (OpenBLAS does at 32 rows)."""

    def __init__(self, skew: int) -> None:
        super().__init__(row_tile=8)
        self.skew = skew

    def linear(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        out = super().linear(x, w)
        off = np.arange(out.shape[0]) % self.row_tile == self.skew
        out[off] = np.nextafter(out[off], np.inf)
        return out


@pytest.mark.parametrize("skew", range(1, 8))
def test_probe_refuses_a_tile_that_is_not_position_invariant(skew):
    """On every machine: an injected non-invariant matmul is refused at load, by name."""
    with pytest.raises(EngineFailure, match=r"not row-invariant at tile 8 for shape \(384, 128\)"):
        TileSkewedOps(skew).prepare_linear(np.ones((128, 384), dtype=np.float32))
    NumpyOps(row_tile=8).prepare_linear(np.ones((128, 384), dtype=np.float32))  # the real one


@pytest.mark.parametrize("width", [32, 64, 128, 1000])
def test_rms_norm_and_silu_are_row_local(width):
    r = rng(width)
    w = r.standard_normal(width).astype(np.float32)
    row = r.standard_normal(width).astype(np.float32)
    alone_norm = OPS.rms_norm(row[None], w, 1e-6)[0]
    alone_silu = OPS.silu_mul(row[None], row[None] * 0.5)[0]
    for m in SIZES:
        x = r.standard_normal((m, width)).astype(np.float32)
        x[m - 1] = row
        assert np.array_equal(OPS.rms_norm(x, w, 1e-6)[m - 1], alone_norm)
        assert np.array_equal(OPS.silu_mul(x, x * 0.5)[m - 1], alone_silu)


def attention_case(seed: int, length: int, hq: int = 4, hkv: int = 2, d: int = 32):
    r = rng(seed)
    q = r.standard_normal((length, hq, d)).astype(np.float32)
    k = r.standard_normal((length, hkv, d)).astype(np.float32)
    v = r.standard_normal((length, hkv, d)).astype(np.float32)
    return q, k, v


@pytest.mark.parametrize("length", [1, 5, 63, 64, 65, 130, 200])
@pytest.mark.parametrize("gqa", [(4, 2), (6, 2), (4, 4)])
def test_attention_query_alone_equals_any_cut(length, gqa):
    """A query row gets the same bits alone, in the whole prompt, or in any step cut."""
    hq, hkv = gqa
    q, k, v = attention_case(length * 7 + hq, length, hq, hkv)
    pos = np.arange(length)
    whole = OPS.attention(q, k, v, pos)
    for p in {0, length // 3, length - 1}:
        alone = OPS.attention(q[p : p + 1], k[: p + 1], v[: p + 1], pos[p : p + 1])
        assert np.array_equal(alone[0], whole[p]), p
    for step in (1, 3, 16, 64, 100):
        if step >= length:
            continue
        parts = [
            OPS.attention(q[a : a + step], k[: a + step], v[: a + step], pos[a : a + step])
            for a in range(0, length, step)
        ]
        assert np.array_equal(np.concatenate(parts)[:length], whole), step


def test_attention_ignores_keys_past_the_query():
    """Keys after a query's position (later rows of its step) change nothing."""
    q, k, v = attention_case(3, 70)
    base = OPS.attention(q[:40], k[:40], v[:40], np.arange(40))
    k2, v2 = k.copy(), v.copy()
    k2[40:] *= 1000.0
    v2[40:] = -v2[40:] * 1e6
    other = OPS.attention(q[:40], k2, v2, np.arange(40))
    assert np.array_equal(base, other)


def test_attention_block_merge_order_matters_so_the_test_can_fail():
    """Guard the guard: summing key blocks in another order gives other bits."""
    q, k, v = attention_case(5, 300)
    pos = np.arange(300)
    ref = OPS.attention(q, k, v, pos)
    other = NumpyOps(key_block=32).attention(q, k, v, pos)
    assert not np.array_equal(ref, other)
