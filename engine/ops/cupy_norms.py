"""Launching the row norms of cupy_kernels.cu for CupyOps: rms_norm, the residual add fused
with it, and the MTP layer's input (an embedding and a hidden row, each normed, side by side).
Each writes its output's bf16 bits beside it for the linear that follows (CupyOps._bf16_out)."""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np

from engine.ops.cupy_launch import or_null

F32 = cp.float32


def _threads(cols: int) -> int:
    """A norm's block: 256 threads, or the power of two at or above a shorter row."""
    return 256 if cols >= 256 else 1 << max(0, (cols - 1).bit_length())


def _plain(a: Any) -> bool:
    return isinstance(a, cp.ndarray) and a.dtype == F32 and a.flags.c_contiguous


def rms_norm(ops: Any, x: Any, w: Any, eps: float) -> Any:
    x = cp.ascontiguousarray(x, dtype=F32)
    cols = x.shape[-1]
    rows = x.size // cols
    y = cp.empty_like(x)
    if rows:
        yb = ops._bf16_out(y)
        t = _threads(cols)
        args = (x, w, y, or_null(yb), np.int32(cols), np.float32(eps))
        ops.k["rms_norm"]((rows,), (t,), args, shared_mem=t * 4)
    return y


def add_rms_norm(ops: Any, a: Any, b: Any, w: Any, eps: float) -> tuple[Any, Any] | None:
    """(a + b, rms_norm(a + b, w)) in one launch, with the bits of add then rms_norm; None
    (the caller runs the two) where a or b is not a contiguous float32 matrix."""
    if a.ndim != 2 or a.shape != b.shape or not all(_plain(t) for t in (a, b)):
        return None
    rows, cols = a.shape
    s = cp.empty_like(a)
    y = cp.empty_like(a)
    if rows:
        yb = ops._bf16_out(y)
        t = _threads(cols)
        args = (a, b, s, w, y, or_null(yb), np.int32(cols), np.float32(eps))
        ops.k["add_rms_norm"]((rows,), (t,), args, shared_mem=t * 4)
    return s, y


def embed_norm_concat(
    ops: Any, table: Any, ids: Any, hidden: Any, we: Any, wh: Any, eps: float
) -> Any | None:
    """[rms_norm(table[ids], we), rms_norm(hidden, wh)] side by side [n, 2 H], in one launch
    with the bits of embed, the two norms and the concatenation; None where the inputs are not
    float32 rows of H."""
    n, cols = hidden.shape
    if table.dtype != F32 or hidden.dtype != F32 or table.shape[1] != cols or len(ids) != n:
        return None
    if not isinstance(ids, cp.ndarray):
        ids = cp.asarray(np.asarray(ids, dtype=np.int64))
    ids = cp.ascontiguousarray(ids, dtype=cp.int64)
    hidden = cp.ascontiguousarray(hidden)
    y = cp.empty((n, 2 * cols), dtype=F32)
    if n:
        yb = ops._bf16_out(y)
        t = _threads(cols)
        args = (table, ids, hidden, we, wh, y, or_null(yb), np.int32(cols), np.float32(eps))
        ops.k["embed_norm_concat"]((n,), (t,), args, shared_mem=t * 4)
    return y
