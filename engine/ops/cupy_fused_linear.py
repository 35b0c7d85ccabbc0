"""The mma GEMM with the op after it in the same launch, for CupyOps: `linear_silu`, the
gate/up projection and SiLU-mul (`mma_silu_T`, cupy_mma.cu). A block's 16-row tile holds the
gate rows of 8 outputs and the up rows of the same 8, so silu(gate) * up is made where both
sums meet, with the bits of linear then silu_mul (tests/engine/test_cupy_epilogues.py). None
where the fusion does not apply (another GEMM, other shapes): the caller runs the two.

Measured and not kept: the o and down projections' residual add and RMS norm made by the
GEMM's last block (elected by a counter), exact but slower on the H200 (docs/cupy.md).
"""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np

from engine.ops import cupy_gemm
from engine.ops.cupy_launch import or_null

F32 = cp.float32


def _mma(ops: Any, w: Any) -> bool:
    return ops.options.gemm == "mma" and cupy_gemm.fits("mma", w.k)


def linear_silu(ops: Any, x: Any, w: Any, inter: int) -> Any | None:
    """silu(gate) * up [m, inter] of x . w^T, w the gate rows then the up rows [2 inter, k]."""
    if not ops.options.silu_epilogue or not _mma(ops, w) or w.n != 2 * inter:
        return None
    xb, m = ops.bf16_rows(x, w)
    y = cp.empty((m, inter), dtype=F32)
    if m and cupy_gemm.wide(ops, m):
        grid = (-(-inter // (cupy_gemm.WIDE_ROWS // 2)), -(-m // cupy_gemm.WIDE_ROWS))
        args = (xb, np.int64(xb.shape[1]), w.data, y, or_null(ops._bf16_out(y)))
        sizes = (np.int32(m), np.int32(inter), np.int32(w.k))
        ops.k["mma_wide_silu"](
            grid, (cupy_gemm.WIDE_THREADS,), (*args, *sizes), shared_mem=cupy_gemm.WIDE_SHARED
        )
    elif m:
        yb = ops._bf16_out(y)
        t = cupy_gemm.mma_tiles(m)
        s = cupy_gemm.mma_slices(w.k)
        grid = (-(-inter // 8), -(-m // (8 * t)))
        sizes = (np.int32(m), np.int32(inter), np.int32(w.k))
        args = (xb, np.int64(xb.shape[1]), w.data, y, or_null(yb), *sizes)
        kernel = cupy_gemm.mma_kernel("silu", t, w.k)
        ops.k[kernel](grid, (32 * s,), args, shared_mem=s * 16 * 8 * t * 4)
    return y
