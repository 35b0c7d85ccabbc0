"""Flags shared by the subcommands, and building an engine from them."""

from __future__ import annotations

import argparse
from typing import Any

from engine.config import EngineConfig, flag_name, knob_type, knobs
from engine.errors import InputError


def add_model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        required=True,
        help="model directory (Hugging Face layout), or synthetic:qwen3-0.6b[@seed]",
    )
    p.add_argument("--backend", default="numpy", help="numpy | mlx | cupy | fake")


def add_engine_flags(p: argparse.ArgumentParser, parallel: bool = True) -> None:
    """A flag for each of EngineConfig's knobs, with its default, help and choices."""
    for f in knobs():
        if f.name == "parallel" and not parallel:
            continue
        p.add_argument(
            flag_name(f.name),
            type=knob_type(f),
            default=f.default,
            choices=f.metadata["choices"],
            help=f.metadata["help"],
        )


def engine_config(args: argparse.Namespace, **overrides: Any) -> EngineConfig:
    """EngineConfig from the parsed flags; a knob the command has no flag for keeps its default."""
    given = {f.name: getattr(args, f.name) for f in knobs() if hasattr(args, f.name)}
    cfg = EngineConfig(**given, serial=getattr(args, "serial", False))
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
