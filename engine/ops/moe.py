"""Mixture-of-experts FFN over any backend's ops, exact by construction (docs/moe.md).

* Routing runs on the host in float32, one row at a time in effect: softmax (max, exp, then
  a left-to-right sum over the experts), top-k by a stable sort of the negated
  probabilities (equal probabilities: the lower expert id first), optional renormalisation
  by a left-to-right sum over the k ranks. No value of a row depends on another row.
* The (row, rank) pairs are grouped by expert; each expert's rows run through the backend's
  own `linear`, which is row-invariant at any row count (numpy: fixed zero-padded row tiles;
  mlx: an M-invariant gemm, probed at load; cupy: a warp per output and row, though cupy's
  moe_ffn takes its own all-device path, engine/ops/cupy_moe.py). So an expert gives a row
  the same bits however many rows it got and whichever they are.
* A row's k outputs are weighted and summed in rank order (rank 0 first), in float32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

Array = Any
F32 = np.float32


@dataclass
class MoeWeights:
    """One sparse MLP on a backend: the router and every expert as prepared linears."""

    router: Array  # hidden -> num_experts logits
    gate_up: list[Array]  # per expert: hidden -> [gate | up] (2 * inter)
    down: list[Array]  # per expert: inter -> hidden
    top_k: int
    norm_topk_prob: bool
    inter: int


def route(logits: np.ndarray, top_k: int, norm: bool) -> tuple[np.ndarray, np.ndarray]:
    """Router logits [M, E] -> expert ids [M, k] (int64) and weights [M, k] (float32)."""
    z = np.ascontiguousarray(logits, dtype=F32)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    total = e[:, 0].copy()
    for j in range(1, e.shape[1]):
        total += e[:, j]
    p = e / total[:, None]
    ids = np.argsort(-p, axis=1, kind="stable")[:, :top_k]
    w = np.take_along_axis(p, ids, axis=1)
    if norm:
        denom = w[:, 0].copy()
        for r in range(1, top_k):
            denom += w[:, r]
        w = w / denom[:, None]
    return ids.astype(np.int64), np.ascontiguousarray(w, dtype=F32)


def expert_groups(ids: np.ndarray) -> tuple[list[tuple[int, np.ndarray]], np.ndarray]:
    """Group the (row, rank) pairs by expert: [(expert, rows)] in expert order (rows
    ascending), and where[M, k]: the index of each pair in the concatenated groups."""
    m, k = ids.shape
    flat = ids.reshape(-1)
    order = np.argsort(flat, kind="stable")
    experts, starts = np.unique(flat[order], return_index=True)
    ends = [*starts[1:], len(flat)]
    groups = [(int(e), order[a:b] // k) for e, a, b in zip(experts, starts, ends, strict=True)]
    where = np.empty(m * k, dtype=np.int64)
    where[order] = np.arange(m * k)
    return groups, where.reshape(m, k)


def moe_ffn(ops: Any, x: Array, moe: MoeWeights) -> Array:
    """The sparse MLP of rows x [M, H] (already normed) through `ops`."""
    if not x.shape[0]:
        return x  # no rows: nothing to route (an empty [0, H])
    ids, w = route(ops.to_numpy(ops.linear(x, moe.router)), moe.top_k, moe.norm_topk_prob)
    groups, where = expert_groups(ids)
    inter, outs = moe.inter, []
    for e, rows in groups:
        gu = ops.expert_linear(ops.take_rows(x, rows), moe.gate_up[e])
        outs.append(ops.expert_linear(ops.silu_mul(gu[:, :inter], gu[:, inter:]), moe.down[e]))
    y = ops.concat_rows(outs)
    out = ops.scale_rows(ops.take_rows(y, where[:, 0]), w[:, 0])
    for r in range(1, moe.top_k):
        out = ops.add(out, ops.scale_rows(ops.take_rows(y, where[:, r]), w[:, r]))
    return out
