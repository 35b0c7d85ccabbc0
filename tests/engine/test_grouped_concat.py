"""grouped_concat (engine/ops/grouped_concat.py): one concatenation's values in their places,
made of calls of at most GROUP arrays (cupy's concatenation of more is not graph-safe)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.ops.grouped_concat import grouped_concat

CUPY_SAFE = 8  # cupy.concatenate copies array by array up to 8 arrays (a pointer table past)


@pytest.mark.parametrize("axis", [0, 1])
def test_grouped_concat_equals_one_concat_in_small_calls(axis: int) -> None:
    rng = np.random.default_rng(3)
    for count in (1, 2, 7, 8, 9, 17, 64, 65, 70):
        shapes = [(int(rng.integers(1, 4)), 5) if axis == 0 else (5, int(rng.integers(1, 4)))
                  for _ in range(count)]  # fmt: skip
        parts = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        calls: list[int] = []

        def concat(arrays, axis: int, calls: list[int] = calls):  # type: ignore[no-untyped-def]
            calls.append(len(arrays))
            return np.concatenate(arrays, axis=axis)

        got = grouped_concat(parts, axis, concat)
        want = np.concatenate(parts, axis=axis)
        assert got.tobytes() == want.tobytes() and got.shape == want.shape, count
        assert all(2 <= c <= CUPY_SAFE for c in calls), (count, calls)
        assert (count == 1) == (not calls)
