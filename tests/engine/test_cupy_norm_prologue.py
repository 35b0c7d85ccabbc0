"""The gate/up GEMM with the residual add and RMS norm before it in one launch
(cupy_fused_linear.add_norm_silu, marked `gpu`) against add_rms_norm then linear_silu, bit
for bit; then whole forwards with it and without."""

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


@pytest.mark.parametrize(
    "k,inter", [(64, 8), (128, 40), (384, 200), (1024, 3072), (2048, 64), (4096, 24)]
)
def test_add_norm_silu_equals_add_rms_norm_then_linear_silu(ops, monkeypatch, k, inter) -> None:  # type: ignore[no-untyped-def]
    """s, the SiLU-mul rows and their bf16 twin at 1-8 rows, K of 1 to 8 slices and norm
    blocks of 64 and 256 threads (K 4096: past 48 KB of shared memory), rows at two scales;
    9 rows and the option off: None."""
    rng = np.random.default_rng(k + inter)
    w = ops.prepare_linear(rng.standard_normal((2 * inter, k)).astype(np.float32) / np.sqrt(k))
    norm = ops.asarray(rng.standard_normal(k).astype(np.float32))
    on = dataclasses.replace(ops.options, norm_prologue=8)
    monkeypatch.setattr(ops, "options", on)
    for m in (1, 2, 3, 5, 8):
        for scale in (1.0, 30.0):
            a, b = (
                ops.asarray(scale * rng.standard_normal((m, k)).astype(np.float32)) for _ in "ab"
            )
            s, h = ops.add_rms_norm(a, b, norm, 1e-6)
            want = ops.linear_silu(h, w, inter)
            want_twin = ops._twin_of(want)[:m].tobytes()
            got = ops.add_norm_silu(a, b, norm, 1e-6, w, inter)
            assert got is not None, (k, m)
            assert got[0].tobytes() == s.tobytes(), (k, inter, m)
            assert got[1].tobytes() == want.tobytes(), (k, inter, m, scale)
            assert ops._twin_of(got[1])[:m].tobytes() == want_twin, (k, inter, m)
    nine = ops.asarray(rng.standard_normal((9, k)).astype(np.float32))
    assert ops.add_norm_silu(nine, nine, norm, 1e-6, w, inter) is None
    monkeypatch.setattr(ops, "options", dataclasses.replace(on, norm_prologue=0))
    assert ops.add_norm_silu(nine[:1], nine[:1], norm, 1e-6, w, inter) is None


@pytest.mark.parametrize("graphs", [False, True])
@pytest.mark.parametrize("spec", ["synthetic:tiny@5", "tiny-qwen3"])
def test_forward_with_the_norm_prologue_equals_without(tmp_path, monkeypatch, spec, graphs) -> None:  # type: ignore[no-untyped-def]
    """Forwards (a 20-row prompt, then steps of 1, 3 and 8 rows; eager, or through graphs)
    give the same logits, hidden rows and KV bytes with the prologue as without, and every
    layer of a step of at most 8 rows took it."""
    from engine.model.loader import load_model
    from engine.ops import cupy_fused_linear
    from tests.conformance.conftest import TINY

    monkeypatch.setenv("ENGINE_SYNTHETIC_DIR", str(tmp_path))
    path = str(TINY) if spec == "tiny-qwen3" else spec
    models = [load_model(path, "cupy") for _ in "ab"]  # graphs are cached per model
    for model in models:
        model.ops.graphs = graphs
    fused = models[1]
    fused.ops.options = dataclasses.replace(fused.ops.options, norm_prologue=8)
    taken = count_taken(monkeypatch, cupy_fused_linear, "add_norm_silu")
    kvs = [m.new_kv(40, 16, "bf16", lanes=8, lane_rows=64) for m in models]
    rng = np.random.default_rng(11)
    lanes = [[4 * i + j for j in range(4)] for i in range(8)]
    steps, starts = prompt_then_steps(rng, lanes, 20)
    layers = fused.config.num_layers
    ran = False  # through graphs the prologue runs at each shape's capture, not each replay
    for segs in steps:
        rows = sum(len(s.tokens) for s in segs)
        taken.clear()
        want = models[0].forward(segs, kvs[0])
        assert not any(taken)
        got = fused.forward(segs, kvs[1])
        ran = ran or any(taken)
        if rows <= 8 and not graphs:
            assert taken == [True] * layers, rows
        for a, b in zip(want, got, strict=True):
            assert a.logits.tobytes() == b.logits.tobytes()
            assert a.hidden.tobytes() == b.hidden.tobytes()
    assert ran, "no step took the prologue"
    assert_same_kv(kvs, layers, lanes, starts)
