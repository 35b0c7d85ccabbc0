"""The mlx backend is batch-invariant: bit equality (np.array_equal), never closeness.

Each op: a row alone vs the same row inside batches of many sizes, at several positions,
with random neighbours. Attention: queries alone vs in segments, at many positions, over
key lengths that straddle the key block, and prompts cut into different step sizes.
End to end (1..8 lanes == served serially): tests/engine/test_mlx_engine.py.
"""

from __future__ import annotations

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")

from engine.errors import EngineFailure  # noqa: E402
from engine.ops.mlx_ops import MlxOps  # noqa: E402
from tests.engine.randmodel import random_config  # noqa: E402

BATCHES = (1, 2, 3, 5, 8, 16, 17, 32, 33)


@pytest.fixture(scope="module")
def ops() -> MlxOps:
    return MlxOps()


def rand(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def placements(m: int) -> list[int]:
    return sorted({0, m // 2, m - 1})


def assert_row_invariant(ops: MlxOps, fn, row_shape: tuple[int, ...], seed: int) -> None:
    """fn(list of numpy inputs [m, *row_shape]) -> mx array [m, ...]; row r must not care."""
    rng = np.random.default_rng(seed)
    n_inputs = fn.__code__.co_argcount
    rows = [rand(rng, *row_shape, scale=2.0) for _ in range(n_inputs)]
    alone = ops.to_numpy(fn(*[ops.asarray(r[None]) for r in rows]))[0]
    for m in BATCHES:
        for pos in placements(m):
            batch = [rand(rng, m, *row_shape, scale=2.0) for _ in range(n_inputs)]
            for b, r in zip(batch, rows, strict=True):
                b[pos] = r
            got = ops.to_numpy(fn(*[ops.asarray(b) for b in batch]))
            assert np.array_equal(got[pos], alone), f"row {pos} of {m} differs"


# ---- linear ---------------------------------------------------------------------------
# (in, out): the random test model's, tiny-qwen3's (qkv, o, gate_up, down, lm_head), odd ones
@pytest.mark.parametrize(
    "k,n",
    [
        (64, 256),
        (64, 320),
        (128, 512),
        (256, 128),
        (128, 768),
        (384, 128),
        (128, 1088),
        (96, 33),
        (7, 5),
        (8, 3000),  # wider than the probe's column cap
    ],
)
def test_linear_row_invariant(ops: MlxOps, k: int, n: int) -> None:
    rng = np.random.default_rng(k * 31 + n)
    w = ops.prepare_linear(rand(rng, n, k, scale=0.2))  # HF layout [out, in]
    assert_row_invariant(ops, lambda x: ops.linear(x, w), (k,), seed=n)


def test_linear_matches_hf_layout(ops: MlxOps) -> None:
    rng = np.random.default_rng(0)
    w, x = rand(rng, 48, 40), rand(rng, 6, 40)
    got = ops.to_numpy(ops.linear(ops.asarray(x), ops.prepare_linear(w)))
    np.testing.assert_allclose(
        got, x.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-5, atol=1e-5
    )


def test_linear_row_tiles_row_invariant() -> None:
    tiled = MlxOps(row_tile=8)
    rng = np.random.default_rng(3)
    w = tiled.prepare_linear(rand(rng, 80, 64))
    assert_row_invariant(tiled, lambda x: tiled.linear(x, w), (64,), seed=4)


def test_probe_refuses_a_row_dependent_matmul(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = MlxOps()

    def m_dependent(x, w):  # bits change with the row count, like a blocked BLAS could
        return (x @ w) * (1.0 + 1e-6 * x.shape[0])

    monkeypatch.setattr(bad, "_matmul_rows", m_dependent)
    with pytest.raises(EngineFailure, match="row-invariant"):
        bad.prepare_linear(np.ones((8, 16), dtype=np.float32))


# ---- row ops --------------------------------------------------------------------------
@pytest.mark.parametrize("width", [32, 64, 128, 384])
def test_rms_norm_row_invariant(ops: MlxOps, width: int) -> None:
    w = ops.asarray(1.0 + 0.1 * rand(np.random.default_rng(width), width))
    assert_row_invariant(ops, lambda x: ops.rms_norm(x, w, 1e-6), (width,), seed=width)


def test_rms_norm_per_head_on_strided_slices(ops: MlxOps) -> None:
    """As the model calls it: q/k heads sliced out of the qkv rows (a strided view)."""
    hq, hkv, d = 4, 2, 32
    w = ops.asarray(1.0 + 0.1 * rand(np.random.default_rng(1), d))

    def heads(qkv: mx.array) -> mx.array:
        n = qkv.shape[0]
        k = qkv[:, hq * d : (hq + hkv) * d].reshape(n, hkv, d)
        return ops.rms_norm(k, w, 1e-6)

    assert_row_invariant(ops, heads, ((hq + 2 * hkv) * d,), seed=2)


def test_rope_row_invariant_at_any_position(ops: MlxOps) -> None:
    cfg = random_config(head_dim=32)
    from engine.model.qwen3 import rope_tables

    cos, sin = rope_tables(cfg)
    rng = np.random.default_rng(5)
    x = rand(rng, 4, 32)
    for p in (0, 1, 63, 64, 65, 1000):
        alone = ops.to_numpy(ops.rope(ops.asarray(x[None]), cos[[p]], sin[[p]]))[0]
        for m in BATCHES:
            for pos in placements(m):
                xs = rand(rng, m, 4, 32)
                xs[pos] = x
                positions = rng.integers(0, 2000, m)
                positions[pos] = p
                got = ops.rope(ops.asarray(xs), ops.asarray(cos[positions]), sin[positions])
                assert np.array_equal(ops.to_numpy(got)[pos], alone)


def test_rope_matches_rotate_half(ops: MlxOps) -> None:
    rng = np.random.default_rng(6)
    x, ang = rand(rng, 3, 2, 8), rand(rng, 3, 4)
    cos, sin = np.cos(ang), np.sin(ang)
    c, s = np.concatenate([cos, cos], -1)[:, None], np.concatenate([sin, sin], -1)[:, None]
    rot = np.concatenate([-x[..., 4:], x[..., :4]], -1)
    np.testing.assert_allclose(
        ops.to_numpy(ops.rope(ops.asarray(x), cos, sin)), x * c + rot * s, rtol=1e-6, atol=1e-6
    )


@pytest.mark.parametrize("width", [5, 96, 384])
def test_silu_mul_row_invariant(ops: MlxOps, width: int) -> None:
    assert_row_invariant(ops, lambda g, u: ops.silu_mul(g, u), (width,), seed=width)


def test_add_concat_take_embed_row_invariant(ops: MlxOps) -> None:
    assert_row_invariant(ops, lambda a, b: ops.add(a, b), (64,), seed=7)
    rng = np.random.default_rng(8)
    table = ops.asarray(rand(rng, 50, 16))
    alone = ops.to_numpy(ops.embed(table, np.asarray([7])))[0]
    for m in BATCHES:
        ids = rng.integers(0, 50, m)
        ids[m // 2] = 7
        assert np.array_equal(ops.to_numpy(ops.embed(table, ids))[m // 2], alone)
        x = ops.asarray(rand(rng, m, 16))
        both = ops.to_numpy(ops.concat_rows([x, table]))
        assert np.array_equal(both[m + 7], ops.to_numpy(table)[7])
        took = ops.to_numpy(ops.take_rows(x, np.asarray([m - 1, 0])))
        assert np.array_equal(took, ops.to_numpy(x)[[m - 1, 0]])


def test_lazy_inputs_give_the_same_bits(ops: MlxOps) -> None:
    """Ops fed unevaluated graphs (a lazy add, a slice) give the bits of evaluated inputs,
    alone or in a batch: nothing fuses across an op boundary."""
    rng = np.random.default_rng(9)
    a, b, u = rand(rng, 17, 96), rand(rng, 17, 96), rand(rng, 17, 96)
    w = ops.asarray(1.0 + 0.1 * rand(rng, 96))
    eager = ops.add(ops.asarray(a), ops.asarray(b))
    lazy = mx.array(a) + mx.array(b)  # not evaluated
    for fn in (
        lambda x, uu: ops.rms_norm(x, w, 1e-6),
        lambda x, uu: ops.silu_mul(x, ops.asarray(uu)),
        lambda x, uu: ops.silu_mul(x * 1.0, mx.array(uu)),
    ):
        ref = ops.to_numpy(fn(eager, u))
        assert np.array_equal(ops.to_numpy(fn(lazy, u)), ref)
        for r in (0, 8, 16):
            row = (mx.array(a) + mx.array(b))[r : r + 1]
            assert np.array_equal(ops.to_numpy(fn(row, u[r : r + 1]))[0], ref[r])


# ---- attention ------------------------------------------------------------------------
def reference_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_pos) -> np.ndarray:
    n, hq, d = q.shape
    group = hq // k.shape[1]
    out = np.zeros((n, hq, d))
    for i in range(n):
        for h in range(hq):
            kk, vv = k[: q_pos[i] + 1, h // group], v[: q_pos[i] + 1, h // group]
            s = kk.astype(np.float64) @ q[i, h] / np.sqrt(d)
            p = np.exp(s - s.max())
            out[i, h] = p @ vv / p.sum()
    return out


@pytest.mark.parametrize("hq,hkv,d", [(4, 2, 32), (2, 2, 16), (8, 2, 8), (4, 1, 64)])
def test_attention_matches_reference(ops: MlxOps, hq: int, hkv: int, d: int) -> None:
    rng = np.random.default_rng(hq * 10 + d)
    length = 150
    k, v = rand(rng, length, hkv, d), rand(rng, length, hkv, d)
    q_pos = np.asarray([0, 1, 63, 64, 65, 100, 149])
    q = rand(rng, len(q_pos), hq, d)
    got = ops.to_numpy(ops.attention(ops.asarray(q), k, v, q_pos))
    np.testing.assert_allclose(got, reference_attention(q, k, v, q_pos), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("hq,hkv", [(4, 2), (2, 2), (8, 2)])
def test_attention_query_invariant(ops: MlxOps, hq: int, hkv: int) -> None:
    """One query at absolute position p: alone over exactly p+1 keys, or among other
    queries over longer key sets (the extra keys lie past p), for key lengths straddling
    the key block."""
    d, b = 32, ops.key_block
    rng = np.random.default_rng(hq)
    kmax = 3 * b + 9
    k, v = rand(rng, kmax, hkv, d), rand(rng, kmax, hkv, d)
    for p in (0, 5, b - 2, b - 1, b, b + 1, 2 * b - 1, 2 * b, 2 * b + 3):
        q = rand(rng, hq, d)
        alone = ops.to_numpy(ops.attention(ops.asarray(q[None]), k[: p + 1], v[: p + 1], [p]))
        for length in sorted({p + 1, p + 2, b - 1, b, b + 1, 2 * b, 2 * b + 1, kmax}):
            if length <= p:
                continue
            for m in (1, 2, 5, 17, 33):
                qs = rand(rng, m, hq, d)
                pos = rng.integers(0, length, m)
                at = int(rng.integers(0, m))
                qs[at], pos[at] = q, p
                got = ops.attention(ops.asarray(qs), k[:length], v[:length], pos)
                assert np.array_equal(ops.to_numpy(got)[at], alone[0]), (p, length, m, at)


@pytest.mark.parametrize("steps", [(1,), (3,), (7, 1), (64,), (65,), (200,), (13, 64, 1)])
def test_attention_prompt_cut_into_steps(ops: MlxOps, steps: tuple[int, ...]) -> None:
    """A prompt fed in steps of different sizes (each step attends over the keys written
    so far) gives the bits of the whole prompt in one call."""
    hq, hkv, d, length = 4, 2, 32, 150
    rng = np.random.default_rng(11)
    q, k, v = rand(rng, length, hq, d), rand(rng, length, hkv, d), rand(rng, length, hkv, d)
    whole = ops.to_numpy(ops.attention(ops.asarray(q), k, v, np.arange(length)))
    parts, start, i = [], 0, 0
    while start < length:
        n = min(steps[i % len(steps)], length - start)
        end = start + n
        parts.append(
            ops.to_numpy(
                ops.attention(ops.asarray(q[start:end]), k[:end], v[:end], np.arange(start, end))
            )
        )
        start, i = end, i + 1
    assert np.array_equal(np.concatenate(parts), whole)


def test_attention_many_equals_attention_alone(ops: MlxOps) -> None:
    rng = np.random.default_rng(12)
    items = []
    for n, length in ((1, 1), (3, 70), (1, 64), (17, 130), (2, 65)):
        k, v = rand(rng, length, 2, 32), rand(rng, length, 2, 32)
        items.append((ops.asarray(rand(rng, n, 4, 32)), k, v, np.arange(length - n, length)))
    alone = [ops.to_numpy(ops.attention(*item)) for item in items]
    for got, want in zip(ops.attention_many(items), alone, strict=True):
        assert np.array_equal(ops.to_numpy(got), want)


def test_attention_key_block_sizes() -> None:
    for b in (1, 16, 100):
        o = MlxOps(key_block=b)
        rng = np.random.default_rng(b)
        k, v, q = rand(rng, 130, 2, 16), rand(rng, 130, 2, 16), rand(rng, 1, 4, 16)
        alone = o.to_numpy(o.attention(o.asarray(q), k[:101], v[:101], [100]))
        for length in (101, 102, 129, 130):
            qs = rand(rng, 9, 4, 16)
            qs[4] = q[0]
            pos = rng.integers(0, length, 9)
            pos[4] = 100
            got = o.to_numpy(o.attention(o.asarray(qs), k[:length], v[:length], pos))
            assert np.array_equal(got[4], alone[0])
