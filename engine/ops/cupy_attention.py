"""Launching the paged attention kernels (cupy_attend.cu) for CupyOps.attend.

A launch of few (row, head) pairs leaves most SMs idle with one block per pair, so below
`options.attend_split` pairs each key group gets its own block, and the pair's block that
finishes last combines the groups in group order with the same float operations: the same
bits either way (tests/engine/test_cupy_backend.py), so the choice may depend on the launch's
shape. The last block is elected by a counter per pair (`CupyOps.split_counters`: zero
between launches, each merging block sets its own back), in one launch instead of two. The
counters are one array per backend, shared by eager launches and every captured graph: sound
because no two attention launches run at once (one stream at a time; StepGraphs.run
synchronizes before and after each replay). Graphs replayed concurrently on several streams
would need counters of their own.

Launches of many rows (a prompt step) run the tile kernel (cupy_attend_tile.cu) instead of one
block per pair: a block per (tile of rows, KV head) stages each chunk of keys once for all
its pairs, and its warps take a pair each with attend_paged's arithmetic, so again the same
bits.
"""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np

from engine.errors import EngineFailure
from engine.ops.cupy_launch import NULL, or_null

ATTEND_HEAD_DIMS = (32, 64, 128, 256)  # attend_<kind>_<D> in cupy_attend.cu
GROUPS = 4  # ATT_NG in cupy_kernels.cu
CODE_BYTES = {"f32": 4, "bf16": 2, "fp8": 1}  # a stored code of each kind
STAGE_DIMS = 128  # the split and tile kernels stage a chunk's codes in shared memory up to this D
TILE_PAIRS = 16  # (row, q head) pairs a tile block takes at most
TILE_WARPS = 8  # TILE_WARPS in cupy_attend_tile.cu: a tile block's warps, a pair each at a time


def split_shared(kind: str, d: int) -> int:
    """Shared bytes of one split block: its floats, and at d <= STAGE_DIMS a chunk's K and V
    codes (d keys of d codes each)."""
    staged = 2 * d * d * CODE_BYTES[kind] if d <= STAGE_DIMS else 0
    return (6 * d + 2 * GROUPS) * 4 + staged


def tile_shared(kind: str, d: int, pairs: int, rows: int) -> int:
    """Shared bytes of one tile block of `pairs` pairs over `rows` rows: a chunk's K and V
    codes, each pair's q and its groups' state, a warp's weights, and per key or row."""
    floats = pairs * d + TILE_WARPS * d + 2 * d + 2 * pairs * GROUPS + pairs * GROUPS * d
    return 2 * d * d * CODE_BYTES[kind] + 4 * (floats + d + rows)


def shared_limit() -> int:
    """The most shared memory one block may ask for on the current device (227 KB on an H100
    or H200, 163 KB on an A100, 99 KB on most consumer GPUs)."""
    return int(cp.cuda.Device().attributes.get("MaxSharedMemoryPerBlockOptin", 48 << 10))


def allow_shared(kernels: dict[tuple[str, int, str], Any], limit: int) -> None:
    """Let each split and tile kernel take its shared bytes past the 48 KB a launch gets
    unasked, up to the device's `limit` (a form that needs more is not launched: attend)."""
    for (kind, d, form), fn in kernels.items():
        tile = tile_shared(kind, d, TILE_PAIRS, TILE_PAIRS)
        need = {"_split": split_shared(kind, d), "_tile": tile}
        if need.get(form, 0) > 48 << 10:
            fn.max_dynamic_shared_size_bytes = min(need[form], limit)


def tile_rows(ops: Any, n: int, hq: int, hkv: int, d: int, kind: str) -> int:
    """Rows a tile block takes for a launch of n rows; 0: no tile kernel (few rows, D past
    STAGE_DIMS, more q heads a KV head than TILE_PAIRS, or no tile fits the device's shared
    memory). Fewer rows a tile where the shared memory is short: the same bits."""
    least, qpk = ops.options.attend_tile, hq // hkv
    if not least or n < least or d > STAGE_DIMS or qpk > TILE_PAIRS:
        return 0
    rows = TILE_PAIRS // qpk
    while rows and tile_shared(kind, d, rows * qpk, rows) > ops.shared_limit:
        rows //= 2
    return rows


def attend(ops: Any, kind: str, q: Any, kc: Any, vc: Any, ke: Any, ve: Any, meta: Any) -> Any:
    """q [n, Hq, D] over codes [slots, Hkv, D] through meta = (ptab, poff, last,
    page_rows) device arrays; the output [n, Hq, D] float32, and its bf16 bits for the o
    projection (ops._bf16_out)."""
    q = cp.ascontiguousarray(q, dtype=cp.float32)
    n, hq, d = q.shape
    hkv = kc.shape[-2]
    if d not in ATTEND_HEAD_DIMS:
        raise EngineFailure(f"cupy attention: head_dim {d} is not one of {ATTEND_HEAD_DIMS}")
    if hq < hkv or hq % hkv:
        raise EngineFailure(f"cupy attention: {hq} q heads do not share {hkv} KV heads evenly")
    ptab, poff, last, page_rows = meta
    flat = cp.empty((n, hq * d), dtype=cp.float32)  # [n, Hq * D]: the o projection's input
    out = flat.reshape(n, hq, d)
    if not n:
        return out
    ke = ke if ke is not None else poff  # unread unless fp8
    ve = ve if ve is not None else poff
    twin = ops._bf16_out(flat)  # its bf16 bits too: no conversion launch
    outb = or_null(twin)
    sizes = (np.int32(hq), np.int32(hkv), np.int32(page_rows), np.float32(1.0 / np.sqrt(d)))
    args = (q, kc, vc, ke, ve, ptab, poff, last, out, outb, *sizes)
    rows = tile_rows(ops, n, hq, hkv, d, kind)
    if rows:  # a block per (tile of rows, KV head), each chunk staged once for its pairs
        shared = tile_shared(kind, d, rows * (hq // hkv), rows)
        grid = (-(-n // rows), hkv)
        tile_args = (*args[:-4], np.int32(n), *sizes, np.int32(rows))
        ops.attend_k[kind, d, "_tile"](grid, (32 * TILE_WARPS,), tile_args, shared_mem=shared)
    elif n * hq < ops.options.attend_split and split_shared(kind, d) <= ops.shared_limit:
        # one block per group; the last one merges
        part = cp.empty(n * hq * GROUPS * (d + 2), dtype=cp.float32)
        shared = split_shared(kind, d)
        count = ops.split_counters(n * hq)
        ops.attend_k[kind, d, "_split"](
            (n, hq, GROUPS), (d,), (*args, part, count), shared_mem=shared
        )
    else:
        shared = (d + 5 * GROUPS * d + 2 * GROUPS) * 4
        ops.attend_k[kind, d, ""]((n, hq), (d * GROUPS,), (*args, NULL, NULL), shared_mem=shared)
    return out
