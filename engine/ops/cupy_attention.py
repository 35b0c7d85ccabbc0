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

With `options.attend_tail` a split launch whose blocks all stay resident with more shared
memory runs the `_tail` kernel (cupy_attend_plan.tail_fits): the group of the last chunk takes
it, if short, beside the chunk before.

With `options.attend_early` a split launch sends the first chunk's copies of keys older than
its step before it waits for the kernel before it (programmatic dependent launch): only when
bytes arrive changes.

`attend_qkv` (options.attend_store) runs a split launch's kernel with the step's q/k norms,
RoPE and K/V write in it (the `_fs` kernels), from the qkv projection's rows: the bytes and
output of qkv_norm_rope_store then `attend`, one launch fewer a layer.

Launches of many rows (a prompt step) run the tile kernel (cupy_attend_tile.cu) instead of one
block per pair: a block per (KV head, tile of rows), the last tile first, stages each chunk
of keys once for all its pairs, and its warps take a pair each with attend_paged's
arithmetic, so again the same bits. Which form a launch takes: cupy_attend_plan.py.
"""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np

from engine.errors import EngineFailure
from engine.ops.cupy_attend_plan import (
    ATTEND_HEAD_DIMS,
    GROUPS,
    STAGE_DIMS,
    TILE_WARPS,
    choose,
    shared_asks,
    tail_fits,
    tail_shared,
)
from engine.ops.cupy_launch import NULL, or_null

SHARED_OPTIN = 97  # cudaDevAttrMaxSharedMemoryPerBlockOptin (CUDA runtime API)
SM_COUNT = 16  # cudaDevAttrMultiProcessorCount
SM_SHARED = 81  # cudaDevAttrMaxSharedMemoryPerMultiprocessor


def shared_limit() -> int:
    """The most shared memory one block may ask for on the current device (227 KB on an H100
    or H200, 163 KB on an A100, 99 KB on most consumer GPUs)."""
    return int(cp.cuda.runtime.deviceGetAttribute(SHARED_OPTIN, cp.cuda.Device().id))


def allow_shared(kernels: dict[tuple[str, int, str], Any], limit: int) -> None:
    """Let each split and tile kernel take its shared bytes past the 48 KB a launch gets
    unasked, up to the device's `limit` (cupy_attend_plan.choose launches no form that needs
    more)."""
    for (kind, d, form), fn in kernels.items():
        ask = shared_asks(kind, d, limit).get(form)
        if ask:
            fn.max_dynamic_shared_size_bytes = ask


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
    form = choose(n, hq, hkv, d, kind, ops.options, ops.shared_limit)
    if form.name == "tile":  # a block per (KV head, tile of rows), each chunk staged once
        grid = (hkv, -(-n // form.rows))  # the KV heads of a tile launched together
        tile_args = (*args[:-4], np.int32(n), *sizes, np.int32(form.rows))
        block = (32 * TILE_WARPS,)
        ops.attend_k[kind, d, form.kernel](grid, block, tile_args, shared_mem=form.shared)
    elif form.name == "split":  # one block per group (of `heads` q heads); the last merges
        _split(ops, kind, d, form, n, hq, args)
    else:
        block = (d * GROUPS,)
        pair_args = (*args, NULL, NULL, np.int32(0))
        ops.attend_k[kind, d, ""]((n, hq), block, pair_args, shared_mem=form.shared)
    return out


def _split(
    ops: Any, kind: str, d: int, form: Any, n: int, hq: int, args: tuple, fs: tuple = ()
) -> None:
    """A split launch of `form`: one block per key group of `form.heads` q heads, the last
    of a pair merging; with `fs` (the _fs kernel's heads_in arguments) the fused form."""
    part = cp.empty(n * hq * GROUPS * (d + 2), dtype=cp.float32)
    count = ops.split_counters(n * hq)
    grid, block = (n, hq // form.heads, GROUPS), (d * form.heads,)
    name, shared = form.kernel + ("_fs" if fs else ""), form.shared
    blocks = n * (hq // form.heads) * GROUPS
    regs = ops.tail_regs.get((kind, d, name + "_tail"))  # none where the option is off, or fs
    if regs is not None and tail_fits(form, blocks, kind, d, ops.device_shape, regs):
        name, shared = name + "_tail", shared + tail_shared(kind, d, form.heads)
    flags = split_flags(ops.options)
    ops.attend_k[kind, d, name](grid, block, (*args, part, count, flags, *fs), shared_mem=shared)


def split_flags(options: Any) -> np.int32:
    """The split kernels' `flags` (cupy_attend_stage.cu): ATT_EARLY = 1."""
    return np.int32(options.attend_early)


def tail_regs(kernels: dict[tuple[str, int, str], Any]) -> dict[tuple[str, int, str], int]:
    """Each _tail kernel's registers a thread, read once (0 where CuPy does not give them):
    cupy_attend_plan.tail_fits counts them."""
    return {
        key: int(getattr(fn, "num_regs", 0) or 0)
        for key, fn in kernels.items()
        if key[2].endswith("_tail")
    }


def device_shape() -> tuple[int, int, int]:
    """(multiprocessors, shared bytes a multiprocessor, shared bytes a block at most) of the
    current device: what cupy_attend_plan.tail_fits weighs."""
    dev = cp.cuda.Device().id
    attr = cp.cuda.runtime.deviceGetAttribute
    return int(attr(SM_COUNT, dev)), int(attr(SM_SHARED, dev)), shared_limit()


def attend_qkv(ops: Any, qkv: Any, heads: tuple, target: Any, meta: Any, fresh: Any) -> Any | None:
    """The attention output [n, Hq, D] of a qkv projection's rows [n, (Hq + 2 Hkv) D], with
    the q/k norms, RoPE and the K/V write into `target` (cupy_kv.KVTarget) made in the split
    launch itself: the bytes of qk_norm_rope_store then `attend`. fresh [n]: each row's first
    position its step writes (rows of one stream are adjacent, in position order). None where
    options.attend_store is off or the launch takes another form (the caller then stores and
    attends)."""
    hq, hkv, qw, kw, eps, cos, sin = heads
    n, width = qkv.shape
    d = width // (hq + 2 * hkv)
    if not ops.options.attend_store or not n or d not in ATTEND_HEAD_DIMS or d > STAGE_DIMS:
        return None
    if qkv.dtype != cp.float32 or qkv.strides[1] != 4 or hq % hkv:
        return None
    form = choose(n, hq, hkv, d, target.kind, ops.options, ops.shared_limit)
    if form.name != "split" or (target.kind, d, form.kernel + "_fs") not in ops.attend_k:
        return None  # another form, or options.attend_store was off when ops was made
    (kc, ke), (vc, ve) = target.k, target.v
    ptab, poff, last, page_rows = meta
    flat = cp.empty((n, hq * d), dtype=cp.float32)
    twin = ops._bf16_out(flat)
    sizes = (np.int32(hq), np.int32(hkv), np.int32(page_rows), np.float32(1.0 / np.sqrt(d)))
    ke, ve = or_null(ke), or_null(ve)
    args = (NULL, kc, vc, ke, ve, ptab, poff, last, flat, or_null(twin), *sizes)
    stride = np.int64(qkv.strides[0] // 4)
    fs = (qkv, stride, qw, kw, cos, sin, np.float32(eps), target.slots, fresh)
    _split(ops, target.kind, d, form, n, hq, args, fs)
    return flat.reshape(n, hq, d)
