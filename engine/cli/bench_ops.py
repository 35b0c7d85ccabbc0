"""The cost of exactness: the backend's fixed-tile linear vs a plain matmul, on the
model's own weight shapes, at several row counts (`python -m engine bench --ops`)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

ROWS = (1, 8, 64, 256)


def _best(fn: Any, repeats: int = 7) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def exactness_cost(model: Any) -> list[dict[str, float]]:
    ops = model.ops
    layer = model.layers[0]
    sparse = layer.moe is not None  # a MoE layer: its expert 0's linears, and the router
    weights = {
        "qkv": layer.qkv,
        "o": layer.o,
        "gate_up": layer.moe.gate_up[0] if sparse else layer.gate_up,
        "down": layer.moe.down[0] if sparse else layer.down,
        "lm_head": model.lm_head,
    }
    if sparse:
        weights["router"] = layer.moe.router
    rng = np.random.default_rng(0)
    out = []
    for rows in ROWS:
        tiled = plain = 0.0
        for w in weights.values():
            x = ops.asarray(rng.standard_normal((rows, w.shape[0])).astype(np.float32))
            tiled += _best(lambda x=x, w=w: ops.to_numpy(ops.linear(x, w)))
            plain += _best(lambda x=x, w=w: np.asarray(x) @ np.asarray(w))
        out.append(
            {"rows": rows, "tiled_ms": tiled * 1e3, "plain_ms": plain * 1e3, "ratio": tiled / plain}
        )
    return out
