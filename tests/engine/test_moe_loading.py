"""Loading Qwen3-MoE checkpoints: which layers are sparse (transformers' rule), the expert
tensors in Hugging Face, fused and mlx-lm layouts (the same bits from each), and bad
configs or expert tensors as one line naming the key or tensor, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.errors import InputError
from engine.model.config import ModelConfig
from engine.model.loader import load_model
from engine.model.mlx_quant import dequantize, quantize
from engine.model.qwen3 import Segment
from engine.model.safetensors_file import save
from tests.engine.randmodel import random_config, random_tensors

ROOT = Path(__file__).parents[2]
MOE = dict(hidden=64, layers=3, experts=4, top_k=2, moe_inter=32, mlp_only=(1,))


def write_moe(path: Path, tensors: dict | None = None, overrides: dict | None = None) -> dict:
    cfg = random_config(**MOE)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(dict(cfg.raw, **(overrides or {}))))
    tensors = random_tensors(cfg, 5) if tensors is None else tensors
    save(path / "model.safetensors", tensors)
    return tensors


def logits(model_dir: Path, backend: str = "numpy") -> np.ndarray:
    model = load_model(model_dir, backend)
    kv = model.new_kv(4, 16, "f32", 1)
    kv.open_lane(0, [0, 1, 2, 3], 64)
    ids = np.array([5, 17, 3, 99, 42, 7, 7, 250, 1], dtype=np.int64)
    seg = Segment(tokens=ids, start=0, pages=[0, 1, 2, 3], logit_rows=np.arange(len(ids)))
    return model.forward([seg], kv)[0].logits


@pytest.mark.parametrize(
    "layers,step,mlp_only,experts",
    [
        (4, 1, [], 8),
        (6, 2, [], 8),
        (6, 2, [1, 2], 8),
        (5, 1, [0, 4], 8),
        (3, 3, [], 8),
        (4, 1, [], 0),
    ],
)
def test_sparse_layers_follow_transformers(layers, step, mlp_only, experts):
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    raw = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_hidden_layers": layers,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "vocab_size": 64,
        "max_position_embeddings": 64,
        "num_experts": experts,
        "num_experts_per_tok": 2 if experts else 0,
        "moe_intermediate_size": 16,
        "decoder_sparse_step": step,
        "mlp_only_layers": mlp_only,
    }
    ours = ModelConfig.from_dict(raw).sparse_layers
    with torch.device("meta"):
        model = tf.Qwen3MoeModel(tf.Qwen3MoeConfig(**raw))
    theirs = tuple(i for i, layer in enumerate(model.layers) if hasattr(layer.mlp, "experts"))
    assert ours == theirs


def test_transformers5_num_local_experts_and_defaults():
    raw = dict(random_config(**MOE).raw)
    raw["num_local_experts"] = raw.pop("num_experts")
    for key in ("decoder_sparse_step", "norm_topk_prob", "mlp_only_layers"):
        raw.pop(key)
    cfg = ModelConfig.from_dict(raw)
    assert cfg.num_experts == 4 and cfg.sparse_layers == (0, 1, 2) and not cfg.norm_topk_prob


@pytest.mark.parametrize(
    "key,value",
    [
        ("num_experts_per_tok", 5),
        ("num_experts_per_tok", 0),
        ("num_experts", -1),
        ("num_experts", "4"),
        ("moe_intermediate_size", 0),
        ("decoder_sparse_step", 0),
        ("mlp_only_layers", "1"),
        ("norm_topk_prob", "yes"),
        ("num_local_experts", 8),
    ],
)
def test_bad_moe_config_names_the_key_and_exits_2(tmp_path, key, value):
    write_moe(tmp_path, overrides={key: value})
    with pytest.raises(InputError, match=key):
        ModelConfig.from_dir(tmp_path)
    res = subprocess.run(
        [sys.executable, "-m", "engine", "generate", "--model", str(tmp_path)]
        + ["--prompt-ids", "1,2", "--max-tokens", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and key in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


@pytest.mark.parametrize(
    "name,change",
    [
        ("model.layers.0.mlp.experts.3.down_proj.weight", "drop"),
        ("model.layers.2.mlp.experts.1.gate_proj.weight", "shape"),
        ("model.layers.0.mlp.gate.weight", "drop"),
        ("model.layers.2.mlp.gate.weight", "shape"),
        ("model.layers.1.mlp.up_proj.weight", "drop"),
    ],
)
def test_missing_or_misshapen_expert_tensor_is_named(tmp_path, name, change):
    t = random_tensors(random_config(**MOE), 5)
    if change == "drop":
        del t[name]
    else:
        t[name] = t[name][:, :-1].copy()
    write_moe(tmp_path, t)
    with pytest.raises(InputError, match=name.replace(".", r"\.")):
        load_model(tmp_path, "numpy")


def _fused(t: dict) -> dict:
    """transformers 5's in-memory parameter names: experts fused on a leading axis."""
    out = {k: v for k, v in t.items() if ".experts." not in k}
    for li in (0, 2):
        p = f"model.layers.{li}.mlp.experts."
        g = [t[f"{p}{e}.gate_proj.weight"] for e in range(4)]
        u = [t[f"{p}{e}.up_proj.weight"] for e in range(4)]
        out[p + "gate_up_proj"] = np.stack(
            [np.concatenate([a, b]) for a, b in zip(g, u, strict=True)]
        )
        out[p + "down_proj"] = np.stack([t[f"{p}{e}.down_proj.weight"] for e in range(4)])
    return out


def _switch(t: dict, quant: bool) -> tuple[dict, dict]:
    """mlx-lm's names (switch_mlp, a leading expert axis), optionally 4-bit affine with the
    router at 8 bits as mlx-lm's qwen3_moe quant_predicate does."""
    out = {k: v for k, v in t.items() if ".experts." not in k}
    for li in (0, 2):
        p = f"model.layers.{li}.mlp."
        for n in ("gate_proj", "up_proj", "down_proj"):
            out[f"{p}switch_mlp.{n}.weight"] = np.stack(
                [t[f"{p}experts.{e}.{n}.weight"] for e in range(4)]
            )
    if not quant:
        return out, {}
    qcfg: dict = {"group_size": 32, "bits": 4, "mode": "affine"}
    for name in [k for k in out if "switch_mlp" in k or k.endswith("mlp.gate.weight")]:
        prefix = name.removesuffix(".weight")
        bits = 8 if prefix.endswith("mlp.gate") else 4
        if bits == 8:
            qcfg[prefix] = {"group_size": 32, "bits": 8, "mode": "affine"}
        out[name], out[prefix + ".scales"], out[prefix + ".biases"] = quantize(out[name], 32, bits)
    return out, {"quantization": qcfg}


def test_layouts_give_the_same_bits(tmp_path):
    t = write_moe(tmp_path / "hf")
    base = logits(tmp_path / "hf")
    write_moe(tmp_path / "fused", _fused(t))
    assert logits(tmp_path / "fused").tobytes() == base.tobytes()
    switch, _ = _switch(t, quant=False)
    write_moe(tmp_path / "switch", switch)
    assert logits(tmp_path / "switch").tobytes() == base.tobytes()


def test_mlx_affine_switch_layers_load_dequantized(tmp_path):
    """4-bit experts and an 8-bit router give the bits of their dequantized float32 twin."""
    t = write_moe(tmp_path / "hf")
    q, over = _switch(t, quant=True)
    write_moe(tmp_path / "q4", q, over)
    twin = {k: v for k, v in q.items() if not k.endswith((".scales", ".biases"))}
    for name in twin:
        prefix = name.removesuffix(".weight")
        if prefix + ".scales" in q:
            bits = 8 if prefix.endswith("mlp.gate") else 4
            twin[name] = dequantize(q[name], q[prefix + ".scales"], q[prefix + ".biases"], 32, bits)
    write_moe(tmp_path / "twin", twin)
    got = logits(tmp_path / "q4")
    assert got.tobytes() == logits(tmp_path / "twin").tobytes()
    assert not np.array_equal(got, logits(tmp_path / "hf"))  # really quantized
    bad = dict(q)
    bad["model.layers.2.mlp.switch_mlp.down_proj.scales"] = bad[
        "model.layers.2.mlp.switch_mlp.down_proj.scales"
    ][:3]
    write_moe(tmp_path / "bad", bad, over)
    with pytest.raises(InputError, match="switch_mlp.down_proj"):
        load_model(tmp_path / "bad", "numpy")
