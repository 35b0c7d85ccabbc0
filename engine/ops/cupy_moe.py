"""The sparse MLP on the GPU with no host round trip, so it runs inside the decode graphs
(kernels in cupy_moe.cu; docs/moe.md, "On cupy").

* router logits: the backend's fixed-tile `linear` (row-invariant, probed at load);
* routing: `moe_route`, one thread per row (float32 softmax, top-k ties to the lower id,
  optional renormalisation), ids and weights stay on the device;
* experts at a fixed shape: for each (row, rank) pair, `moe_gate_up` reads its expert's
  rows of the stacked gate|up weights [E, 2I, H] by the id in device memory (one warp per
  output, fixed reduction order) and applies SiLU·up; `moe_down` does the down projection of
  a row's k pairs and sums w_r · y_r in rank order. No grouping by expert, no atomics: a row's
  bits are those it gets alone, whatever the other rows chose.

`expert_gemv` is the same dot product for one expert's weight (the backend's `expert_linear`),
so the per-row reference of tests/engine/test_moe_block.py can rebuild a row's bits by rank.
"""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np

WARPS = 8  # MOE_WARPS in cupy_moe.cu
MAX_K = 32  # MOE_MAX_K
KERNELS = ("expert_gemv", "moe_route", "moe_gate_up", "moe_down")


def fits(k: int, n: int) -> bool:
    """Whether warp_dot takes a reduction of length k (chunks of 8, 16-byte aligned rows)."""
    return k > 0 and k % 8 == 0 and n > 0


def gemv(ops: Any, x: Any, w: Any) -> Any:
    """y [M, N] = x [M, K] @ w^T for one bf16 weight, a warp per output, per row."""
    x = cp.ascontiguousarray(x, dtype=cp.float32)
    m = x.shape[0]
    y = cp.empty((m, w.n), dtype=cp.float32)
    if m:
        grid = (m, -(-w.n // WARPS))
        ops.k["expert_gemv"](grid, (32 * WARPS,), (x, w.data, y, np.int32(w.n), np.int32(w.k)))
    return y


def stacks(moe: Any) -> tuple[Any, Any]:
    """gate|up [E, 2I, H] and down [E, H, I] bf16 bits on the device, stacked once; the
    experts' own weights become views of the stacks (no second copy)."""
    got = moe.__dict__.get("_cupy_stacks")
    if got is None:
        gu = cp.stack([w.data for w in moe.gate_up])
        down = cp.stack([w.data for w in moe.down])
        for e, (a, b) in enumerate(zip(moe.gate_up, moe.down, strict=True)):
            a.data, b.data = gu[e], down[e]
        got = moe.__dict__["_cupy_stacks"] = (gu, down)
    return got


def route(ops: Any, logits: Any, k: int, norm: bool) -> tuple[Any, Any]:
    """Device ids [M, k] (int32) and weights [M, k] (float32) of router logits [M, E]."""
    logits = cp.ascontiguousarray(logits, dtype=cp.float32)
    m, e = logits.shape
    ids = cp.empty((m, k), dtype=cp.int32)
    wts = cp.empty((m, k), dtype=cp.float32)
    if m:
        args = (logits, np.int32(m), np.int32(e), np.int32(k), np.int32(norm), ids, wts)
        ops.k["moe_route"]((-(-m // 64),), (64,), args)
    return ids, wts


def usable(moe: Any) -> bool:
    h = moe.down[0].n if moe.down else 0
    return bool(moe.gate_up) and moe.top_k <= MAX_K and fits(h, 1) and fits(moe.inter, 1)


def moe_ffn(ops: Any, x: Any, moe: Any) -> Any:
    """The sparse MLP of normed rows x [M, H], all on the device."""
    m, h = x.shape
    if not m:
        return x
    gu, down = stacks(moe)
    k, inter = moe.top_k, moe.inter
    ids, wts = route(ops, ops.linear(x, moe.router), k, moe.norm_topk_prob)
    x = cp.ascontiguousarray(x, dtype=cp.float32)
    hid = cp.empty((m * k, inter), dtype=cp.float32)
    sizes = (np.int32(k), np.int32(h), np.int32(inter))
    ops.k["moe_gate_up"]((m * k, -(-inter // WARPS)), (32 * WARPS,), (x, ids, gu, hid, *sizes))
    y = cp.empty((m, h), dtype=cp.float32)
    ops.k["moe_down"]((m, -(-h // WARPS)), (32 * WARPS,), (hid, ids, wts, down, y, *sizes))
    return y
