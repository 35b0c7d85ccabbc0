"""The mixture-of-experts keys of a Hugging Face `qwen3_moe` config.json.

Defaults are transformers' (Qwen3MoeConfig); transformers 5 writes the expert count as
`num_local_experts`, earlier versions and mlx-lm as `num_experts`. A layer is sparse iff it
is not in `mlp_only_layers`, `num_experts > 0` and `(i + 1) % decoder_sparse_step == 0`,
the rule of transformers' Qwen3MoeDecoderLayer. `router_aux_loss_coef` and
`output_router_logits` only matter in training and are ignored.
"""

from __future__ import annotations

from typing import Any

from engine.errors import InputError

MOE_ARCHITECTURES = ("Qwen3MoeForCausalLM",)


def _int(raw: dict[str, Any], key: str, default: int, source: str, low: int) -> int:
    value = raw.get(key, default)
    if value is None:
        value = default
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(f"{source}: key '{key}' must be int, got {value!r}")
    if value < low:
        raise InputError(f"{source}: key '{key}' must be >= {low}, got {value}")
    return value


def sparse_layers(num_layers: int, experts: int, step: int, mlp_only: list[int]) -> tuple[int, ...]:
    if experts <= 0:
        return ()
    return tuple(i for i in range(num_layers) if i not in mlp_only and (i + 1) % step == 0)


def moe_fields(raw: dict[str, Any], source: str, num_layers: int) -> dict[str, Any]:
    """ModelConfig's MoE fields; {} for a dense architecture."""
    if not any(a in MOE_ARCHITECTURES for a in raw.get("architectures") or []):
        return {}
    both = "num_experts" in raw and "num_local_experts" in raw
    if both and raw["num_experts"] != raw["num_local_experts"]:
        raise InputError(
            f"{source}: keys 'num_experts' ({raw['num_experts']!r}) and "
            f"'num_local_experts' ({raw['num_local_experts']!r}) disagree"
        )
    key = "num_experts" if "num_experts" in raw else "num_local_experts"
    experts = _int(raw, key, 128, source, 0)
    top_k = _int(raw, "num_experts_per_tok", 8, source, 1 if experts else 0)
    if experts and top_k > experts:
        raise InputError(
            f"{source}: key 'num_experts_per_tok' ({top_k}) is more than {key} ({experts})"
        )
    inter = _int(raw, "moe_intermediate_size", 768, source, 1 if experts else 0)
    step = _int(raw, "decoder_sparse_step", 1, source, 1)
    mlp_only = raw.get("mlp_only_layers") or []
    if not isinstance(mlp_only, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in mlp_only
    ):
        raise InputError(f"{source}: key 'mlp_only_layers' must be a list of layer indices")
    norm = raw.get("norm_topk_prob", False)
    if not isinstance(norm, bool):
        raise InputError(f"{source}: key 'norm_topk_prob' must be true or false, got {norm!r}")
    return {
        "num_experts": experts,
        "num_experts_per_tok": top_k,
        "moe_intermediate_size": inter,
        "norm_topk_prob": norm,
        "sparse_layers": sparse_layers(num_layers, experts, step, mlp_only),
    }
