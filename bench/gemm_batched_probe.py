"""Probe: does cuBLAS's strided-batched GEMM give a row tile the bits of the one-tile GEMM
that the cupy backend runs now (engine/ops/cupy_blas.py), whatever the batch count? And what
does it save? A research probe for issue 28's prefill; the engine does not use it.

    python bench/gemm_batched_probe.py [--rows 512] [--tile 8]
"""

from __future__ import annotations

import argparse
import ctypes
from functools import partial

import cupy as cp
import numpy as np

from engine.ops.cupy_blas import (
    CUBLAS_COMPUTE_32F,
    CUBLAS_GEMM_DEFAULT,
    CUDA_R_16BF,
    CUDA_R_32F,
    OP_N,
    OP_T,
    Cublas,
)

SHAPES = {
    "qkv": (4096, 1024),
    "o": (1024, 2048),
    "gate_up": (6144, 1024),
    "down": (1024, 3072),
    "lm_head": (151936, 1024),
    "tiny_down": (64, 192),
}


def bf16(a: np.ndarray) -> cp.ndarray:
    return cp.asarray((a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))


def batched(
    blas: Cublas, x: cp.ndarray, w: cp.ndarray, y: cp.ndarray, tile: int, count: int
) -> None:
    n, k = w.shape
    blas._follow_stream()
    vp, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    f = blas.lib.cublasGemmStridedBatchedEx
    f.argtypes = [vp, i, i, i, i, i, vp, vp, i, i, ll, vp, i, i, ll, vp, vp, i, i, ll, i, i, i]
    f.restype = i
    status = f(
        blas.handle, OP_T, OP_N, n, tile, k,
        ctypes.addressof(blas._one), w.data.ptr, CUDA_R_16BF, k, 0,
        x.data.ptr, CUDA_R_16BF, k, tile * k,
        ctypes.addressof(blas._zero), y.data.ptr, CUDA_R_32F, n, tile * n,
        count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT,
    )  # fmt: skip
    assert status == 0, status


def per_tile(
    blas: Cublas, x: cp.ndarray, w: cp.ndarray, y: cp.ndarray, tile: int, count: int
) -> None:
    n, k = w.shape
    for t in range(count):
        blas.gemm_bf16(x[t * tile :].data.ptr, w.data.ptr, y[t * tile :].data.ptr, tile, n, k)


def timed(fn, reps: int = 20) -> float:  # type: ignore[no-untyped-def]
    fn()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / reps


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=512)
    p.add_argument("--tile", type=int, default=8)
    args = p.parse_args()
    blas, rng, tile = Cublas(), np.random.default_rng(0), args.tile
    count = args.rows // tile
    for name, (n, k) in SHAPES.items():
        w = bf16(rng.standard_normal((n, k)) / np.sqrt(k))
        x = bf16(rng.standard_normal((args.rows, k)))
        want = cp.empty((args.rows, n), dtype=cp.float32)
        per_tile(blas, x, w, want, tile, count)
        same, steady = True, True
        alone = cp.empty((tile, n), dtype=cp.float32)
        batched(blas, x, w, alone, tile, 1)
        ones = [cp.empty((tile, n), dtype=cp.float32) for _ in range(count)]
        for t in range(count):  # each tile alone, as a batch of one
            batched(blas, x[t * tile :], w, ones[t], tile, 1)
        for b in range(1, count + 1):
            got = cp.empty((b * tile, n), dtype=cp.float32)
            batched(blas, x, w, got, tile, b)
            same &= bool((got.view(cp.uint32) == want[: b * tile].view(cp.uint32)).all())
            for t in range(b):
                steady &= bool(
                    (
                        got[t * tile : (t + 1) * tile].view(cp.uint32) == ones[t].view(cp.uint32)
                    ).all()
                )
        one = cp.empty_like(want)
        ms_tiles = timed(partial(per_tile, blas, x, w, want, tile, count))
        ms_batch = timed(partial(batched, blas, x, w, one, tile, count))
        print(f"{name:8} N={n} K={k}: batched == per-tile bits at 1..{count} tiles: {same}, "
              f"a tile's bits the same at every batch count: {steady}; "
              f"{count} tile GEMMs {ms_tiles:.3f} ms, one batched {ms_batch:.3f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
