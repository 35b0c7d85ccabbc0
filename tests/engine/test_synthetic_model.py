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
