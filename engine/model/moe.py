"""A sparse MLP's tensors from a checkpoint, in any of the layouts a Qwen3-MoE comes in.

* Hugging Face (and transformers 5's save_pretrained): `mlp.gate.weight` [E, H] and
  `mlp.experts.{e}.{gate,up,down}_proj.weight` ([I, H], [I, H], [H, I]);
* transformers 5's in-memory fused parameters: `mlp.experts.gate_up_proj` [E, 2I, H] and
  `mlp.experts.down_proj` [E, H, I];
* mlx-lm's conversion: `mlp.switch_mlp.{gate,up,down}_proj.weight` stacked on a leading
  expert axis (affine-quantized ones already dequantized by engine.model.weights).
"""

from __future__ import annotations

import numpy as np

from engine.errors import InputError
from engine.model.config import ModelConfig
from engine.ops.base import Ops
from engine.ops.moe import MoeWeights


def _shaped(tensors: dict[str, np.ndarray], name: str, shape: tuple[int, ...]) -> np.ndarray:
    if name not in tensors:
        raise InputError(f"checkpoint: missing tensor '{name}'")
    if tensors[name].shape != shape:
        raise InputError(
            f"checkpoint: tensor '{name}' has shape {tensors[name].shape}, "
            f"config.json implies {shape}"
        )
    return tensors[name]


def expert_tensors(
    config: ModelConfig, tensors: dict[str, np.ndarray], p: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """gate [E, I, H], up [E, I, H], down [E, H, I] of the sparse MLP under prefix `p`."""
    e, h, i = config.num_experts, config.hidden_size, config.moe_intermediate_size
    if p + "mlp.switch_mlp.gate_proj.weight" in tensors:
        q = p + "mlp.switch_mlp."
        return (
            _shaped(tensors, q + "gate_proj.weight", (e, i, h)),
            _shaped(tensors, q + "up_proj.weight", (e, i, h)),
            _shaped(tensors, q + "down_proj.weight", (e, h, i)),
        )
    if p + "mlp.experts.gate_up_proj" in tensors:
        gu = _shaped(tensors, p + "mlp.experts.gate_up_proj", (e, 2 * i, h))
        return gu[:, :i], gu[:, i:], _shaped(tensors, p + "mlp.experts.down_proj", (e, h, i))
    q = p + "mlp.experts."
    shapes = {"gate_proj": (i, h), "up_proj": (i, h), "down_proj": (h, i)}
    parts = {
        n: np.stack([_shaped(tensors, f"{q}{x}.{n}.weight", s) for x in range(e)])
        for n, s in shapes.items()
    }
    return parts["gate_proj"], parts["up_proj"], parts["down_proj"]


def build_moe(config: ModelConfig, tensors: dict[str, np.ndarray], p: str, ops: Ops) -> MoeWeights:
    router = _shaped(tensors, p + "mlp.gate.weight", (config.num_experts, config.hidden_size))
    gate, up, down = expert_tensors(config, tensors, p)
    return MoeWeights(
        router=ops.prepare_linear(router),
        gate_up=[ops.prepare_linear(np.concatenate([g, u])) for g, u in zip(gate, up, strict=True)],
        down=[ops.prepare_linear(d) for d in down],
        top_k=config.num_experts_per_tok,
        norm_topk_prob=config.norm_topk_prob,
        inter=config.moe_intermediate_size,
    )


def has_moe(config: ModelConfig, tensors: dict[str, np.ndarray], p: str) -> bool:
    """Whether the layer under `p` (an MTP layer, say) carries a sparse MLP."""
    return config.num_experts > 0 and p + "mlp.gate.weight" in tensors
