"""The backend's own GEMM (cupy_gemm.cu), `ENGINE_CUPY_GEMM=own`: a warp per output and row
in a fixed order that depends on K alone, so a row keeps its bits at every row count without
cuBLAS's fixed row tile (no padding, no probe of batched calls). Its bits differ from
cuBLAS's (another summation order): the choice is one value per deployment, like the tile.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ROWS, WARPS = 8, 8  # GEMM_ROWS, GEMM_WARPS of the kernel
KERNELS = ("own_gemm1", "own_gemm2")
WIDE = 4096  # outputs from which a warp takes two (more bytes in flight; the same bits)


def fits(k: int) -> bool:
    """Whether the kernel takes a reduction of k (16-byte loads of 8 bf16)."""
    return k > 0 and k % 8 == 0


def gemm(ops: Any, xb: Any, m: int, w: Any, outs: int = 0) -> Any:
    """y [m, w.n] float32 of bf16 rows xb [>= m, w.k] (uint16 bits, contiguous); `outs`
    outputs a warp (1 or 2; 0: by the output count)."""
    import cupy as cp

    y = cp.empty((m, w.n), dtype=cp.float32)
    if m:
        outs = outs or (2 if w.n >= WIDE else 1)
        grid = (-(-w.n // (WARPS * outs)), -(-m // ROWS))
        args = (xb, np.int64(xb.shape[1]), w.data, y, np.int32(m), np.int32(w.n), np.int32(w.k))
        ops.k[KERNELS[outs - 1]](grid, (32 * WARPS,), args)
    return y
