"""The wide mma GEMM (engine/ops/cupy_mma_wide.cu, marked `gpu`): the same bits as the mma GEMM
of 8-row tiles at every shape and row count, plain and with SiLU-mul, and whole forwards
with it on every GEMM equal to forwards with it on none."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from tests.engine.cupy_setup import GPU_ONLY, assert_same_kv, prompt_then_steps

pytestmark = GPU_ONLY

# (k, n): K of 1, 3, 8 slices and 9 chunks on 8 slices (slice 0 takes two), N past a block's
# 64 outputs and under one block, the 0.6B shape's projections
SHAPES = [(64, 8), (192, 100), (576, 72), (1024, 4096), (2048, 1024), (3072, 1024), (384, 200)]
ROWS = (1, 7, 64, 65, 127, 128, 200, 513)


@pytest.fixture(scope="module")
def ops():  # type: ignore[no-untyped-def]
    from engine.ops.cupy_ops import CupyOps

    return CupyOps(probe=False)


def _with(ops, **kw):  # type: ignore[no-untyped-def]
    return dataclasses.replace(ops.options, **kw)


def _weight(ops, rng, n: int, k: int):  # type: ignore[no-untyped-def]
    return ops.prepare_linear(rng.standard_normal((n, k)).astype(np.float32) / np.sqrt(k))


def _rows(ops, rng, m: int, k: int, scale: float = 1.0):  # type: ignore[no-untyped-def]
    return ops.asarray(scale * rng.standard_normal((m, k)).astype(np.float32))


def _same_gemm(ops, seed: int, k: int, n: int, want_kw: dict, got_kw: dict, tiles: bool) -> None:  # type: ignore[no-untyped-def]
    """At every row count of ROWS: the mma GEMM under options want_kw (of 8-row tiles where
    `tiles`) and under got_kw, the same bytes."""
    from engine.ops import cupy_gemm

    rng = np.random.default_rng(seed)
    w = _weight(ops, rng, n, k)
    keep = ops.options
    try:
        for m in ROWS:
            xb, rows = ops.bf16_rows(_rows(ops, rng, m, k, 3.0), w)
            ops.options = _with(ops, **want_kw)
            want = cupy_gemm.mma(ops, xb, rows, w, tiles=cupy_gemm.mma_tiles(m) if tiles else 0)
            ops.options = _with(ops, **got_kw)
            got = cupy_gemm.mma(ops, xb, rows, w)
            assert got.shape == want.shape == (m, n)
            assert got.tobytes() == want.tobytes(), (k, n, m)
    finally:
        ops.options = keep


@pytest.mark.parametrize("k,n", SHAPES)
def test_wide_gemm_equals_mma_tiles(ops, k: int, n: int) -> None:  # type: ignore[no-untyped-def]
    _same_gemm(ops, k * 31 + n, k, n, {"wide_from": 0}, {"wide_from": 1}, tiles=True)


@pytest.mark.parametrize("k,n", SHAPES)
def test_wide_deep_equals_wide(ops, monkeypatch, k: int, n: int) -> None:  # type: ignore[no-untyped-def]
    """Eight chunks in flight (mma_wide_gemm_deep) against three, at every shape and row
    count: the device's SM count raised so every launch takes the deep kernel."""
    from engine.ops import cupy_gemm

    monkeypatch.setattr(cupy_gemm, "sm_count", lambda: 1 << 20)
    deep = {"wide_from": 1, "wide_deep": 1}
    probe = SimpleNamespace(options=_with(ops, **deep), shared_limit=ops.shared_limit)
    assert cupy_gemm.wide_kernel(probe, 1)[0] == "mma_wide_gemm_deep"
    _same_gemm(ops, k * 17 + n, k, n, {"wide_from": 1, "wide_deep": 0}, deep, tiles=False)


@pytest.mark.parametrize("k,inter", [(64, 8), (128, 40), (1024, 3072), (384, 200)])
def test_wide_silu_equals_linear_then_silu_mul(ops, k: int, inter: int) -> None:  # type: ignore[no-untyped-def]
    """silu and its bf16 twin; inter 40 and 200 end inside a block's 32 outputs."""
    rng = np.random.default_rng(k + 7 * inter)
    w = _weight(ops, rng, 2 * inter, k)
    keep = ops.options
    try:
        for m in ROWS:
            x = _rows(ops, rng, m, k, 3.0)
            ops.options = _with(ops, wide_from=0)
            gu = ops.linear(x, w)
            want = ops.silu_mul(gu[:, :inter], gu[:, inter:])
            want_twin = ops._twin_of(want)[:m].tobytes()
            ops.options = _with(ops, wide_from=1)
            got = ops.linear_silu(x, w, inter)
            assert got is not None
            assert got.tobytes() == want.tobytes(), (k, inter, m)
            assert ops._twin_of(got)[:m].tobytes() == want_twin, (k, inter, m)
    finally:
        ops.options = keep


@pytest.mark.parametrize("spec", ["synthetic:tiny@5", "tiny-qwen3"])
def test_forward_wide_equals_narrow(tmp_path, monkeypatch, spec) -> None:  # type: ignore[no-untyped-def]
    """A 200-row prompt step (every row's logits), then steps of 1, 3 and 8 rows: logits,
    hidden rows and KV bytes equal with every GEMM on the wide kernel and with none."""
    from engine.model.loader import load_model
    from engine.ops import cupy_gemm
    from tests.conformance.conftest import TINY

    monkeypatch.setenv("ENGINE_SYNTHETIC_DIR", str(tmp_path))
    model = load_model(str(TINY) if spec == "tiny-qwen3" else spec, "cupy")
    model.ops.graphs = False
    narrow = _with(model.ops, wide_from=0)
    wide = _with(model.ops, wide_from=1, wide_deep=int(spec == "tiny-qwen3"))  # both stagings
    taken: list[bool] = []
    real = cupy_gemm.wide

    def counted(*args, **kw):  # type: ignore[no-untyped-def]
        out = real(*args, **kw)
        taken.append(out)
        return out

    monkeypatch.setattr(cupy_gemm, "wide", counted)
    kvs = [model.new_kv(48, 16, "bf16", lanes=8, lane_rows=64) for _ in range(2)]
    rng = np.random.default_rng(5)
    lanes = [list(range(16))] + [[16 + 4 * i + j for j in range(4)] for i in range(7)]
    steps, starts = prompt_then_steps(rng, lanes, 200)
    for segs in steps:
        model.ops.options = narrow
        taken.clear()
        want = model.forward(segs, kvs[0])
        assert taken and not any(taken)
        model.ops.options = wide
        taken.clear()
        got = model.forward(segs, kvs[1])
        assert taken and all(taken)
        for a, b in zip(want, got, strict=True):
            assert a.logits.tobytes() == b.logits.tobytes()
            assert a.hidden.tobytes() == b.hidden.tobytes()
    assert_same_kv(kvs, model.config.num_layers, lanes, starts)
