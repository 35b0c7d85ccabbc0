"""The cupy backend's kernels on a GPU (marked `gpu`; skipped where cupy cannot run).

Exactness (bit equality) where the arithmetic is exact, and correctness against numpy in
float64 where it is not (rounding differs between the two, so those use a tolerance: they
check the math, not invariance; invariance is tests/conformance's job)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.engine.cupy_setup import GPU_ONLY

pytestmark = GPU_ONLY


@pytest.fixture(scope="module")
def ops():  # type: ignore[no-untyped-def]
    from engine.ops.cupy_ops import CupyOps

    return CupyOps()


def test_linear_is_exact_on_small_integers_and_row_invariant(ops) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    w = rng.integers(-3, 4, (640, 256)).astype(np.float32)  # [out, in]
    x = rng.integers(-3, 4, (37, 256)).astype(np.float32)
    wp = ops.prepare_linear(w)
    got = ops.to_numpy(ops.linear(ops.asarray(x), wp))
    assert got.tobytes() == (x @ w.T).astype(np.float32).tobytes()
    xr = rng.standard_normal((37, 256)).astype(np.float32)
    full = ops.to_numpy(ops.linear(ops.asarray(xr), wp))
    for i in (0, 5, 8, 36):
        alone = ops.to_numpy(ops.linear(ops.asarray(xr[i : i + 1]), wp))
        assert alone.tobytes() == full[i : i + 1].tobytes()


def test_probe_refuses_a_row_variant_gemm(ops, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from engine.errors import EngineFailure

    real = ops.linear

    def shifted(x, w):  # type: ignore[no-untyped-def]
        y = real(x, w)
        return y + (y.shape[0] > 1) * 1e-3  # a row's bits depend on the row count

    monkeypatch.setattr(ops, "linear", shifted)
    with pytest.raises(EngineFailure, match="not row-invariant"):
        ops.prepare_linear(np.ones((64, 32), np.float32))


def test_norm_rope_silu_match_numpy(ops) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 4, 64)).astype(np.float32)
    w = rng.standard_normal(64).astype(np.float32)
    got = ops.to_numpy(ops.rms_norm(ops.asarray(x), ops.asarray(w), 1e-6))
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt(np.mean(x64**2, -1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    cos, sin = rng.standard_normal((2, 5, 32)).astype(np.float32)
    got = ops.to_numpy(ops.rope(ops.asarray(x), ops.asarray(cos), ops.asarray(sin)))
    x1, x2 = x64[..., :32], x64[..., 32:]
    c, s = cos[:, None], sin[:, None]
    want = np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    gu = ops.asarray(rng.standard_normal((5, 16)).astype(np.float32))
    got = ops.to_numpy(ops.silu_mul(gu[:, :8], gu[:, 8:]))
    g, u = ops.to_numpy(gu)[:, :8].astype(np.float64), ops.to_numpy(gu)[:, 8:]
    np.testing.assert_allclose(got, g / (1 + np.exp(-g)) * u, rtol=1e-5, atol=1e-6)


def test_attention_matches_numpy_and_one_key_is_exact(ops) -> None:  # type: ignore[no-untyped-def]
    from engine.ops.numpy_ops import NumpyOps

    rng = np.random.default_rng(2)
    q = rng.standard_normal((6, 4, 64)).astype(np.float32)
    k = rng.standard_normal((300, 2, 64)).astype(np.float32)
    v = rng.standard_normal((300, 2, 64)).astype(np.float32)
    pos = np.array([0, 1, 63, 64, 200, 299])
    got = ops.to_numpy(ops.attention(ops.asarray(q), ops.asarray(k), ops.asarray(v), pos))
    want = NumpyOps().attention(q, k, v, pos)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    # position 0 sees one key: softmax weight exactly 1, output exactly that value row
    assert got[0].tobytes() == np.repeat(v[0], 2, axis=0).tobytes()


def test_bf16_twin_of_norm_and_silu_equals_conversion(ops) -> None:  # type: ignore[no-untyped-def]
    """linear of an rms_norm or silu_mul output (which hands linear its bf16 bits, written by
    the same kernel) equals linear of a copy of it (converted by to_bf16), bit for bit, at a
    full and a partial row tile."""
    rng = np.random.default_rng(6)
    w = ops.prepare_linear(rng.standard_normal((96, 64)).astype(np.float32))
    nw = ops.asarray(rng.standard_normal(64).astype(np.float32))
    for m in (ops.row_tile, 5):
        x = ops.asarray(rng.standard_normal((m, 64)).astype(np.float32))
        for kind in ("norm", "silu"):
            y = ops.rms_norm(x, nw, 1e-6) if kind == "norm" else ops.silu_mul(x, x[:, ::-1])
            assert ops._bf16 is not None and ops._bf16[0] is y  # the twin is y's
            fused = ops.to_numpy(ops.linear(y, w))
            plain = ops.to_numpy(ops.linear(y.copy(), w))
            assert fused.tobytes() == plain.tobytes()


def test_fused_launches_equal_the_ops_they_replace(ops) -> None:  # type: ignore[no-untyped-def]
    """add_rms_norm == add then rms_norm; kv_store2 (k and v in one launch) == two
    kv_store, bf16 and fp8, v a strided slice; attention's bf16 twin == its conversion, as
    the o projection reads it (reshaped). Bit for bit, at a full and a partial row tile."""
    import cupy as cp

    rng = np.random.default_rng(7)
    lin = ops.prepare_linear(rng.standard_normal((64, 1024)).astype(np.float32))
    # rows held in registers (1024), some past them (3000 > 8 x 256), a short odd row (77)
    for cols, m in ((1024, ops.row_tile), (1024, 5), (3000, 3), (77, 2)):
        w = ops.asarray(rng.standard_normal(cols).astype(np.float32))
        a, b = (ops.asarray(rng.standard_normal((m, cols)).astype(np.float32)) for _ in "ab")
        s, y = ops.add_rms_norm(a, b, w, 1e-6)
        plain = ops.rms_norm(a + b, w, 1e-6)
        assert s.tobytes() == (a + b).tobytes() and y.tobytes() == plain.tobytes(), cols
        if cols == 1024:
            assert ops.linear(y, lin).tobytes() == ops.linear(y.copy(), lin).tobytes()
    for kind in ("bf16", "fp8"):
        one, two = (ops.new_kv(1, 4, 16, 2, 64, kind, 1, 64) for _ in "12")
        k = ops.asarray(rng.standard_normal((5, 2, 64)).astype(np.float32))
        wide = ops.asarray(rng.standard_normal((5, 3, 2, 64)).astype(np.float32))
        v = wide[:, 1]  # rows 3 heads apart
        slots = cp.asarray(np.array([0, 3, 17, 40, 63], dtype=np.int64))
        for x, codes, exps in ((k, one.k, one.k_exp), (v, one.v, one.v_exp)):
            one.store(x, slots, codes[0], exps[0] if exps else None)
        two.store_kv(0, k, v, slots)
        for x, y in (
            (one.k, two.k),
            (one.v, two.v),
            (one.k_exp, two.k_exp),
            (one.v_exp, two.v_exp),
        ):
            assert x is None or x[0].tobytes() == y[0].tobytes()
    q = ops.asarray(rng.standard_normal((5, 4, 64)).astype(np.float32))
    kk, vv = (ops.asarray(rng.standard_normal((70, 2, 64)).astype(np.float32)) for _ in "kv")
    out = ops.attention(q, kk, vv, np.array([0, 9, 33, 64, 69])).reshape(5, 256)
    lin = ops.prepare_linear(rng.standard_normal((32, 256)).astype(np.float32))
    assert ops._twin_of(out) is not None
    assert ops.linear(out, lin).tobytes() == ops.linear(out.copy(), lin).tobytes()


def test_qk_norm_rope_matches_numpy(ops) -> None:  # type: ignore[no-untyped-def]
    """The fused q/k norm + RoPE of a qkv row (v columns left alone) against numpy in
    float64, at head dims 32 and 128."""
    rng = np.random.default_rng(4)
    hq, hkv, n = 4, 2, 5
    for d in (32, 128):
        qkv = rng.standard_normal((n, (hq + 2 * hkv) * d)).astype(np.float32)
        qw, kw = rng.standard_normal((2, d)).astype(np.float32)
        cos, sin = rng.standard_normal((2, n, d // 2)).astype(np.float32)
        got = ops.qk_norm_rope(ops.asarray(qkv), hq, hkv, ops.asarray(qw), ops.asarray(kw),
                               1e-6, ops.asarray(cos), ops.asarray(sin))  # fmt: skip
        x64 = qkv.astype(np.float64)
        for out, x, w in (
            (got[0], x64[:, : hq * d].reshape(n, hq, d), qw),
            (got[1], x64[:, hq * d : (hq + hkv) * d].reshape(n, hkv, d), kw),
        ):
            y = x / np.sqrt(np.mean(x**2, -1, keepdims=True) + 1e-6) * w
            y1, y2, c, s = y[..., : d // 2], y[..., d // 2 :], cos[:, None], sin[:, None]
            want = np.concatenate([y1 * c - y2 * s, y2 * c + y1 * s], -1)
            np.testing.assert_allclose(ops.to_numpy(out), want, rtol=1e-5, atol=1e-5)


def test_batched_gemm_keeps_every_tile_bits() -> None:
    """Tiles batched into one cuBLAS call (up to the weight's probed `batch`) give the bits
    of one call per tile, at every row count, on shapes where cuBLAS's batched kernel is
    and is not the single one (K = 3072: it is not past a few tiles on the H200). Planted:
    every weight batched at BATCH_TILES without the probe, red."""
    from engine.ops.cupy_ops import BATCH_TILES, CupyOps, CupyWeight
    from engine.ops.cupy_options import CupyOptions

    ops = CupyOps(CupyOptions(gemm="cublas"))  # the batched calls are cuBLAS's
    rng = np.random.default_rng(11)
    for n, k in ((1024, 3072), (4096, 1024), (64, 192)):
        w = ops.prepare_linear(rng.standard_normal((n, k)).astype(np.float32) / np.sqrt(k))
        assert 1 <= w.batch <= BATCH_TILES
        single = CupyWeight(w.data, w.k, w.n, batch=1)
        for rows in (16, 40, 128, 264, 512):
            x = ops.asarray(rng.standard_normal((rows, k)).astype(np.float32))
            got, want = ops.to_numpy(ops.linear(x, w)), ops.to_numpy(ops.linear(x, single))
            assert got.tobytes() == want.tobytes(), (n, k, rows, w.batch)


def test_attention_head_dims_match_numpy(ops) -> None:  # type: ignore[no-untyped-def]
    """Each compiled head dim (attend_<kind>_<D>) against numpy, over several key chunks."""
    from engine.ops.numpy_ops import NumpyOps

    rng = np.random.default_rng(5)
    for d in (32, 128, 256):
        q = rng.standard_normal((4, 4, d)).astype(np.float32)
        k, v = rng.standard_normal((2, 5 * d + 3, 2, d)).astype(np.float32)
        pos = np.array([0, d - 1, 3 * d + 1, 5 * d + 2])
        got = ops.to_numpy(ops.attention(ops.asarray(q), ops.asarray(k), ops.asarray(v), pos))
        want = NumpyOps().attention(q, k, v, pos)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("kind", ["f32", "bf16", "fp8"])
def test_attention_split_into_group_blocks_keeps_the_bits(ops, monkeypatch, kind) -> None:  # type: ignore[no-untyped-def]
    """A launch of few (row, head) pairs runs one block per key group (of one q head, or of
    the 2 or 4 of a KV head) and a merge: bit for bit the one-block-per-(row, head) kernel's
    output, on paged codes, over 1-4 key chunks."""
    import cupy as cp

    rng = np.random.default_rng(11)
    for d, n, hq in ((64, 1, 4), (128, 3, 4), (128, 8, 4), (256, 2, 4), (32, 4, 8), (64, 3, 8),
                     (128, 5, 8)):  # fmt: skip
        pages, page_rows, hkv = 40, 16, 2  # hq 8: blocks of 4 q heads where they group
        shape = (pages * page_rows, hkv, d)
        ke = ve = None
        if kind == "f32":
            kc, vc = (cp.asarray(rng.standard_normal(shape).astype(np.float32)) for _ in "kv")
        elif kind == "bf16":  # finite bf16 bits: sign, exponent 120..134, any mantissa
            kc, vc = (
                cp.asarray(
                    (
                        (rng.integers(0, 2, shape) << 15)
                        | (rng.integers(120, 135, shape) << 7)
                        | rng.integers(0, 128, shape)
                    ).astype(np.uint16)
                )
                for _ in "kv"
            )
        else:  # e4m3 codes (no NaN: exponent field < 15) and a power-of-two exponent per row
            kc, vc = (
                cp.asarray(
                    (
                        (rng.integers(0, 2, shape) << 7)
                        | (rng.integers(0, 15, shape) << 3)
                        | rng.integers(0, 8, shape)
                    ).astype(np.uint8)
                )
                for _ in "kv"
            )
            ke, ve = (cp.asarray(rng.integers(-3, 4, shape[:2]).astype(np.int8)) for _ in "kv")
        ptab = cp.asarray(rng.permutation(pages).astype(np.int32))  # every row: the same stream
        last = rng.integers(0, min(4 * d, pages * page_rows), n).astype(np.int32)
        last[0] = min(4 * d, pages * page_rows) - 1
        meta = (ptab, cp.zeros(n, dtype=cp.int32), cp.asarray(last), page_rows)
        q = cp.asarray(rng.standard_normal((n, hq, d)).astype(np.float32))
        got = {}
        # one block per pair, then split blocks of one q head and of the two of a KV head
        for split, heads_from in ((0, 0), (10**6, 10**6), (10**6, 1)):
            opts = dataclasses.replace(
                ops.options, attend_split=split, attend_heads_from=heads_from
            )
            monkeypatch.setattr(ops, "options", opts)
            out = ops.attend(kind, q, kc, vc, ke, ve, meta)
            twin = ops._bf16[1]  # the bf16 bits attention wrote for the o projection
            got[split, heads_from] = (ops.to_numpy(out).tobytes(), ops.to_numpy(twin).tobytes())
        assert got[0, 0] == got[10**6, 10**6] == got[10**6, 1], (d, n)
