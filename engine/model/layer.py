"""One Qwen3 decoder layer as plain functions over an Ops object: its weights, q/k/v with
their norms and RoPE, attention through the caller's `attend`, and the MLP (dense, or the
sparse one of engine/ops/moe.py), each residual add fused with the norm after it where the
backend offers it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.model.config import ModelConfig
from engine.ops.base import Array, Ops, StoredAttend
from engine.ops.moe import MoeWeights


@dataclass
class Layer:
    qkv: Array
    o: Array
    q_norm: Array
    k_norm: Array
    in_norm: Array
    post_norm: Array
    gate_up: Array | None  # dense MLP (None in a sparse layer)
    down: Array | None
    moe: MoeWeights | None = None  # sparse MLP (engine/ops/moe.py)


Attend = Callable[[Array, Array, Array], Array]


def project_qkv(
    config: ModelConfig, ops: Ops, layer: Layer, h: Array, cos: Array, sin: Array
) -> tuple[Array, Array, Array]:
    """Normed input rows -> roped q [n, Hq, D], roped k and v [n, Hkv, D]."""
    return qkv_heads(config, ops, layer, ops.linear(h, layer.qkv), cos, sin)


def attention_rows(
    config: ModelConfig, ops: Ops, layer: Layer, h: Array, cos: Array, sin: Array, attend: Attend
) -> Array:
    """Attention [n, Hq * D] of normed input rows h: q/k/v, their norms and RoPE, the K/V
    write and attention. Where `attend` is a StoredAttend and the backend fuses the norms, RoPE
    and write into the attention launch, that one launch; where it fuses the write into the
    norm and RoPE launch, that one launch (the same bytes) and then attend.attend(q)."""
    hq, d = config.num_heads, config.head_dim
    qkv = ops.linear(h, layer.qkv)
    n = qkv.shape[0]
    if isinstance(attend, StoredAttend):
        args = (hq, config.num_kv_heads, layer.q_norm, layer.k_norm, config.rms_norm_eps)
        out = attend.attend_qkv(qkv, *args, cos, sin) if attend.attend_qkv else None
        if out is not None:
            return out.reshape(n, hq * d)
        q = ops.qk_norm_rope_store(qkv, *args, cos, sin, attend.target)
        if q is not None:
            return attend.attend(q).reshape(n, hq * d)
    q, k, v = qkv_heads(config, ops, layer, qkv, cos, sin)
    return attend(q, k, v).reshape(n, hq * d)


def qkv_heads(
    config: ModelConfig, ops: Ops, layer: Layer, qkv: Array, cos: Array, sin: Array
) -> tuple[Array, Array, Array]:
    """A qkv projection's rows -> roped q [n, Hq, D], roped k and v [n, Hkv, D]."""
    hq, hkv, d, eps = config.num_heads, config.num_kv_heads, config.head_dim, config.rms_norm_eps
    n = qkv.shape[0]
    q = qkv[:, : hq * d].reshape(n, hq, d)
    k = qkv[:, hq * d : (hq + hkv) * d].reshape(n, hkv, d)
    v = qkv[:, (hq + hkv) * d :].reshape(n, hkv, d)
    # a backend may fuse the two norms and RoPEs into one kernel (cupy); it is then the only
    # path, eager or graph, so its bits are the backend's bits
    qk = ops.qk_norm_rope(qkv, hq, hkv, layer.q_norm, layer.k_norm, eps, cos, sin)
    if qk is not None:
        return qk[0], qk[1], v
    q = ops.rope(ops.rms_norm(q, layer.q_norm, eps), cos, sin)
    k = ops.rope(ops.rms_norm(k, layer.k_norm, eps), cos, sin)
    return q, k, v


def decoder_layer(
    config: ModelConfig, ops: Ops, layer: Layer, x: Array, cos: Array, sin: Array, attend: Attend
) -> Array:
    """x + attention + MLP; `attend(q, k, v)` stores k/v where it must and returns [n, Hq, D]."""
    h = ops.rms_norm(x, layer.in_norm, config.rms_norm_eps)
    return decoder_block(config, ops, layer, x, h, cos, sin, attend, None)[0]


def decoder_block(
    config: ModelConfig,
    ops: Ops,
    layer: Layer,
    x: Array,
    h: Array,
    cos: Array,
    sin: Array,
    attend: Attend,
    norm: Array | None,
) -> tuple[Array, Array | None]:
    """decoder_layer of x whose input norm h the caller made, and the output's norm by the
    weight `norm` (the next layer's input norm, or the final one; None: no norm), each
    residual add fused with the norm after it where the backend offers it (same bits)."""
    eps = config.rms_norm_eps
    attn = attention_rows(config, ops, layer, h, cos, sin, attend)
    x, h = add_norm(ops, x, ops.linear(attn, layer.o), layer.post_norm, eps)
    if layer.moe is not None:
        mlp = ops.moe_ffn(h, layer.moe)
    else:
        mid = gate_up_silu(ops, h, layer.gate_up, config.intermediate_size)
        mlp = ops.linear(mid, layer.down)
    if norm is None:
        return ops.add(x, mlp), None
    return add_norm(ops, x, mlp, norm, eps)


def gate_up_silu(ops: Ops, h: Array, gate_up: Array, inter: int) -> Array:
    """silu(h . gate^T) * (h . up^T): one fused call where the backend has it."""
    fused = ops.linear_silu(h, gate_up, inter)
    if fused is not None:
        return fused
    gu = ops.linear(h, gate_up)
    return ops.silu_mul(gu[:, :inter], gu[:, inter:])


def add_norm(ops: Ops, a: Array, b: Array, w: Array, eps: float) -> tuple[Array, Array]:
    """(a + b, rms_norm(a + b, w)): one fused call where the backend has it."""
    fused = ops.add_rms_norm(a, b, w, eps)
    if fused is not None:
        return fused
    s = ops.add(a, b)
    return s, ops.rms_norm(s, w, eps)
