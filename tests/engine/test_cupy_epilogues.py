"""The mma GEMM with SiLU-mul in one launch (engine/ops/cupy_fused_linear.py, marked `gpu`)
against linear then silu_mul, bit for bit; then whole forwards with it and without."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.engine.cupy_setup import GPU_ONLY, assert_same_kv, count_taken, prompt_then_steps

pytestmark = GPU_ONLY


@pytest.fixture(scope="module")
def ops():  # type: ignore[no-untyped-def]
    from engine.ops.cupy_ops import CupyOps

    return CupyOps(probe=False)


def _weight(ops, rng, n: int, k: int):  # type: ignore[no-untyped-def]
    return ops.prepare_linear(rng.standard_normal((n, k)).astype(np.float32) / np.sqrt(k))


def _rows(ops, rng, m: int, k: int, scale: float = 1.0):  # type: ignore[no-untyped-def]
    return ops.asarray(scale * rng.standard_normal((m, k)).astype(np.float32))


def _twin(ops, y) -> bytes:  # type: ignore[no-untyped-def]
    twin = ops._twin_of(y)
    assert twin is not None, "no bf16 twin was written"
    return twin[: y.shape[0]].tobytes()


@pytest.mark.parametrize("k,inter", [(64, 8), (128, 40), (1024, 3072), (384, 200)])
def test_linear_silu_equals_linear_then_silu_mul(ops, k: int, inter: int) -> None:  # type: ignore[no-untyped-def]
    """silu and its bf16 twin at 1-130 rows (every tile count of the kernel), outputs past a
    block's 8 (inter 40, 200) and K of 1, 2, 6 and 8 slices."""
    rng = np.random.default_rng(k + inter)
    w = _weight(ops, rng, 2 * inter, k)
    for m in (1, 3, 8, 9, 17, 33, 64, 130):
        x = _rows(ops, rng, m, k, 3.0)
        gu = ops.linear(x, w)
        want = ops.silu_mul(gu[:, :inter], gu[:, inter:])
        want_twin = _twin(ops, want)
        got = ops.linear_silu(x, w, inter)
        assert got is not None
        assert got.tobytes() == want.tobytes(), (k, inter, m)
        assert _twin(ops, got) == want_twin, (k, inter, m)


@pytest.mark.parametrize("spec", ["synthetic:tiny@5", "tiny-qwen3"])
def test_forward_with_epilogues_equals_without(tmp_path, monkeypatch, spec) -> None:  # type: ignore[no-untyped-def]
    """Eager forwards (a 20-row prompt, then steps of 1, 3 and 8 rows) give the same logits,
    hidden rows and KV bytes with the fused gate/up as without, and every layer took it."""
    from engine.model.loader import load_model
    from engine.ops import cupy_fused_linear
    from tests.conformance.conftest import TINY

    monkeypatch.setenv("ENGINE_SYNTHETIC_DIR", str(tmp_path))
    model = load_model(str(TINY) if spec == "tiny-qwen3" else spec, "cupy")
    model.ops.graphs = False
    fused = model.ops.options
    plain = dataclasses.replace(fused, silu_epilogue=0)
    taken = count_taken(monkeypatch, cupy_fused_linear, "linear_silu")
    kvs = [model.new_kv(40, 16, "bf16", lanes=8, lane_rows=64) for _ in range(2)]
    rng = np.random.default_rng(11)
    lanes = [[4 * i + j for j in range(4)] for i in range(8)]
    steps, starts = prompt_then_steps(rng, lanes, 20)
    layers = model.config.num_layers
    for segs in steps:
        model.ops.options = plain
        taken.clear()
        want = model.forward(segs, kvs[0])
        assert not any(taken)
        model.ops.options = fused
        taken.clear()
        got = model.forward(segs, kvs[1])
        assert taken == [True] * layers
        for a, b in zip(want, got, strict=True):
            assert a.logits.tobytes() == b.logits.tobytes()
            assert a.hidden.tobytes() == b.hidden.tobytes()
    assert_same_kv(kvs, layers, lanes, starts)
