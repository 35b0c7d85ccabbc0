"""The Qwen3 decoder as plain functions over an Ops object.

New K/V rows are written to the cache before attention reads them back, so prefill,
decode and verification all attend over the same stored bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.errors import InputError
from engine.model.config import ModelConfig
from engine.model.graph_shape import padded_rows, step_rows
from engine.model.layer import Attend, Layer, decoder_block
from engine.ops.base import Array, KVMemory, KVSegment, Ops


@dataclass
class Segment:
    """Rows of one stream fed in one forward: tokens at positions start..start+n-1."""

    tokens: np.ndarray
    start: int
    pages: list[int]
    logit_rows: np.ndarray  # row indices (within the segment) that need logits
    lane: int = 0  # the stream's lane: where the backend keeps its rows ready for attention


@dataclass
class SegmentOut:
    logits: np.ndarray  # [len(logit_rows), vocab] float32
    hidden: np.ndarray  # final normed hidden state of those rows [k, H]
    taps: dict[int, np.ndarray] = field(default_factory=dict)  # layer -> [n, H] residual
    start: int = 0  # absolute position of the segment's first row


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
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # mtp.* tensors, unbuilt

    def forward(
        self, segments: list[Segment], kv: KVMemory, taps: tuple[int, ...] = ()
    ) -> list[SegmentOut]:
        return forward(self, segments, kv, taps)

    def new_kv(
        self, pages: int, page_rows: int, kind: str, lanes: int = 1, lane_rows: int = 0
    ) -> KVMemory:
        """The backend's KV memory: `pages` pages of `page_rows` rows, and `lanes` lanes of
        up to `lane_rows` rows each (0: as many rows as the pages hold)."""
        c = self.config
        shape = (c.num_layers, pages, page_rows, c.num_kv_heads, c.head_dim)
        return self.ops.new_kv(*shape, kind, lanes, lane_rows or pages * page_rows)


def rope_tables(config: ModelConfig) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin [max_pos, D/2] in float32, angles formed in float32 as Hugging Face does."""
    d = config.head_dim
    inv_freq = (1.0 / (config.rope_theta ** (np.arange(0, d, 2, dtype=np.int64) / d))).astype(
        np.float32
    )
    pos = np.arange(config.max_position_embeddings, dtype=np.float32)
    angles = pos[:, None] * inv_freq[None, :]
    wide = angles.astype(np.float64)
    return np.cos(wide).astype(np.float32), np.sin(wide).astype(np.float32)


def _get(tensors: dict[str, np.ndarray], name: str) -> np.ndarray:
    if name not in tensors:
        raise InputError(f"checkpoint: missing tensor '{name}'")
    return tensors[name]


def build_layer(
    config: ModelConfig,
    tensors: dict[str, np.ndarray],
    p: str,
    ops: Ops,
    sparse: bool | None = None,
) -> Layer:
    """One decoder layer from tensors named `p` + Qwen3's layer names; `sparse`: whether its
    MLP is a mixture of experts (None: whether the tensors hold a router)."""
    from engine.model.moe import build_moe, has_moe

    h, d = config.hidden_size, config.head_dim
    sparse = has_moe(config, tensors, p) if sparse is None else sparse
    shapes = {
        "self_attn.q_proj.weight": (config.num_heads * d, h),
        "self_attn.k_proj.weight": (config.num_kv_heads * d, h),
        "self_attn.v_proj.weight": (config.num_kv_heads * d, h),
        "self_attn.o_proj.weight": (h, config.num_heads * d),
    }
    if not sparse:
        shapes.update(
            {
                "mlp.gate_proj.weight": (config.intermediate_size, h),
                "mlp.up_proj.weight": (config.intermediate_size, h),
                "mlp.down_proj.weight": (h, config.intermediate_size),
            }
        )
    for key, shape in shapes.items():
        if _get(tensors, p + key).shape != shape:
            raise InputError(
                f"checkpoint: tensor '{p + key}' has shape {_get(tensors, p + key).shape}, "
                f"config.json implies {shape}"
            )
    qkv = np.concatenate([_get(tensors, p + f"self_attn.{n}_proj.weight") for n in "qkv"])
    if sparse:
        moe, gate_up, down = build_moe(config, tensors, p, ops), None, None
    else:
        moe, (gate_up, down) = None, _dense_mlp(tensors, p, ops)
    return Layer(
        qkv=ops.prepare_linear(qkv),
        o=ops.prepare_linear(_get(tensors, p + "self_attn.o_proj.weight")),
        q_norm=ops.asarray(_get(tensors, p + "self_attn.q_norm.weight")),
        k_norm=ops.asarray(_get(tensors, p + "self_attn.k_norm.weight")),
        in_norm=ops.asarray(_get(tensors, p + "input_layernorm.weight")),
        post_norm=ops.asarray(_get(tensors, p + "post_attention_layernorm.weight")),
        gate_up=gate_up,
        down=down,
        moe=moe,
    )


def _dense_mlp(tensors: dict[str, np.ndarray], p: str, ops: Ops) -> tuple[Array, Array]:
    gate_up = np.concatenate(
        [_get(tensors, p + "mlp.gate_proj.weight"), _get(tensors, p + "mlp.up_proj.weight")]
    )
    down = _get(tensors, p + "mlp.down_proj.weight")
    return ops.prepare_linear(gate_up), ops.prepare_linear(down)


def next_norm(model: Qwen3, li: int) -> Array:
    """The norm after layer li: the next layer's input norm, or the final norm."""
    return model.layers[li + 1].in_norm if li + 1 < len(model.layers) else model.norm


def build(config: ModelConfig, tensors: dict[str, np.ndarray], ops: Ops) -> Qwen3:
    h = config.hidden_size
    layers = [
        build_layer(config, tensors, f"model.layers.{i}.", ops, i in config.sparse_layers)
        for i in range(config.num_layers)
    ]
    embed = _get(tensors, "model.embed_tokens.weight")
    if embed.shape != (config.vocab_size, h):
        raise InputError(
            f"checkpoint: 'model.embed_tokens.weight' has shape {embed.shape}, "
            f"config.json implies {(config.vocab_size, h)}"
        )
    head = embed if config.tie_word_embeddings else _get(tensors, "lm_head.weight")
    cos, sin = rope_tables(config)
    return Qwen3(
        config=config,
        ops=ops,
        embed=ops.asarray(embed),
        layers=layers,
        norm=ops.asarray(_get(tensors, "model.norm.weight")),
        lm_head=ops.prepare_linear(head),
        cos=cos,
        sin=sin,
        extra={k: v for k, v in tensors.items() if k.startswith("mtp.")},
    )


def _trunk(
    model: Qwen3,
    ids: Array,
    cos: Array,
    sin: Array,
    attend_at: Callable[[int], Attend],
    taps: tuple[int, ...] = (),
) -> tuple[Array, dict[int, Array]]:
    """Embedding, every decoder layer (`attend_at(li)`: layer li's attention) and the final
    norm of the rows `ids`: the final hidden rows, and the residual rows of the tapped layers."""
    cfg, ops = model.config, model.ops
    x = ops.embed(model.embed, ids)
    tapped: dict[int, Array] = {}
    h = ops.rms_norm(x, model.layers[0].in_norm, cfg.rms_norm_eps) if model.layers else None
    for li, layer in enumerate(model.layers):
        x, h = decoder_block(cfg, ops, layer, x, h, cos, sin, attend_at(li), next_norm(model, li))
        if li in taps:
            tapped[li] = x
    final = h if h is not None else ops.rms_norm(x, model.norm, cfg.rms_norm_eps)
    return final, tapped


def _fixed_body(
    model: Qwen3, kv: KVMemory, dev: dict[str, Array], taps: tuple[int, ...] = ()
) -> tuple[Array, ...]:
    """A fixed-shape step over device inputs (graph_step's): logits and final rows of all,
    then the residual rows of each tapped layer."""

    def attend_at(li: int) -> Attend:
        return kv.fixed_attend(li, dev)

    final, tapped = _trunk(model, dev["ids"], dev["cos"], dev["sin"], attend_at, taps)
    picked = final[dev["need"]]  # the rows whose logits are asked for (padded to a tile)
    logits = model.ops.linear(picked, model.lm_head)
    return (logits, final if taps else picked, *(tapped[li] for li in taps))


def step_key(model: Qwen3, rows: int, taps: tuple[int, ...] = (), logit_rows: int = 0) -> tuple:
    """The key of a step's graph in the backend (`ops.run_graph`, `ops.step_graph`);
    logit_rows: its rows of logits (0: one row tile)."""
    return ("step", id(model), rows, logit_rows or model.ops.row_tile, taps)


def graph_step(
    model: Qwen3, segments: list[Segment], kv: KVMemory, taps: tuple[int, ...] = ()
) -> list[SegmentOut] | None:
    """The forward of a step through the backend's captured graphs (`ops.run_graph`), or None
    where it takes none (too many rows, a sparse MLP it cannot take, a KV memory with no
    fixed-shape steps). Shapes: graph_shape.py; padded rows touch no stream's pages; a row's
    bits do not depend on its tile-mates; with taps, every row's hidden and tapped rows come
    back. The body is the eager forward's, so the bits are too."""
    ops, cfg = model.ops, model.config
    tile = ops.row_tile
    total = sum(len(s.tokens) for s in segments)
    rows = step_rows(total, tile, ops.graph_rows)
    if not segments or rows is None:
        return None
    if any(lay.moe is not None and not ops.moe_in_graph(lay.moe) for lay in model.layers):
        return None
    if any(s.start + len(s.tokens) > cfg.max_position_embeddings for s in segments):
        return None  # the eager forward says what is wrong
    placed = kv.fixed_rows(
        [KVSegment(s.lane, s.pages, s.start, len(s.tokens)) for s in segments], rows
    )
    if placed is None:
        return None
    ids = np.zeros(rows, dtype=np.int64)
    pos = np.zeros(rows, dtype=np.int64)
    ids[:total] = np.concatenate([s.tokens for s in segments])
    pos[:total] = np.concatenate([s.start + np.arange(len(s.tokens)) for s in segments])
    inputs = {"ids": ids, "cos": model.cos[pos], "sin": model.sin[pos]}
    if set(inputs) & set(placed):
        raise ValueError(f"graph_step: KV input names {sorted(placed)} clash with the model's")
    need, bounds, a = [], [0], 0
    for s in segments:
        need.extend(a + int(j) for j in np.asarray(s.logit_rows, dtype=np.int64))
        bounds.append(len(need))
        a += len(s.tokens)
    need_at = np.asarray(need, dtype=np.int64)
    inputs["need"] = padded_rows(need_at, tile)
    got = np.arange(len(need))
    take = (got, *(np.arange(total),) * (1 + len(taps))) if taps else got
    key = step_key(model, rows, taps, len(inputs["need"]))
    out = ops.run_graph(kv, key, {**inputs, **placed},
                        lambda owner, dev: _fixed_body(model, owner, dev, taps), take)  # fmt: skip
    if out is None:
        return None
    lg, hid, *tapped = out  # with taps, hid holds every row; without, the rows asked for
    outs, a = [], 0
    for s, lo, hi in zip(segments, bounds[:-1], bounds[1:], strict=True):
        outs.append(
            SegmentOut(
                logits=lg[lo:hi] if hi > lo else None,
                hidden=hid[need_at[lo:hi]] if taps else hid[lo:hi],
                taps={li: t[a : a + len(s.tokens)] for li, t in zip(taps, tapped, strict=True)},
                start=s.start,
            )
        )
        a += len(s.tokens)
    return outs


def forward(
    model: Qwen3, segments: list[Segment], kv: KVMemory, taps: tuple[int, ...] = ()
) -> list[SegmentOut]:
    cfg, ops = model.config, model.ops
    fused = graph_step(model, segments, kv, taps)
    if fused is not None:
        return fused
    ids = np.concatenate([s.tokens for s in segments]).astype(np.int64)
    positions = np.concatenate([s.start + np.arange(len(s.tokens)) for s in segments])
    if positions.max(initial=0) >= cfg.max_position_embeddings:
        raise InputError(
            f"position {positions.max()} is past max_position_embeddings "
            f"{cfg.max_position_embeddings}"
        )
    bounds = np.cumsum([0] + [len(s.tokens) for s in segments])
    rows = [KVSegment(s.lane, s.pages, s.start, len(s.tokens)) for s in segments]
    cos, sin = ops.asarray(model.cos[positions]), ops.asarray(model.sin[positions])

    def attend_at(li: int) -> Attend:
        return lambda q, k, v: kv.store_attend(li, rows, positions, q, k, v)

    final, tapped = _trunk(model, ids, cos, sin, attend_at, taps)
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
                start=seg.start,
            )
        )
    return results
