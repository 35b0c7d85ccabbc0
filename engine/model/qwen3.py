"""The Qwen3 decoder as plain functions over an Ops object.

New K/V rows are written to the cache before attention reads them back, so prefill,
decode and verification all attend over the same stored bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from engine.errors import InputError
from engine.kv.store import KVStore
from engine.model.config import ModelConfig
from engine.ops.base import Array, Ops


@dataclass
class Segment:
    """Rows of one stream fed in one forward: tokens at positions start..start+n-1."""

    tokens: np.ndarray
    start: int
    pages: list[int]
    logit_rows: np.ndarray  # row indices (within the segment) that need logits


@dataclass
class SegmentOut:
    logits: np.ndarray  # [len(logit_rows), vocab] float32
    hidden: np.ndarray  # final normed hidden state of those rows [k, H]
    taps: dict[int, np.ndarray] = field(default_factory=dict)  # layer -> [n, H] residual


class KVCache(Protocol):
    def write(self, layer: int, pages: list[int], start: int, k: Any, v: Any) -> None: ...
    def read(self, layer: int, pages: list[int], length: int) -> tuple[Any, Any]: ...


@dataclass
class Layer:
    qkv: Array
    o: Array
    q_norm: Array
    k_norm: Array
    in_norm: Array
    post_norm: Array
    gate_up: Array
    down: Array


@dataclass
class Qwen3:
    config: ModelConfig
    ops: Ops
    embed: Array
    layers: list[Layer]
    norm: Array
    lm_head: Array
    cos: np.ndarray
    sin: np.ndarray

    def forward(
        self, segments: list[Segment], kv: KVCache, taps: tuple[int, ...] = ()
    ) -> list[SegmentOut]:
        return forward(self, segments, kv, taps)

    def new_kv(self, pages: int, page_rows: int, kind: str) -> KVStore:
        c = self.config
        return KVStore(c.num_layers, pages, page_rows, c.num_kv_heads, c.head_dim, kind)


def rope_tables(config: ModelConfig) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin [max_pos, D/2] in float32, angles formed in float32 as Hugging Face does."""
    d = config.head_dim
    inv_freq = (1.0 / (config.rope_theta ** (np.arange(0, d, 2, dtype=np.int64) / d))).astype(
        np.float32
    )
    pos = np.arange(config.max_position_embeddings, dtype=np.float32)
    angles = pos[:, None] * inv_freq[None, :]
    return (
        np.cos(angles.astype(np.float64)).astype(np.float32),
        np.sin(angles.astype(np.float64)).astype(np.float32),
    )


def build(config: ModelConfig, tensors: dict[str, np.ndarray], ops: Ops) -> Qwen3:
    def get(name: str) -> np.ndarray:
        if name not in tensors:
            raise InputError(f"checkpoint: missing tensor '{name}'")
        return tensors[name]

    h, d = config.hidden_size, config.head_dim
    shapes = {
        "self_attn.q_proj.weight": (config.num_heads * d, h),
        "self_attn.k_proj.weight": (config.num_kv_heads * d, h),
        "self_attn.v_proj.weight": (config.num_kv_heads * d, h),
        "self_attn.o_proj.weight": (h, config.num_heads * d),
        "mlp.gate_proj.weight": (config.intermediate_size, h),
        "mlp.up_proj.weight": (config.intermediate_size, h),
        "mlp.down_proj.weight": (h, config.intermediate_size),
    }
    layers = []
    for i in range(config.num_layers):
        p = f"model.layers.{i}."
        for key, shape in shapes.items():
            if get(p + key).shape != shape:
                raise InputError(
                    f"checkpoint: tensor '{p + key}' has shape {get(p + key).shape}, "
                    f"config.json implies {shape}"
                )
        qkv = np.concatenate(
            [get(p + f"self_attn.{n}_proj.weight") for n in ("q", "k", "v")], axis=0
        )
        gate_up = np.concatenate([get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")])
        layers.append(
            Layer(
                qkv=ops.prepare_linear(qkv),
                o=ops.prepare_linear(get(p + "self_attn.o_proj.weight")),
                q_norm=ops.asarray(get(p + "self_attn.q_norm.weight")),
                k_norm=ops.asarray(get(p + "self_attn.k_norm.weight")),
                in_norm=ops.asarray(get(p + "input_layernorm.weight")),
                post_norm=ops.asarray(get(p + "post_attention_layernorm.weight")),
                gate_up=ops.prepare_linear(gate_up),
                down=ops.prepare_linear(get(p + "mlp.down_proj.weight")),
            )
        )
    embed = get("model.embed_tokens.weight")
    if embed.shape != (config.vocab_size, h):
        raise InputError(
            f"checkpoint: 'model.embed_tokens.weight' has shape {embed.shape}, "
            f"config.json implies {(config.vocab_size, h)}"
        )
    if config.tie_word_embeddings or "lm_head.weight" not in tensors:
        head = embed
    else:
        head = tensors["lm_head.weight"]
    cos, sin = rope_tables(config)
    return Qwen3(
        config=config,
        ops=ops,
        embed=ops.asarray(embed),
        layers=layers,
        norm=ops.asarray(get("model.norm.weight")),
        lm_head=ops.prepare_linear(head),
        cos=cos,
        sin=sin,
    )


def forward(
    model: Qwen3, segments: list[Segment], kv: KVCache, taps: tuple[int, ...] = ()
) -> list[SegmentOut]:
    cfg, ops = model.config, model.ops
    hq, hkv, d, eps = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.rms_norm_eps
    ids = np.concatenate([s.tokens for s in segments]).astype(np.int64)
    positions = np.concatenate([s.start + np.arange(len(s.tokens)) for s in segments])
    if positions.max(initial=0) >= cfg.max_position_embeddings:
        raise InputError(
            f"position {positions.max()} is past max_position_embeddings "
            f"{cfg.max_position_embeddings}"
        )
    bounds = np.cumsum([0] + [len(s.tokens) for s in segments])
    cos, sin = ops.asarray(model.cos[positions]), ops.asarray(model.sin[positions])
    n = len(ids)
    x = ops.embed(model.embed, ids)
    tapped: dict[int, Array] = {}
    for li, layer in enumerate(model.layers):
        h = ops.rms_norm(x, layer.in_norm, eps)
        qkv = ops.linear(h, layer.qkv)
        q = qkv[:, : hq * d].reshape(n, hq, d)
        k = qkv[:, hq * d : (hq + hkv) * d].reshape(n, hkv, d)
        v = qkv[:, (hq + hkv) * d :].reshape(n, hkv, d)
        q = ops.rope(ops.rms_norm(q, layer.q_norm, eps), cos, sin)
        k = ops.rope(ops.rms_norm(k, layer.k_norm, eps), cos, sin)
        outs = []
        for si, seg in enumerate(segments):
            a, b = int(bounds[si]), int(bounds[si + 1])
            kv.write(li, seg.pages, seg.start, ops.to_numpy(k[a:b]), ops.to_numpy(v[a:b]))
            keys, values = kv.read(li, seg.pages, seg.start + (b - a))
            outs.append(
                ops.attention(q[a:b], ops.asarray(keys), ops.asarray(values), positions[a:b])
            )
        attn = ops.concat_rows(outs).reshape(n, hq * d)
        x = ops.add(x, ops.linear(attn, layer.o))
        h = ops.rms_norm(x, layer.post_norm, eps)
        gu = ops.linear(h, layer.gate_up)
        inter = cfg.intermediate_size
        x = ops.add(x, ops.linear(ops.silu_mul(gu[:, :inter], gu[:, inter:]), layer.down))
        if li in taps:
            tapped[li] = x
    final = ops.rms_norm(x, model.norm, eps)
    results = []
    for si, seg in enumerate(segments):
        rows = int(bounds[si]) + np.asarray(seg.logit_rows, dtype=np.int64)
        hid = ops.take_rows(final, rows)
        results.append(
            SegmentOut(
                logits=ops.to_numpy(ops.linear(hid, model.lm_head)) if len(rows) else None,
                hidden=ops.to_numpy(hid),
                taps={
                    layer: ops.to_numpy(t[int(bounds[si]) : int(bounds[si + 1])])
                    for layer, t in tapped.items()
                },
            )
        )
    return results
