"""`--model synthetic:<shape>[@seed][,layers=N]`: random weights of a real Qwen3 shape, made
from a seed; `layers=N` keeps the first N decoder layers (a real-shaped MoE layer holds 128
experts, so the whole Qwen3-30B-A3B would not fit a runner as float32).

A GPU runner needs no download: the first use writes an ordinary model directory
(config.json, a byte-level tokenizer.json, bf16 model.safetensors) under the cache folder
($ENGINE_SYNTHETIC_DIR, else ~/.cache/exact-engine/synthetic) and every later step loads it
through the same path as a real checkpoint. Each tensor's values depend only on the seed and
the tensor's name, so the same spec gives the same bytes on every machine.
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from engine.errors import InputError
from engine.model import safetensors_file

PREFIX = "synthetic:"
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 256, 257, 258
EOT_ID, IM_END_ID = 256, 258
FORMAT = 1  # bump when the bytes written for a spec change

# shape name -> (hidden, intermediate, layers, heads, kv heads, head_dim, vocab, max positions)
SHAPES: dict[str, tuple[int, int, int, int, int, int, int, int]] = {
    "qwen3-0.6b": (1024, 3072, 28, 16, 8, 128, 151936, 40960),
    "qwen3-1.7b": (2048, 6144, 28, 16, 8, 128, 151936, 40960),
    "tiny": (64, 128, 2, 4, 2, 32, 512, 2048),  # for tests on the CPU
    "qwen3-30b-a3b": (2048, 6144, 48, 32, 4, 128, 151936, 40960),
    "tiny-moe": (64, 128, 2, 4, 2, 32, 512, 2048),  # for tests on the CPU
}
# MoE shapes -> (experts, experts per token, moe_intermediate_size, norm_topk_prob); every
# layer sparse, as in Qwen3-30B-A3B (decoder_sparse_step 1, no mlp_only_layers)
MOE: dict[str, tuple[int, int, int, bool]] = {
    "qwen3-30b-a3b": (128, 8, 768, True),
    "tiny-moe": (8, 3, 32, True),
}
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def is_synthetic(spec: str | os.PathLike) -> bool:
    return str(spec).startswith(PREFIX)


def parse(spec: str) -> tuple[str, int, int | None]:
    """'synthetic:qwen3-30b-a3b@7,layers=4' -> ('qwen3-30b-a3b', 7, 4); the seed defaults to
    0, the layer count to the shape's own (None)."""
    body, *options = spec[len(PREFIX) :].split(",")
    name, _, seed_text = body.partition("@")
    if name not in SHAPES:
        raise InputError(
            f"--model {spec}: unknown synthetic shape '{name}' (choose from {', '.join(SHAPES)})"
        )
    try:
        seed = int(seed_text) if seed_text else 0
    except ValueError:
        raise InputError(f"--model {spec}: seed '{seed_text}' is not an integer") from None
    if seed < 0:
        raise InputError(f"--model {spec}: seed must be >= 0")
    layers = None
    for option in options:
        key, _, value = option.partition("=")
        if key != "layers":
            raise InputError(f"--model {spec}: unknown option '{key}' (only layers=N)")
        if not value.isdigit() or not 1 <= int(value) <= SHAPES[name][2]:
            raise InputError(
                f"--model {spec}: layers must be an integer in 1..{SHAPES[name][2]}, got '{value}'"
            )
        layers = int(value)
    return name, seed, layers


def cache_root() -> Path:
    env = os.environ.get("ENGINE_SYNTHETIC_DIR")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "exact-engine" / "synthetic"


def resolve(spec: str | os.PathLike) -> Path:
    """A model directory for `spec`: itself, or the synthetic model's (written on first use)."""
    if not is_synthetic(spec):
        return Path(spec)
    name, seed, layers = parse(str(spec))
    cut = "" if layers is None else f"-L{layers}"
    out = cache_root() / f"{name}{cut}-seed{seed}-v{FORMAT}"
    if (out / "model.safetensors").is_file():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write_model(tmp, name, seed, layers)
    try:
        tmp.rename(out)
    except OSError:  # another process finished first: its directory has the same bytes
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def model_config(name: str, layers: int | None = None) -> dict[str, Any]:
    h, inter, full, heads, kv, d, vocab, max_pos = SHAPES[name]
    moe = {}
    if name in MOE:
        experts, top_k, moe_inter, norm = MOE[name]
        moe = {
            "architectures": ["Qwen3MoeForCausalLM"],
            "model_type": "qwen3_moe",
            "num_experts": experts,
            "num_experts_per_tok": top_k,
            "moe_intermediate_size": moe_inter,
            "norm_topk_prob": norm,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
        }
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "bos_token_id": EOT_ID,
        "eos_token_id": IM_END_ID,
        "head_dim": d,
        "hidden_act": "silu",
        "hidden_size": h,
        "intermediate_size": inter,
        "max_position_embeddings": max_pos,
        "model_type": "qwen3",
        "num_attention_heads": heads,
        "num_hidden_layers": full if layers is None else layers,
        "num_key_value_heads": kv,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "vocab_size": vocab,
        **moe,
    }


def tensor_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    h, d, inter = config["hidden_size"], config["head_dim"], config["intermediate_size"]
    nq, nkv = config["num_attention_heads"], config["num_key_value_heads"]
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (config["vocab_size"], h),
        "model.norm.weight": (h,),
    }
    experts = config.get("num_experts", 0)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        if experts:
            e_inter = config["moe_intermediate_size"]
            shapes[p + "mlp.gate.weight"] = (experts, h)
            for e in range(experts):
                q = f"{p}mlp.experts.{e}."
                shapes[q + "gate_proj.weight"] = (e_inter, h)
                shapes[q + "up_proj.weight"] = (e_inter, h)
                shapes[q + "down_proj.weight"] = (h, e_inter)
        shapes.update(
            {
                p + "input_layernorm.weight": (h,),
                p + "post_attention_layernorm.weight": (h,),
                p + "self_attn.q_norm.weight": (d,),
                p + "self_attn.k_norm.weight": (d,),
                p + "self_attn.q_proj.weight": (nq * d, h),
                p + "self_attn.k_proj.weight": (nkv * d, h),
                p + "self_attn.v_proj.weight": (nkv * d, h),
                p + "self_attn.o_proj.weight": (h, nq * d),
            }
        )
        if not experts:
            shapes[p + "mlp.gate_proj.weight"] = (inter, h)
            shapes[p + "mlp.up_proj.weight"] = (inter, h)
            shapes[p + "mlp.down_proj.weight"] = (h, inter)
    return shapes


def make_tensor(name: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """bf16 values from (seed, name) alone: norms near 1, the embedding N(0, 0.05), other
    matrices N(0, 1/fan_in), strong enough that greedy decoding does not just repeat the
    last token (as small inits with a tied head do)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    x = rng.standard_normal(shape, dtype=np.float32)
    if len(shape) == 1:
        x = np.float32(1.0) + x * np.float32(0.05)
    elif name == "model.embed_tokens.weight":
        x *= np.float32(0.05)
    else:
        x *= np.float32(1.0 / np.sqrt(shape[1]))
    return x.astype(ml_dtypes.bfloat16)


def write_model(out: Path, name: str, seed: int, layers: int | None = None) -> None:
    config = model_config(name, layers)
    tensors = {k: make_tensor(k, s, seed) for k, s in tensor_shapes(config).items()}
    safetensors_file.save(out / "model.safetensors", tensors, {"format": "pt"})
    _write_json(out / "config.json", config)
    _write_json(
        out / "generation_config.json", {"eos_token_id": [IM_END_ID, EOT_ID], "do_sample": False}
    )
    _write_json(out / "tokenizer.json", byte_tokenizer())
    _write_json(
        out / "tokenizer_config.json",
        {"chat_template": CHAT_TEMPLATE, "eos_token": "<|im_end|>", "bos_token": None},
    )


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map (the ByteLevel alphabet)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 256))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def byte_tokenizer() -> dict[str, Any]:
    """tokenizer.json of a byte-level BPE without merges: token id = byte value."""
    vocab = {ch: b for b, ch in _bytes_to_unicode().items()}
    added = [
        {
            "id": 256 + i,
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, t in enumerate(SPECIAL_TOKENS)
    ]
    byte_level = {"add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", **byte_level},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [],
        },
    }


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    path.write_text(json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
