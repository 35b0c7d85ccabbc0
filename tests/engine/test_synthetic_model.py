"""`--model synthetic:<shape>[@seed]`: a real-shaped random checkpoint made from a seed, loaded
through the ordinary model-directory path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.errors import InputError
from engine.model import synthetic
from engine.model.config import ModelConfig
from engine.model.loader import load_model
from engine.model.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENGINE_SYNTHETIC_DIR", str(tmp_path))
    return tmp_path


def test_real_shapes_match_qwen3() -> None:
    c = ModelConfig.from_dict(synthetic.model_config("qwen3-0.6b"))
    assert (c.hidden_size, c.intermediate_size, c.num_layers) == (1024, 3072, 28)
    assert (c.num_heads, c.num_kv_heads, c.head_dim, c.vocab_size) == (16, 8, 128, 151936)
    assert c.tie_word_embeddings
    big = ModelConfig.from_dict(synthetic.model_config("qwen3-1.7b"))
    assert (big.hidden_size, big.intermediate_size, big.vocab_size) == (2048, 6144, 151936)
    n = sum(int(np.prod(s)) for s in synthetic.tensor_shapes(c.raw).values())
    assert 590e6 < n < 600e6  # Qwen3-0.6B: 596M parameters with the tied head


def test_same_seed_same_bytes_other_seed_other_bytes(cache: Path) -> None:
    a = synthetic.resolve("synthetic:tiny@3")
    first = (a / "model.safetensors").read_bytes()
    import shutil

    shutil.rmtree(a)
    assert (synthetic.resolve("synthetic:tiny@3") / "model.safetensors").read_bytes() == first
    other = synthetic.resolve("synthetic:tiny@4") / "model.safetensors"
    assert other.read_bytes() != first
    assert synthetic.resolve("synthetic:tiny") == cache / "tiny-seed0-v1"


def test_tensor_depends_on_name_and_seed_only() -> None:
    a = synthetic.make_tensor("model.norm.weight", (8,), 1)
    b = synthetic.make_tensor("model.norm.weight", (8,), 1)
    c = synthetic.make_tensor("model.layers.0.input_layernorm.weight", (8,), 1)
    assert a.tobytes() == b.tobytes() != c.tobytes()


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("synthetic:nope", "unknown synthetic shape 'nope'"),
        ("synthetic:tiny@x", "seed 'x' is not an integer"),
        ("synthetic:tiny@-1", "seed must be >= 0"),
        ("synthetic:qwen3-30b-a3b,layers=0", "layers must be an integer in 1..48"),
        ("synthetic:qwen3-30b-a3b@1,layers=49", "layers must be an integer in 1..48"),
        ("synthetic:tiny,layers=x", "layers must be an integer in 1..2"),
        ("synthetic:tiny,depth=1", "unknown option 'depth'"),
    ],
)
def test_bad_spec_is_one_line_input_error(spec: str, words: str) -> None:
    with pytest.raises(InputError, match=words):
        synthetic.parse(spec)


def test_loads_and_tokenizes_bytes(cache: Path) -> None:
    model = load_model("synthetic:tiny@1", "numpy")
    assert model.config.vocab_size == 512 and len(model.layers) == 2
    tok = Tokenizer(synthetic.resolve("synthetic:tiny@1"))
    text = "héllo, wörld\n"
    ids = tok.encode(text)
    assert ids == list(text.encode())
    assert tok.decode(ids) == text
    assert tok.encode("<|im_end|>") == [synthetic.IM_END_ID]
    assert tok.decode([104, 400]) == "h\ufffd"  # model ids past the tokenizer's


def test_run_cli_on_synthetic(cache: Path, tmp_path: Path) -> None:
    req = tmp_path / "req.jsonl"
    req.write_text(json.dumps({"id": "a", "prompt_ids": [1, 2, 3], "max_tokens": 3}) + "\n")
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "engine", "run", "--model", "synthetic:tiny@2"]
    cmd += ["--requests", str(req), "--out", str(out)]
    env = {"ENGINE_SYNTHETIC_DIR": str(cache), "PATH": "/usr/bin:/bin"}
    subprocess.run(cmd, check=True, cwd=ROOT, env=env, capture_output=True)
    reply = json.loads(out.read_text().splitlines()[0])
    assert len(reply["ids"]) == 3
    cmd[5] = "synthetic:nope"
    bad = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown synthetic shape" in bad.stderr


def test_qwen3_30b_a3b_shape() -> None:
    """Qwen3-30B-A3B: 48 layers, hidden 2048, 32/4 heads of 128, 128 experts of 768, top-8
    renormalised; 30.5B parameters (30.2B with the tied head), 3.0B active with it."""
    c = ModelConfig.from_dict(synthetic.model_config("qwen3-30b-a3b"))
    assert (c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim) == (
        2048, 48, 32, 4, 128
    )  # fmt: skip
    assert (c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size) == (128, 8, 768)
    assert c.norm_topk_prob and c.sparse_layers == tuple(range(48))
    shapes = synthetic.tensor_shapes(c.raw)
    total = sum(int(np.prod(s)) for s in shapes.values())
    expert = 3 * 2048 * 768
    active = total - 48 * 120 * expert
    assert 30.0e9 < total < 30.4e9 and 3.0e9 < active < 3.4e9
    four = ModelConfig.from_dict(synthetic.model_config("qwen3-30b-a3b", 4))
    assert four.num_layers == 4 and four.sparse_layers == (0, 1, 2, 3)


def test_layers_override_and_tiny_moe_load(cache: Path) -> None:
    spec = "synthetic:tiny-moe@2,layers=1"
    assert synthetic.resolve(spec) == cache / "tiny-moe-L1-seed2-v1"
    model = load_model(spec, "numpy")
    assert len(model.layers) == 1 and model.layers[0].moe is not None
    assert len(model.layers[0].moe.gate_up) == 8 and model.layers[0].moe.top_k == 3
