"""The backend's own GEMMs, one value per deployment like the row tile (their bits differ from
cuBLAS's and from each other's: other summation orders):

* `ENGINE_CUPY_GEMM=own` (cupy_gemm.cu): a warp per output and row group, CUDA cores;
* `ENGINE_CUPY_GEMM=mma` (cupy_mma.cu): tensor cores, 16 weight rows by 8 x rows an mma;
  from `options.wide_from` rows on, the same sums by blocks of 64 x 64 outputs whose
  operands are staged in shared memory (cupy_mma_wide.cu).

Each sums every output in an order that depends on K alone, so a row keeps its bits at every
row count without cuBLAS's fixed row tile (no padding, no probe of batched calls).
"""

from __future__ import annotations

from typing import Any

import numpy as np

ROWS, WARPS = 8, 8  # GEMM_ROWS, GEMM_WARPS of the own kernel
KERNELS = ("own_gemm1", "own_gemm2")
WIDE = 4096  # outputs from which a warp takes two (more bytes in flight; the same bits)
MMA_TILES = (1, 2, 4, 8)  # tiles of 8 x rows a warp takes (mma_gemm_T); not in the sums
MMA_CHUNK, MMA_MAX_SLICES = 64, 8
SHORT_CHUNKS = 2  # a warp's chunks from which on the _1u2 kernels no longer serve
LONG_CHUNKS = (5, 6)  # a warp's chunks that mma_gemm_1u6 serves (all in flight at once)
MMA_KERNELS = (
    *(f"mma_{kind}_{t}" for kind in ("gemm", "silu") for t in (*MMA_TILES, "1u2")),
    *("mma_gemm_1u6", "mma_gemm_1h", "mma_gemm_1u6h"),
)
WIDE_KERNELS = ("mma_wide_gemm", "mma_wide_silu", "mma_wide_gemm_deep")
WIDE_ROWS, WIDE_THREADS = 64, 128  # x rows and weight rows a block of the wide kernel, threads
WIDE_SHARED = 3 * 2 * WIDE_ROWS * MMA_CHUNK * 2  # three stages of both tiles, bytes
WIDE_DEEP_SHARED = 8 * 2 * WIDE_ROWS * MMA_CHUNK * 2  # WIDE_DEEP_STAGES (8) stages, bytes


def fits(kind: str, k: int) -> bool:
    """Whether the kernel of `kind` takes a reduction of k (16-byte loads of 8 bf16; mma:
    chunks of 64)."""
    return k > 0 and k % (MMA_CHUNK if kind == "mma" else 8) == 0


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


def mma_tiles(m: int) -> int:
    """Tiles of 8 x rows a warp takes at m rows: the fewest that cover m, at most 8."""
    return next((t for t in MMA_TILES if 8 * t >= m), MMA_TILES[-1])


def mma_slices(k: int) -> int:
    """The K slices S of the mma kernels (a warp each): by K alone, part of every sum's order."""
    return min(MMA_MAX_SLICES, k // MMA_CHUNK)


def mma_kernel(kind: str, t: int, k: int, n: int = 0, sms: int = 0, fit: bool = True) -> str:
    """mma_<kind>_<t> (kind "gemm" or "silu"; 4 chunks in flight at t = 1), or at one tile of
    x rows a warp, fitted to K and N (fit=False: never): mma_<kind>_1u2 where a warp has at
    most two chunks of K (fewer registers, three blocks an SM), mma_gemm_1u6 where five or six
    (all asked for before the wait); for a plain GEMM whose n outputs in blocks of 16 would
    fill at most half of `sms` SMs, blocks of 8 (suffix h; n = 0: never). The same sums
    (cupy_mma.cu)."""
    per = -(-(k // MMA_CHUNK) // mma_slices(k))  # chunks a warp takes
    if fit and t == 1 and per <= SHORT_CHUNKS:
        return f"mma_{kind}_1u2"
    if not (fit and t == 1 and kind == "gemm"):
        return f"mma_{kind}_{t}"
    half = "h" if 0 < 2 * -(-n // 16) <= sms else ""
    return f"mma_gemm_1u6{half}" if per in LONG_CHUNKS else f"mma_gemm_1{half}"


def sm_count() -> int:
    """The current device's multiprocessors (cudaDevAttrMultiProcessorCount), read once."""
    import cupy as cp

    dev = cp.cuda.Device().id
    if dev not in _SMS:
        _SMS[dev] = int(cp.cuda.runtime.deviceGetAttribute(16, dev))
    return _SMS[dev]


_SMS: dict[int, int] = {}


def wide(ops: Any, m: int) -> bool:
    """Whether a GEMM of m rows takes the wide kernel (the same bits, another staging)."""
    return 0 < ops.options.wide_from <= m


def wide_kernel(ops: Any, blocks: int) -> tuple[str, int]:
    """The wide kernel of a plain GEMM of `blocks` blocks and its shared bytes: with
    options.wide_deep, eight chunks in flight where the blocks are no more than the SMs (one
    block an SM: its bytes in flight feed the mma) and the device lets a block have them;
    else three. The same sums either way (cupy_mma_wide.cu)."""
    deep = ops.options.wide_deep and blocks <= sm_count() and ops.shared_limit >= WIDE_DEEP_SHARED
    return ("mma_wide_gemm_deep", WIDE_DEEP_SHARED) if deep else ("mma_wide_gemm", WIDE_SHARED)


def mma(ops: Any, xb: Any, m: int, w: Any, tiles: int = 0, fit: bool = True) -> Any:
    """y [m, w.n] float32 on the tensor cores (cupy_mma.cu); `tiles` of 8 x rows a warp
    (0: by m, or the wide kernel from options.wide_from rows); `fit`: see mma_kernel. The
    slices S depend on K alone; neither tiles nor the kernel change a bit."""
    import cupy as cp

    y = cp.empty((m, w.n), dtype=cp.float32)
    if m and not tiles and wide(ops, m):
        grid = (-(-w.n // WIDE_ROWS), -(-m // WIDE_ROWS))
        args = (xb, np.int64(xb.shape[1]), w.data, y, np.int32(m), np.int32(w.n), np.int32(w.k))
        kernel, shared = wide_kernel(ops, grid[0] * grid[1])
        ops.k[kernel](grid, (WIDE_THREADS,), args, shared_mem=shared)
    elif m:
        t = tiles or mma_tiles(m)
        slices = mma_slices(w.k)
        # blocks of 8 outputs for one row only: H100, 0.6B shape, decode replay 1.092-1.094 ms
        # against 1.102-1.107 at 1 stream, but 1.454-1.455 against 1.393-1.400 at 8
        kernel = mma_kernel("gemm", t, w.k, w.n if m == 1 else 0, sm_count(), fit)
        grid = (-(-w.n // (8 if kernel.endswith("h") else 16)), -(-m // (8 * t)))
        args = (xb, np.int64(xb.shape[1]), w.data, y, np.int32(m), np.int32(w.n), np.int32(w.k))
        ops.k[kernel](grid, (32 * slices,), args, shared_mem=slices * 16 * 8 * t * 4)
    return y
