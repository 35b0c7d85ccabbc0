"""Lanes that attend in one batch give each lane the bits it gets alone: lanes with gaps
between them, other row counts and lengths, rows at key-block edges."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


@pytest.mark.parametrize(
    "asks",
    [
        [(0, 1, 1), (1, 1, 64), (2, 1, 65), (3, 1, 300)],  # one row each, block edges
        [(0, 3, 17), (2, 1, 130), (3, 5, 64)],  # a gap at lane 1, drafts of other lengths
        [(5, 2, 40), (4, 1, 200)],  # lanes out of order
        [(0, 1, 10), (7, 1, 10)],  # too far apart for one batch: one at a time
    ],
)
def test_attend_many_equals_attend_alone(model: Any, asks: list[tuple[int, int, int]]) -> None:
    ops, cfg = model.ops, model.config
    hkv, hq, d = cfg.num_kv_heads, cfg.num_heads, cfg.head_dim
    lanes = ops.new_lanes(1, 8, 320, hkv, d)
    if not hasattr(lanes, "attend_many"):
        pytest.skip(f"{ops.name}: no batched lane attention")
    rng = np.random.default_rng(3)
    for lane in range(8):  # every lane full of rows, also past what is asked
        k = rng.standard_normal((320, hkv, d)).astype(np.float32)
        lanes.put(0, lane, 0, k, k[::-1].copy())
    items = []
    for lane, n, length in asks:
        q = ops.asarray(rng.standard_normal((n, hq, d)).astype(np.float32))
        items.append((lane, q, np.arange(length - n, length), length))
    together = lanes.attend_many(0, items)
    for item, got in zip(items, together, strict=True):
        alone = ops.to_numpy(lanes.attend(0, *item))
        assert ops.to_numpy(got).tobytes() == alone.tobytes(), f"lane {item[0]}"
