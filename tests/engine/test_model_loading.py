"""Loading real checkpoints: config.json, safetensors (bf16/fp16/f32, sharded), MLX affine
quantized weights, the tokenizer and chat template; bad input is a one-line InputError."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from engine.errors import InputError
from engine.model.config import ModelConfig
from engine.model.loader import load_model
from engine.model.mlx_quant import quantize
from engine.model.safetensors_file import save
from engine.model.tokenizer import Tokenizer
from engine.model.weights import load_tensors
from tests.engine.randmodel import random_config, random_tensors

TINY = Path(__file__).parents[2] / "fixtures" / "models" / "tiny-qwen3"
TINY_4BIT = TINY.parent / "tiny-qwen3-4bit"


def write_model(path: Path, cfg_overrides: dict | None = None, dtype=np.float32, **shape):
    cfg = random_config(**shape)
    raw = dict(cfg.raw, **(cfg_overrides or {}))
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(raw))
    tensors = {k: v.astype(dtype) for k, v in random_tensors(cfg).items()}
    save(path / "model.safetensors", tensors)
    return cfg, tensors


def test_fixture_config():
    cfg = ModelConfig.from_dir(TINY)
    assert cfg.head_dim == 64 != cfg.hidden_size // cfg.num_heads
    assert cfg.group_size == 2 and cfg.tie_word_embeddings
    assert cfg.vocab_size > Tokenizer(TINY).vocab_size


@pytest.mark.parametrize("key", ["hidden_size", "vocab_size", "num_hidden_layers"])
def test_missing_config_key_names_it(tmp_path, key):
    write_model(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    del raw[key]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(InputError, match=f"missing key '{key}'"):
        ModelConfig.from_dir(tmp_path)


def test_unsupported_architecture_is_named(tmp_path):
    write_model(tmp_path, {"architectures": ["LlamaForCausalLM"]})
    with pytest.raises(InputError, match="LlamaForCausalLM"):
        ModelConfig.from_dir(tmp_path)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_dtypes_load_exactly(tmp_path, dtype):
    cfg, tensors = write_model(tmp_path, dtype=dtype)
    loaded = load_tensors(tmp_path, ModelConfig.from_dir(tmp_path))
    for name, value in tensors.items():
        assert loaded[name].dtype == np.float32
        assert np.array_equal(loaded[name], value.astype(np.float32)), name


def test_sharded_checkpoint_with_index(tmp_path):
    cfg, tensors = write_model(tmp_path / "one")
    shard = tmp_path / "sharded"
    shard.mkdir()
    shutil.copy(tmp_path / "one" / "config.json", shard)
    names = sorted(tensors)
    halves = [names[: len(names) // 2], names[len(names) // 2 :]]
    weight_map = {}
    for i, part in enumerate(halves):
        fname = f"model-{i + 1:05d}-of-00002.safetensors"
        save(shard / fname, {n: tensors[n] for n in part})
        weight_map.update({n: fname for n in part})
    (shard / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    a = load_model(tmp_path / "one")
    b = load_model(shard)
    assert np.array_equal(a.lm_head, b.lm_head)
    assert all(np.array_equal(x.qkv, y.qkv) for x, y in zip(a.layers, b.layers, strict=True))


def test_untied_head_and_head_dim_and_gqa3(tmp_path):
    write_model(tmp_path, hidden=48, heads=6, kv_heads=2, head_dim=24, tied=False)
    model = load_model(tmp_path)
    assert model.config.group_size == 3
    assert model.lm_head.shape == (48, model.config.vocab_size)


def test_corrupt_safetensors_is_a_clear_error(tmp_path):
    shutil.copytree(TINY, tmp_path / "m")
    data = (tmp_path / "m" / "model.safetensors").read_bytes()
    (tmp_path / "m" / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="model.safetensors"):
        load_model(tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").write_bytes(b"\x07")
    with pytest.raises(InputError, match="corrupt"):
        load_model(tmp_path / "m")


def test_missing_tensor_is_named(tmp_path):
    cfg, tensors = write_model(tmp_path)
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save(tmp_path / "model.safetensors", tensors)
    with pytest.raises(InputError, match="model.layers.1.mlp.up_proj.weight"):
        load_model(tmp_path)


def test_mlx_4bit_fixture_matches_its_bf16_twin_closely():
    q = load_tensors(TINY_4BIT, ModelConfig.from_dir(TINY_4BIT))
    d = load_tensors(TINY, ModelConfig.from_dir(TINY))
    w = "model.layers.0.mlp.down_proj.weight"
    assert q[w].shape == d[w].shape
    err = np.abs(q[w] - d[w]).max()
    assert 0 < err < np.abs(d[w]).max() / 4


def test_per_module_quantization_override(tmp_path):
    cfg, tensors = write_model(tmp_path, hidden=64, inter=128)
    quant = {
        "group_size": 64,
        "bits": 4,
        "model.layers.0.mlp.down_proj": {"group_size": 32, "bits": 8},
    }
    out = dict(tensors)
    for name in [n for n in tensors if n.endswith("_proj.weight")]:
        prefix = name.removesuffix(".weight")
        spec = quant.get(prefix, quant)
        wq, scales, biases = quantize(tensors[name], spec["group_size"], spec["bits"])
        out[name], out[prefix + ".scales"], out[prefix + ".biases"] = wq, scales, biases
    save(tmp_path / "model.safetensors", out)
    raw = json.loads((tmp_path / "config.json").read_text())
    raw["quantization"] = quant
    (tmp_path / "config.json").write_text(json.dumps(raw))
    loaded = load_tensors(tmp_path, ModelConfig.from_dir(tmp_path))
    err8 = np.abs(
        loaded["model.layers.0.mlp.down_proj.weight"]
        - tensors["model.layers.0.mlp.down_proj.weight"]
    ).max()
    err4 = np.abs(
        loaded["model.layers.1.mlp.down_proj.weight"]
        - tensors["model.layers.1.mlp.down_proj.weight"]
    ).max()
    assert err8 < err4 / 4


def test_tokenizer_round_trip_chat_template_and_ids_past_vocab():
    tok = Tokenizer(TINY)
    text = "Return the number of items."
    assert tok.decode(tok.encode(text)) == text
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert chat.startswith("<|im_start|>user\nhi<|im_end|>") and chat.endswith("assistant\n")
    assert tok.decode([tok.vocab_size + 5, *tok.encode("ok")]) == "\ufffdok"


def test_rope_theta_from_transformers5_rope_parameters(tmp_path):
    write_model(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    del raw["rope_theta"]
    raw["rope_parameters"] = {"rope_type": "default", "rope_theta": 1000000.0}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert ModelConfig.from_dir(tmp_path).rope_theta == 1e6
    raw["rope_parameters"]["rope_type"] = "yarn"
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(InputError, match="yarn"):
        ModelConfig.from_dir(tmp_path)


def test_generation_config_eos_ids_also_stop(tmp_path):
    write_model(tmp_path)
    assert ModelConfig.from_dir(tmp_path).eos_token_ids == (319,)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 319]}))
    assert ModelConfig.from_dir(tmp_path).eos_token_ids == (319, 7)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": "x"}))
    with pytest.raises(InputError, match="generation_config.json"):
        ModelConfig.from_dir(tmp_path)
