"""Our Qwen3-MoE against transformers (Qwen3MoeForCausalLM, float32, CPU) on checkpoints
that transformers writes from random-init models it never shared with us, and against
mlx-lm on its own 4-bit conversion of one of them.

Cases: `moe_f32` (float32, untied, 8 experts top-3 renormalised, layer 1 dense via
mlp_only_layers); `moe_bf16` (saved in bfloat16 and up-cast as for dense, tied, 6 experts
top-2 not renormalised, decoder_sparse_step 2 so layers 1 and 3 are sparse). Norm weights
are drawn around 1. Asserted on 24 random prompts of 1..160 tokens, 12 new tokens each:

* prompt logits: |ours - transformers| <= ATOL = 2e-4 (as for dense);
* greedy ids (4 lanes, f32 KV): identical, or parting first where the reference's top-1/
  top-2 margin is below TIE = 2 * ATOL;
* mlx-lm (`mlx_lm.convert(..., quantize=True, q_bits=4, q_group_size=64)`: experts as
  switch_mlp stacks at 4 bits, the router at 8 bits by mlx-lm's qwen3_moe quant_predicate),
  run in float32 (`set_dtype(mx.float32)`): the same two assertions.

transformers 5 writes the expert count as `num_local_experts`; mlx-lm's ModelArgs needs
`num_experts` and a top-level `rope_theta`, so both are added to the source's config.json
before converting.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.reference import common as C  # noqa: E402

ATOL = 2e-4
TIE = 2 * ATOL
NEW = 12
COUNT = 24
LONGEST = 160
TOKENIZER = Path(__file__).resolve().parents[2] / "fixtures" / "models" / "tiny-qwen3"

CASES = {
    "moe_f32": dict(
        hidden=128, heads=4, kv_heads=2, head_dim=32, tied=False, layers=3, vocab=1088,
        experts=8, top_k=3, moe_inter=64, norm=True, step=1, mlp_only=[1],
    ),
    "moe_bf16": dict(
        hidden=64, heads=4, kv_heads=1, head_dim=32, tied=True, layers=4, vocab=384,
        experts=6, top_k=2, moe_inter=48, norm=False, step=2, mlp_only=[], dtype="bfloat16",
    ),
}  # fmt: skip


def write_moe_checkpoint(c: dict[str, Any], out: Path, seed: int = 0) -> Path:
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(seed)
    config = Qwen3MoeConfig(
        vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=128,
        num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
        num_key_value_heads=c["kv_heads"], head_dim=c["head_dim"], max_position_embeddings=512,
        rope_parameters={"rope_type": "default", "rope_theta": C.ROPE_THETA}, rms_norm_eps=1e-6,
        tie_word_embeddings=c["tied"], initializer_range=0.2, eos_token_id=None,
        num_experts=c["experts"], num_experts_per_tok=c["top_k"],
        moe_intermediate_size=c["moe_inter"], norm_topk_prob=c["norm"],
        decoder_sparse_step=c["step"], mlp_only_layers=c["mlp_only"],
    )  # fmt: skip
    model = Qwen3MoeForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    model.to(getattr(torch, c.get("dtype", "float32"))).save_pretrained(out)
    return out


def load_reference(model_dir: Path) -> Any:
    import torch
    from transformers import Qwen3MoeForCausalLM

    torch.set_num_threads(1)
    model = Qwen3MoeForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager"
    )
    return model.eval()


class Built:
    def __init__(self, name: str, root: Path) -> None:
        self.name, self.case = name, CASES[name]
        self.dir = write_moe_checkpoint(self.case, root / name)
        self.ref = load_reference(self.dir)
        self.ours = C.our_model(self.dir)
        self.prompts = C.prompts(min(self.case["vocab"], 1000), COUNT, LONGEST, seed=len(name))


@pytest.fixture(scope="module", params=sorted(CASES))
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Built:
    return Built(request.param, tmp_path_factory.mktemp("moe"))


def test_checkpoint_is_sparse_as_configured(built: Built) -> None:
    raw = json.loads((built.dir / "config.json").read_text())
    assert raw["architectures"] == ["Qwen3MoeForCausalLM"]
    sparse = tuple(
        i for i, layer in enumerate(built.ref.model.layers) if hasattr(layer.mlp, "gate")
    )
    assert sparse == built.ours.config.sparse_layers and sparse
    assert [layer.moe is not None for layer in built.ours.layers] == [
        i in sparse for i in range(built.case["layers"])
    ]


def check_greedy(label: str, ours: list, ref: list, prompts: list) -> None:
    results = []
    for p, (ids, _), (ref_ids, ref_margins) in zip(prompts, ours, ref, strict=True):
        a = C.agree(ids, ref_ids, ref_margins, TIE)
        assert a.equal or a.tie, (
            f"{label}: prompt of {len(p)} tokens: ours {ids} != {ref_ids} first at "
            f"{a.common}, where the reference margin is {a.margin:.3g} >= {TIE:g}"
        )
        results.append(a)
    print(f"\n{label}: " + C.summary("greedy ids, f32 KV", results))
    assert len({t for ids, _ in ref for t in ids}) >= NEW * 3  # diverse continuations


def test_prompt_logits_and_greedy_ids(built: Built) -> None:
    worst, scale = 0.0, 0.0
    for p in built.prompts:
        ours, ref = C.our_logits(built.ours, p), C.torch_logits(built.ref, p)
        diff = float(np.abs(ours - ref).max())
        worst, scale = max(worst, diff), max(scale, float(np.abs(ref).max()))
        assert diff <= ATOL, f"prompt of {len(p)} tokens: max |ours - ref| = {diff:.3g}"
    print(
        f"\n[{built.name}] prompt logits: max |ours - transformers| = {worst:.3g} (<= {scale:.3g})"
    )
    ref = [C.torch_greedy(built.ref, p, NEW) for p in built.prompts]
    ours = C.our_greedy(built.ours, built.prompts, NEW, kv="f32")
    check_greedy(f"[{built.name}] transformers", ours, ref, built.prompts)


def test_mlx_lm_4bit_conversion(tmp_path: Path) -> None:
    pytest.importorskip("mlx_lm")
    mx = pytest.importorskip("mlx.core")
    from mlx_lm import convert
    from mlx_lm.generate import generate_step
    from mlx_lm.utils import load_model

    hf = write_moe_checkpoint(CASES["moe_f32"], tmp_path / "hf", seed=3)
    raw = json.loads((hf / "config.json").read_text())
    raw["num_experts"] = raw["num_local_experts"]
    (hf / "config.json").write_text(json.dumps(raw))
    C.add_top_level_rope_theta(hf)  # mlx-lm's ModelArgs needs rope_theta at the top too
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / name, hf / name)
    out = tmp_path / "q4"
    convert(str(hf), str(out), quantize=True, q_bits=4, q_group_size=64)
    q = json.loads((out / "config.json").read_text())["quantization"]
    assert q["bits"] == 4 and q["model.layers.0.mlp.gate"]["bits"] == 8
    ours = C.our_model(out)
    assert ours.config.sparse_layers == (0, 2)
    ref_model, _ = load_model(out)
    ref_model.set_dtype(mx.float32)
    prompts = C.prompts(1000, COUNT, LONGEST, seed=9)
    worst = 0.0
    for p in prompts[: COUNT // 2]:
        theirs = np.array(ref_model(mx.array(p)[None]).astype(mx.float32))[0]
        worst = max(worst, float(np.abs(C.our_logits(ours, p) - theirs).max()))
    print(f"\n[mlx-lm 4-bit] prompt logits: max |ours - mlx-lm| = {worst:.3g}")
    assert worst <= ATOL
    ref = []
    for p in prompts:
        ids, margins = [], []
        for tok, logprobs in generate_step(mx.array(p), ref_model, max_tokens=NEW):
            ids.append(int(tok))
            margins.append(C.margin(np.array(logprobs.astype(mx.float32))))
        ref.append((ids, margins))
    check_greedy("[mlx-lm 4-bit]", C.our_greedy(ours, prompts, NEW, kv="f32"), ref, prompts)
