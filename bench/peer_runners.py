"""The peers bench/peers.py times: a loader per peer that returns a runner (prompts, gen) ->
(decode seconds, decode tokens), or raises ImportError when the peer is not installed.
Imported by bench/peers.py after it pins every BLAS to one thread."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

Runner = Callable[[list[list[int]], int], tuple[float, int]]  # (prompts, gen) -> (seconds, tokens)


def transformers_runner(model_dir: Path) -> Runner:
    import torch
    from transformers import AutoModelForCausalLM, StoppingCriteria, StoppingCriteriaList

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()

    class Stamp(StoppingCriteria):
        def __init__(self) -> None:
            self.times: list[float] = []

        def __call__(self, input_ids: Any, scores: Any, **kw: Any) -> Any:
            self.times.append(time.perf_counter())  # called once per generated token
            return torch.zeros(input_ids.shape[0], dtype=torch.bool)

    def run(prompts: list[list[int]], gen: int) -> tuple[float, int]:
        ids = torch.tensor(prompts, dtype=torch.long)
        stamp = Stamp()
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=gen,
                min_new_tokens=gen,
                pad_token_id=0,
                stopping_criteria=StoppingCriteriaList([stamp]),
            )
        assert out.shape[1] - ids.shape[1] == gen and len(stamp.times) == gen
        return stamp.times[-1] - stamp.times[0], len(prompts) * (gen - 1)

    return run


def mlx_lm_runner(model_dir: Path) -> Runner:
    import mlx.core as mx
    from mlx_lm.utils import load_model, load_tokenizer

    # strict=False: mlx-lm's Qwen3 has no MTP head, so tiny-qwen3's mtp.* tensors stay unread
    mlx_gen = importlib.import_module("mlx_lm.generate")  # mlx_lm.generate is also a function
    model, _ = load_model(model_dir, strict=False)
    tokenizer = load_tokenizer(model_dir)
    model.set_dtype(mx.float32)
    eos = set(getattr(tokenizer, "eos_token_ids", ()) or ())

    def no_eos(_: Any, logits: Any) -> Any:  # as min_new_tokens does: EOS cannot be chosen
        if not eos:
            return logits
        mask = np.zeros(logits.shape[-1], dtype=np.float32)
        mask[sorted(eos)] = -np.inf
        return logits + mx.array(mask)

    def run(prompts: list[list[int]], gen: int) -> tuple[float, int]:
        times: list[float] = []
        if len(prompts) == 1:
            for _ in mlx_gen.stream_generate(
                model, tokenizer, prompts[0], max_tokens=gen, logits_processors=[no_eos]
            ):
                times.append(time.perf_counter())
            assert len(times) == gen, len(times)
            return times[-1] - times[0], gen - 1
        return _mlx_batch(model, prompts, gen, no_eos)

    return run


def _mlx_batch(model: Any, prompts: list[list[int]], gen: int, no_eos: Any) -> tuple[float, int]:
    mlx_gen = importlib.import_module("mlx_lm.generate")

    if not hasattr(mlx_gen, "BatchGenerator"):
        raise NotImplementedError("this mlx-lm has no BatchGenerator: 1 stream only")
    bg = mlx_gen.BatchGenerator(model, stop_tokens=None, logits_processors=[no_eos])
    uids = bg.insert(prompts, max_tokens=[gen] * len(prompts))
    counts = dict.fromkeys(uids, 0)
    first = last = 0.0
    while responses := bg.next_generated():
        now = time.perf_counter()
        for r in responses:
            counts[r.uid] += 1
        if first == 0.0 and all(counts.values()):
            first = now
        last = now
    bg.close()
    assert all(c == gen for c in counts.values()), counts
    return last - first, len(prompts) * (gen - 1)


def engine_runner(model_dir: Path, backend: str, kv: str) -> Runner:
    from engine.config import EngineConfig
    from engine.lanes.engine import Engine
    from engine.lanes.request import Request
    from engine.model.loader import load_model

    model = load_model(model_dir, backend)

    def run(prompts: list[list[int]], gen: int) -> tuple[float, int]:
        rows = len(prompts[0]) + gen
        context = -(-rows // 16) * 16  # whole pages
        cfg = EngineConfig(parallel=len(prompts), context=context, kv=kv)  # backend: the model's
        engine = Engine(model, cfg)
        streams = [
            engine.submit(Request(id=f"p{i}", prompt_ids=p, max_tokens=gen, ignore_eos=True))
            for i, p in enumerate(prompts)
        ]
        engine.run()
        assert all(len(s.generated) == gen for s in streams), [len(s.generated) for s in streams]
        seconds = sum(e.seconds for e in engine.events if e.kind == "round")
        return seconds, len(prompts) * (gen - 1)

    return run


def load_peers(names: list[str], model_dir: Path, kv: str) -> dict[str, Runner | str]:
    """Each peer's runner, or the one-line reason it is absent."""
    loaders: dict[str, Callable[[], Runner]] = {
        "transformers": lambda: transformers_runner(model_dir),
        "mlx-lm": lambda: mlx_lm_runner(model_dir),
        "engine-numpy": lambda: engine_runner(model_dir, "numpy", kv),
        "engine-mlx": lambda: engine_runner(model_dir, "mlx", kv),
    }
    out: dict[str, Runner | str] = {}
    for name in names:
        try:
            out[name] = loaders[name]()
        except ImportError as e:
            out[name] = f"absent ({e.name or e})"
    return out
