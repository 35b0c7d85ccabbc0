"""Random Qwen3 configs and weights built in memory, for host tests of many shapes."""

from __future__ import annotations

import numpy as np

from engine.model.config import ModelConfig


def random_config(
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int = 32,
    inter: int = 96,
    vocab: int = 320,
    tied: bool = True,
    max_pos: int = 4096,
    experts: int = 0,
    top_k: int = 2,
    moe_inter: int = 32,
    mlp_only: tuple[int, ...] = (),
    norm_topk: bool = True,
) -> ModelConfig:
    """A dense Qwen3 config, or with `experts` > 0 a Qwen3-MoE one (every layer sparse
    except `mlp_only`)."""
    moe = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "num_experts": experts,
        "num_experts_per_tok": top_k,
        "moe_intermediate_size": moe_inter,
        "mlp_only_layers": list(mlp_only),
        "norm_topk_prob": norm_topk,
        "decoder_sparse_step": 1,
    }
    return ModelConfig.from_dict(
        {
            **(moe if experts else {}),
            "architectures": moe["architectures"] if experts else ["Qwen3ForCausalLM"],
            "hidden_size": hidden,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads,
            "head_dim": head_dim,
            "intermediate_size": inter,
            "vocab_size": vocab,
            "max_position_embeddings": max_pos,
            "rope_theta": 10000.0,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": tied,
            "eos_token_id": vocab - 1,
        }
    )


def random_tensors(cfg: ModelConfig, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    h, d = cfg.hidden_size, cfg.head_dim

    def w(*shape: int, std: float = 0.2) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    t = {"model.embed_tokens.weight": w(cfg.vocab_size, h, std=0.1), "model.norm.weight": norm(h)}
    if not cfg.tie_word_embeddings:
        t["lm_head.weight"] = w(cfg.vocab_size, h, std=0.2)
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        t[p + "self_attn.q_proj.weight"] = w(cfg.num_heads * d, h)
        t[p + "self_attn.k_proj.weight"] = w(cfg.num_kv_heads * d, h)
        t[p + "self_attn.v_proj.weight"] = w(cfg.num_kv_heads * d, h)
        t[p + "self_attn.o_proj.weight"] = w(h, cfg.num_heads * d)
        t[p + "self_attn.q_norm.weight"] = norm(d)
        t[p + "self_attn.k_norm.weight"] = norm(d)
        t[p + "input_layernorm.weight"] = norm(h)
        t[p + "post_attention_layernorm.weight"] = norm(h)
        if i in cfg.sparse_layers:
            t.update(random_experts(cfg, p, rng))
            continue
        t[p + "mlp.gate_proj.weight"] = w(cfg.intermediate_size, h)
        t[p + "mlp.up_proj.weight"] = w(cfg.intermediate_size, h)
        t[p + "mlp.down_proj.weight"] = w(h, cfg.intermediate_size)
    return t


def random_experts(cfg: ModelConfig, p: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A sparse MLP's tensors in Hugging Face's per-expert names."""
    h, i = cfg.hidden_size, cfg.moe_intermediate_size
    t = {
        p + "mlp.gate.weight": (rng.standard_normal((cfg.num_experts, h)) * 0.5).astype(np.float32)
    }
    for e in range(cfg.num_experts):
        q = f"{p}mlp.experts.{e}."
        t[q + "gate_proj.weight"] = (rng.standard_normal((i, h)) * 0.2).astype(np.float32)
        t[q + "up_proj.weight"] = (rng.standard_normal((i, h)) * 0.2).astype(np.float32)
        t[q + "down_proj.weight"] = (rng.standard_normal((h, i)) * 0.2).astype(np.float32)
    return t


def random_mtp_tensors(cfg: ModelConfig, seed: int = 1) -> dict[str, np.ndarray]:
    """`mtp.*` tensors (docs/drafters.md) with the target's shapes."""
    rng = np.random.default_rng(seed)
    h = cfg.hidden_size
    layer = random_tensors(cfg, seed)
    t = {
        "mtp." + k.removeprefix("model."): v
        for k, v in layer.items()
        if k.startswith("model.layers.0.")
    }
    t["mtp.fc.weight"] = (rng.standard_normal((h, 2 * h)) * 0.1).astype(np.float32)
    for name in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        t[f"mtp.{name}.weight"] = np.ones(h, dtype=np.float32)
    return t


def write_random_block_drafter(
    out_dir: str, cfg: ModelConfig, target_layers: tuple[int, ...] = (0, 1), block: int = 6
) -> None:
    """A block drafter directory (docs/drafters.md) with random weights."""
    import json
    from pathlib import Path

    from engine.model.safetensors_file import save

    rng = np.random.default_rng(7)
    h = cfg.hidden_size
    layer = random_tensors(cfg, 3)
    t = {k.removeprefix("model."): v for k, v in layer.items() if k.startswith("model.layers.0.")}
    t["fc.weight"] = (rng.standard_normal((h, len(target_layers) * h)) * 0.1).astype(np.float32)
    t["hidden_norm.weight"] = np.ones(h, dtype=np.float32)
    t["norm.weight"] = np.ones(h, dtype=np.float32)
    t["mask_embedding"] = (rng.standard_normal(h) * 0.1).astype(np.float32)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    save(Path(out_dir) / "model.safetensors", t)
    config = {
        "architectures": ["ExactBlockDrafter"],
        "model_type": "exact_block_drafter",
        "hidden_size": h,
        "num_hidden_layers": 1,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "intermediate_size": cfg.intermediate_size,
        "target_layers": list(target_layers),
        "block_size": block,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
    }
    (Path(out_dir) / "config.json").write_text(json.dumps(config))
