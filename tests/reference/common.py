"""Shared pieces of the reference tests: random Qwen3 checkpoints written by Hugging Face
transformers, random prompts, our engine's greedy ids, and comparing two greedy runs
honestly about near-ties.

Only imported by the tests in this folder, after they have checked (importorskip) that
torch and transformers are installed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.config import EngineConfig
from engine.lanes.engine import Engine
from engine.lanes.request import Request
from engine.model.qwen3 import Segment

ROPE_THETA = 1_000_000.0  # Qwen3's own value; the default 10000 would hide a wrong read


@dataclass(frozen=True)
class Case:
    """One checkpoint: a Qwen3Config shape and how it is written to disk."""

    name: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool
    inter: int = 128
    layers: int = 2
    vocab: int = 384
    dtype: str = "float32"  # float32 | bfloat16: the dtype the checkpoint is saved in
    shard: str | None = None  # max_shard_size for save_pretrained (None: one file)
    std: float = 0.2  # initializer_range: large enough that greedy ids are diverse
    extra: dict[str, Any] = field(default_factory=dict)

    def config_kwargs(self) -> dict[str, Any]:
        return {
            "vocab_size": self.vocab,
            "hidden_size": self.hidden,
            "intermediate_size": self.inter,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "max_position_embeddings": 512,
            "rope_theta": ROPE_THETA,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": self.tied,
            "initializer_range": self.std,
            "eos_token_id": None,
            **self.extra,
        }


CASES = (
    # head_dim 32 != hidden / heads = 16; tied head
    Case("head_dim", hidden=64, heads=4, kv_heads=2, head_dim=32, tied=True),
    # GQA ratio 3 (6 query heads over 2 kv heads), untied head, 3 layers
    Case("gqa3", hidden=96, heads=6, kv_heads=2, head_dim=16, tied=False, layers=3),
    # untied head, plain multi-head attention, written as several shards with an index
    Case("untied_sharded", hidden=64, heads=4, kv_heads=4, head_dim=16, tied=False, shard="40KB"),
    # tied head, GQA ratio 4, saved in bfloat16
    Case("tied_bf16", hidden=64, heads=4, kv_heads=1, head_dim=32, tied=True, dtype="bfloat16"),
)


def write_checkpoint(case: Case, out: Path, seed: int = 0) -> Path:
    """Random-init Qwen3ForCausalLM for `case`, saved with save_pretrained (safetensors).

    Norm weights are drawn around 1 (transformers initializes them to exactly 1, which
    would hide a norm whose weight is ignored)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(**case.config_kwargs())
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    model = model.to(getattr(torch, case.dtype))
    kwargs: dict[str, Any] = {"safe_serialization": True}
    if case.shard:
        kwargs["max_shard_size"] = case.shard
    try:
        model.save_pretrained(out, **kwargs)
    except TypeError:  # transformers releases that no longer take safe_serialization
        kwargs.pop("safe_serialization")
        model.save_pretrained(out, **kwargs)
    return out


def add_top_level_rope_theta(model_dir: Path) -> None:
    """Also write `rope_theta` at the top of config.json, where transformers 4.x (and the
    published Qwen3 checkpoints) keep it; transformers 5 nests it in `rope_parameters`."""
    path = model_dir / "config.json"
    raw = json.loads(path.read_text())
    theta = raw.get("rope_theta") or (raw.get("rope_parameters") or {}).get("rope_theta")
    raw["rope_theta"] = theta
    path.write_text(json.dumps(raw, indent=2))


def load_reference(model_dir: Path) -> Any:
    """The checkpoint in transformers, computing in float32 (eager attention).

    One torch thread: these models are tiny, and on a loaded 2-core machine torch's
    spinning worker threads cost far more than they give."""
    import torch
    from transformers import Qwen3ForCausalLM

    torch.set_num_threads(1)

    model = Qwen3ForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager"
    )
    return model.eval()


def prompts(vocab: int, count: int = 20, longest: int = 200, seed: int = 0) -> list[list[int]]:
    """`count` random prompts with lengths spread over 1..longest (1 and longest included)."""
    rng = np.random.default_rng(seed)
    lengths = np.linspace(1, longest, count).round().astype(int)
    rng.shuffle(lengths)
    return [rng.integers(0, vocab, int(n)).tolist() for n in lengths]


def torch_greedy(model: Any, prompt: list[int], new: int) -> tuple[list[int], list[float]]:
    """transformers' generate(do_sample=False): ids and the top-1/top-2 margin of each."""
    import torch

    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=new,
            min_new_tokens=new,
            eos_token_id=None,
            pad_token_id=0,
            output_logits=True,
            return_dict_in_generate=True,
        )
    toks = out.sequences[0, len(prompt) :].tolist()
    margins = [margin(step[0].numpy()) for step in out.logits]
    return toks, margins


def margin(logits: np.ndarray) -> float:
    top2 = np.partition(np.asarray(logits, dtype=np.float64), -2)[-2:]
    return float(top2[1] - top2[0])


def our_model(model_dir: Path) -> Any:
    from engine.model.loader import load_model

    return load_model(model_dir, "numpy")


def our_greedy(
    model: Any, prompts_: list[list[int]], new: int, kv: str = "f32", parallel: int = 4
) -> list[tuple[list[int], list[float]]]:
    """Our engine's greedy ids and margins for every prompt, `parallel` streams at a time."""
    longest = max(len(p) for p in prompts_) + new
    cfg = EngineConfig(parallel=parallel, context=longest, kv=kv, step_rows=64)
    engine = Engine(model, cfg)
    streams = [
        engine.submit(Request(f"r{i}", p, max_tokens=new, ignore_eos=True))
        for i, p in enumerate(prompts_)
    ]
    engine.run()
    for s in streams:
        assert s.finish_reason == "length", (s.req.id, s.finish_reason, s.error)
    return [(list(s.generated), list(s.margins)) for s in streams]


def our_logits(model: Any, prompt: list[int], page_rows: int = 16, kv: str = "f32") -> np.ndarray:
    """Logits of every prompt position in one forward [len(prompt), vocab]."""
    n = len(prompt)
    pages = list(range(math.ceil(n / page_rows)))
    cache = model.new_kv(len(pages), page_rows, kv)
    seg = Segment(np.asarray(prompt, dtype=np.int64), 0, pages, np.arange(n))
    (out,) = model.forward([seg], cache)
    return out.logits


def torch_logits(model: Any, prompt: list[int]) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.tensor([prompt])).logits[0].float().numpy()


@dataclass
class Agreement:
    """How two greedy runs of one prompt compare."""

    equal: bool  # ids identical
    common: int  # length of the common prefix
    tie: bool  # they differ first where the reference's top-2 margin is below the tolerance
    margin: float | None  # the reference's margin at the first difference


def agree(ours: list[int], ref: list[int], ref_margins: list[float], tol: float) -> Agreement:
    common = next((i for i, (a, b) in enumerate(zip(ours, ref, strict=True)) if a != b), None)
    if common is None:
        return Agreement(True, len(ref), False, None)
    m = ref_margins[common]
    return Agreement(False, common, m < tol, m)


def summary(label: str, results: list[Agreement]) -> str:
    equal = sum(r.equal for r in results)
    ties = sum(r.tie for r in results)
    bad = len(results) - equal - ties
    return (
        f"{label}: {equal}/{len(results)} identical, {ties} differ first at a near-tie, "
        f"{bad} differ at a clear margin"
    )
