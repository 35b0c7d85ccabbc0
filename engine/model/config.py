"""ModelConfig: the fields of a Hugging Face Qwen3 config.json that the decoder needs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.errors import InputError
from engine.model.moe_config import MOE_ARCHITECTURES, moe_fields

SUPPORTED_ARCHITECTURES = ("Qwen3ForCausalLM", *MOE_ARCHITECTURES)


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    eos_token_ids: tuple[int, ...]
    quantization: dict[str, Any] | None = None
    mtp_layers: int = 0
    # mixture of experts (qwen3_moe; engine/model/moe_config.py): 0 experts = dense
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    sparse_layers: tuple[int, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def group_size(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def is_moe(self) -> bool:
        return bool(self.sparse_layers)

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> ModelConfig:
        path = Path(model_dir) / "config.json"
        if not Path(model_dir).is_dir():
            raise InputError(f"{model_dir}: model directory not found")
        if not path.is_file():
            raise InputError(f"{path}: not found (a model directory needs config.json)")
        try:
            raw = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise InputError(f"{path}: expected a JSON object")
        config = cls.from_dict(raw, source=str(path))
        gen_path = Path(model_dir) / "generation_config.json"
        if gen_path.is_file():  # generation stops at its eos ids too, as transformers does
            try:
                eos = json.loads(gen_path.read_text()).get("eos_token_id")
            except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as exc:
                raise InputError(f"{gen_path}: not a valid JSON object ({exc})") from None
            extra = eos if isinstance(eos, list) else [] if eos is None else [eos]
            if not all(isinstance(i, int) for i in extra):
                raise InputError(f"{gen_path}: eos_token_id must be an id or a list of ids")
            ids = tuple(dict.fromkeys([*config.eos_token_ids, *extra]))
            config = replace(config, eos_token_ids=ids)
        return config

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "config.json") -> ModelConfig:
        archs = raw.get("architectures") or []
        if not any(a in SUPPORTED_ARCHITECTURES for a in archs):
            raise InputError(
                f"{source}: architectures {archs} not supported "
                f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
            )

        def need(key: str, kind: type) -> Any:
            if key not in raw:
                raise InputError(f"{source}: missing key '{key}'")
            value = raw[key]
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
                raise InputError(f"{source}: key '{key}' must be {kind.__name__}, got {value!r}")
            return value

        hidden = need("hidden_size", int)
        heads = need("num_attention_heads", int)
        kv_heads = raw.get("num_key_value_heads", heads)
        head_dim = raw.get("head_dim") or hidden // heads
        if heads % kv_heads:
            raise InputError(
                f"{source}: num_attention_heads {heads} is not a multiple of "
                f"num_key_value_heads {kv_heads}"
            )
        if raw.get("rope_scaling"):
            raise InputError(f"{source}: key 'rope_scaling' is not supported (must be null)")
        # transformers 5 writes rope settings only under rope_parameters
        rope = raw.get("rope_parameters") or {}
        if not isinstance(rope, dict):
            raise InputError(f"{source}: key 'rope_parameters' must be an object")
        if rope.get("rope_type", "default") != "default":
            raise InputError(
                f"{source}: rope_parameters.rope_type '{rope['rope_type']}' is not supported"
            )
        theta = raw.get("rope_theta", rope.get("rope_theta", 10000.0))
        layers = need("num_hidden_layers", int)
        eos = raw.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
        return cls(
            vocab_size=need("vocab_size", int),
            hidden_size=hidden,
            intermediate_size=need("intermediate_size", int),
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=int(kv_heads),
            head_dim=int(head_dim),
            rope_theta=float(theta),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            max_position_embeddings=need("max_position_embeddings", int),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            eos_token_ids=eos_ids,
            quantization=raw.get("quantization") or raw.get("quantization_config"),
            mtp_layers=int(raw.get("num_nextn_predict_layers") or 0),
            **moe_fields(raw, source, layers),
            raw=raw,
        )
