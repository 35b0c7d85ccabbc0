"""The marks every cupy test module carries: `gpu`, and skipped where the cupy backend cannot
run here (the reason says why)."""

from __future__ import annotations

import pytest

from engine.ops import cupy_problem

GPU_ONLY = [
    pytest.mark.gpu,
    pytest.mark.skipif(cupy_problem() is not None, reason=f"cupy backend: {cupy_problem()}"),
]


def prompt_then_steps(rng, lanes: list[list[int]], prompt: int) -> tuple[list, list[int]]:  # type: ignore[no-untyped-def]
    """Eager forward steps for the fused-kernel tests: stream 0's prompt of `prompt` rows
    (every row's logits), then steps of one row for 1, 3 and 8 streams; and each stream's
    length after them."""
    import numpy as np

    from engine.model.qwen3 import Segment

    steps = [[Segment(rng.integers(0, 512, prompt), 0, lanes[0], np.arange(prompt), lane=0)]]
    starts = [prompt] + [0] * (len(lanes) - 1)
    for n in (1, 3, 8):
        steps.append(
            [
                Segment(rng.integers(0, 512, 1), starts[i], lanes[i], np.asarray([0]), lane=i)
                for i in range(n)
            ]
        )
        for i in range(n):
            starts[i] += 1
    return steps, starts


def assert_same_kv(kvs, layers: int, lanes: list[list[int]], starts: list[int]) -> None:  # type: ignore[no-untyped-def]
    """The two KV memories hold the same code bytes for every stream and layer."""
    for layer in range(layers):
        for i, pages in enumerate(lanes):
            a = kvs[0].read_codes(layer, pages, starts[i])
            b = kvs[1].read_codes(layer, pages, starts[i])
            assert all(x is None or x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True))


def count_taken(monkeypatch, module, name: str) -> list[bool]:  # type: ignore[no-untyped-def]
    """Wrap module.<name> (a fused op that returns None where it does not apply): the list
    it returns gets, per call, whether the call took the fused path."""
    taken: list[bool] = []
    real = getattr(module, name)

    def counted(*args, **kw):  # type: ignore[no-untyped-def]
        out = real(*args, **kw)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(module, name, counted)
    return taken
