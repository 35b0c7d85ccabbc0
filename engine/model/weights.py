"""Load a checkpoint's tensors (one file or shards; dense or MLX-quantized) as float32."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import InputError
from engine.model import safetensors_file
from engine.model.config import ModelConfig


def checkpoint_files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise InputError(f"{index}: expected a JSON object with a 'weight_map' key") from None
        files = sorted({model_dir / name for name in weight_map.values()})
        missing = [f for f in files if not f.is_file()]
        if missing:
            raise InputError(f"{index}: shard {missing[0].name} not found")
        return files
    single = model_dir / "model.safetensors"
    if single.is_file():
        return [single]
    shards = sorted(model_dir.glob("model-*.safetensors"))
    if shards:
        return shards
    raise InputError(f"{model_dir}: no model.safetensors, index or model-*.safetensors shards")


def _quant_params(quant: dict[str, Any], prefix: str) -> tuple[int, int] | None:
    override = quant.get(prefix)
    if override is False:
        return None
    spec = override if isinstance(override, dict) else quant
    try:
        return int(spec["group_size"]), int(spec["bits"])
    except (KeyError, TypeError, ValueError):
        raise InputError(
            f"config.json: 'quantization' for '{prefix}' needs integer group_size and bits"
        ) from None


def load_tensors(model_dir: str | Path, config: ModelConfig) -> dict[str, np.ndarray]:
    """Every tensor of the checkpoint as float32, MLX affine weights dequantized."""
    model_dir = Path(model_dir)
    raw: dict[str, np.ndarray] = {}
    for path in checkpoint_files(model_dir):
        raw.update(safetensors_file.load(path))
    out: dict[str, np.ndarray] = {}
    quant = config.quantization or {}
    if quant.get("mode", "affine") != "affine":
        raise InputError(
            f"{model_dir}/config.json: quantization mode '{quant['mode']}' is not supported "
            "(only MLX 'affine')"
        )
    for name, arr in raw.items():
        if name.endswith((".scales", ".biases")):
            continue
        prefix = name.removesuffix(".weight")
        if name.endswith(".weight") and f"{prefix}.scales" in raw:
            params = _quant_params(quant, prefix) if quant else None
            if params is None:
                raise InputError(
                    f"{model_dir}: tensor '{name}' is quantized but config.json has no "
                    "'quantization' key with group_size and bits"
                )
            from engine.model.mlx_quant import dequantize

            group_size, bits = params
            try:
                out[name] = dequantize(
                    arr, raw[f"{prefix}.scales"], raw[f"{prefix}.biases"], group_size, bits
                ).astype(np.float32)
            except (ValueError, KeyError) as exc:
                raise InputError(f"{model_dir}: cannot dequantize '{name}' ({exc})") from None
        else:
            if arr.dtype.kind not in "fV" and arr.dtype.name not in ("bfloat16",):
                raise InputError(f"{model_dir}: tensor '{name}' has dtype {arr.dtype}")
            out[name] = arr.astype(np.float32)
    return out
