"""Flags shared by the subcommands, and building an engine from them."""

from __future__ import annotations

import argparse
from typing import Any

from engine.config import DRAFTERS, EngineConfig
from engine.errors import InputError
from engine.kv.codec import KV_DTYPES


def add_model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        required=True,
        help="model directory (Hugging Face layout), or synthetic:qwen3-0.6b[@seed]",
    )
    p.add_argument("--backend", default="numpy", help="numpy | mlx | cupy | fake")


def add_engine_flags(p: argparse.ArgumentParser, parallel: bool = True) -> None:
    if parallel:
        p.add_argument("--parallel", type=int, default=1, help="lanes (concurrent streams)")
    p.add_argument("--context", type=int, default=1024, help="rows per lane")
    p.add_argument("--kv", default="bf16", choices=KV_DTYPES, help="KV storage")
    p.add_argument("--kv-pages", type=int, default=0, help="shared page pool (0: paging off)")
    p.add_argument("--page-rows", type=int, default=16, help="rows per KV page")
    p.add_argument("--step-rows", type=int, default=64, help="prompt rows per step")
    p.add_argument("--share", type=float, default=1.0, help="prompt share of decode time")
    p.add_argument("--drafter", default="none", choices=DRAFTERS)
    p.add_argument("--drafter-model", default=None, help="block drafter directory")
    p.add_argument("--draft-tokens", type=int, default=4, help="tokens drafted per round")


def engine_config(args: argparse.Namespace, **overrides: Any) -> EngineConfig:
    cfg = EngineConfig(
        parallel=getattr(args, "parallel", 1),
        context=args.context,
        kv=args.kv,
        kv_pages=args.kv_pages,
        page_rows=args.page_rows,
        step_rows=args.step_rows,
        share=args.share,
        drafter=args.drafter,
        drafter_model=args.drafter_model,
        draft_tokens=args.draft_tokens,
        serial=getattr(args, "serial", False),
    )
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg.validate()


def load(args: argparse.Namespace) -> tuple[Any, Any]:
    """(model, tokenizer or None) for --model on --backend."""
    from engine.model import synthetic
    from engine.model.loader import load_model
    from engine.model.tokenizer import Tokenizer

    model_dir = synthetic.resolve(args.model)
    model = load_model(model_dir, args.backend)
    tokenizer = Tokenizer(model_dir) if (model_dir / "tokenizer.json").is_file() else None
    return model, tokenizer


def make_drafter(cfg: EngineConfig, model: Any) -> Any:
    if cfg.drafter == "none":
        return None
    from engine.draft import registry

    return registry.make(cfg, model)


def parse_ids(text: str, flag: str) -> list[int]:
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{flag}: expected comma-separated token ids, got '{text}'") from None
    if not ids or min(ids) < 0:
        raise InputError(f"{flag}: expected token ids >= 0")
    return ids
