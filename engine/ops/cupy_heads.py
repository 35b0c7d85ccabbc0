"""Launching the per-head kernels of a qkv projection (cupy_kernels.cu) for CupyOps: the q/k
norms and RoPE, and the same with the K/V write fused in."""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np

from engine.ops.cupy_attention import ATTEND_HEAD_DIMS
from engine.ops.cupy_kv import KINDS, KVTarget
from engine.ops.cupy_launch import or_null

F32 = cp.float32


def _head_dim(qkv: Any, hq: int, hkv: int) -> int | None:
    """The head dim of a qkv output [n, (hq + 2 hkv) D] the kernels take, or None."""
    d = qkv.shape[1] // (hq + 2 * hkv)
    if d not in ATTEND_HEAD_DIMS or qkv.dtype != F32 or qkv.strides[1] != 4:
        return None
    return d


def qk_norm_rope(
    ops: Any, qkv: Any, hq: int, hkv: int, qw: Any, kw: Any, eps: float, cos: Any, sin: Any
) -> tuple[Any, Any] | None:
    """q [n, hq, D] and k [n, hkv, D] of a qkv output [n, (hq + 2 hkv) D], each head
    RMS-normed and roped, in one launch (project_qkv's rope(rms_norm(.)) otherwise); None
    where the head dim does not suit the kernel."""
    d = _head_dim(qkv, hq, hkv)
    if d is None:
        return None
    n = qkv.shape[0]
    q = cp.empty((n, hq, d), dtype=F32)
    k = cp.empty((n, hkv, d), dtype=F32)
    if n:
        args = (qkv, np.int64(qkv.strides[0] // 4), qw, kw, cos, sin, q, k)
        ops.k["qk_norm_rope"](
            (n, hq + hkv), (d,), (*args, np.int32(hq), np.int32(hkv), np.float32(eps)),
            shared_mem=2 * d * 4,
        )  # fmt: skip
    return q, k


def qk_norm_rope_store(
    ops: Any,
    qkv: Any,
    hq: int,
    hkv: int,
    qw: Any,
    kw: Any,
    eps: float,
    cos: Any,
    sin: Any,
    target: KVTarget,
) -> Any | None:
    """qk_norm_rope's q, with k (normed, roped) and v encoded straight into `target`'s slots,
    in one launch: the bytes of qk_norm_rope, then cupy_kv.store_rows; None where the head dim
    does not suit the kernel."""
    d = _head_dim(qkv, hq, hkv)
    if d is None:
        return None
    n = qkv.shape[0]
    q = cp.empty((n, hq, d), dtype=F32)
    if n:
        (kc, ke), (vc, ve) = target.k, target.v
        args = (
            qkv, np.int64(qkv.strides[0] // 4), qw, kw, cos, sin, q,
            kc, or_null(ke), vc, or_null(ve), target.slots,
            np.int32(KINDS[target.kind]), np.int32(hq), np.int32(hkv), np.float32(eps),
        )  # fmt: skip
        ops.k["qkv_norm_rope_store"]((n, hq + 2 * hkv), (d,), args, shared_mem=2 * d * 4)
    return q
