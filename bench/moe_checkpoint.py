"""Write a random-init Qwen3-MoE checkpoint with transformers, for bench/peers.py.

    python bench/moe_checkpoint.py tiny /tmp/peers-tiny-moe
    python bench/moe_checkpoint.py mid /tmp/peers-mid-moe
    python bench/peers.py --models /tmp/peers-tiny-moe,/tmp/peers-mid-moe --context ""

transformers' own `save_pretrained` writes it (float32, per-expert tensor names), with the
bundled tiny-qwen3 tokenizer; `num_experts` and a top-level `rope_theta` are added to
config.json because mlx-lm's qwen3_moe reads those keys (transformers 5 writes
`num_local_experts` and nests rope_theta in `rope_parameters`). Every peer then loads the
same directory.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKENIZER = ROOT / "fixtures" / "models" / "tiny-qwen3"
# name -> (hidden, layers, heads, kv heads, head_dim, intermediate, experts, top-k, moe inter)
SHAPES = {
    "tiny": (128, 4, 4, 2, 64, 384, 8, 2, 64),
    "mid": (512, 8, 8, 4, 64, 1536, 32, 4, 256),
}


def write(name: str, out: Path, seed: int = 0) -> Path:
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    h, layers, heads, kv, d, inter, experts, top_k, moe_inter = SHAPES[name]
    torch.manual_seed(seed)
    config = Qwen3MoeConfig(
        vocab_size=1088, hidden_size=h, intermediate_size=inter, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv, head_dim=d,
        max_position_embeddings=4096, tie_word_embeddings=True, initializer_range=0.05,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        num_experts=experts, num_experts_per_tok=top_k, moe_intermediate_size=moe_inter,
        norm_topk_prob=True, eos_token_id=None,
    )  # fmt: skip
    Qwen3MoeForCausalLM(config).eval().save_pretrained(out)
    raw = json.loads((out / "config.json").read_text())
    raw["num_experts"] = raw["num_local_experts"]
    raw["rope_theta"] = raw["rope_parameters"]["rope_theta"]
    (out / "config.json").write_text(json.dumps(raw, indent=2))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / f, out / f)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in SHAPES:
        print(f"usage: moe_checkpoint.py {{{'|'.join(SHAPES)}}} OUT_DIR", file=sys.stderr)
        raise SystemExit(2)
    print(write(sys.argv[1], Path(sys.argv[2])))
