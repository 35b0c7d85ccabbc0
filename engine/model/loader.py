"""Load a model directory into a runnable model on one backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.errors import InputError
from engine.model.config import ModelConfig


def load_model(model_dir: str | Path, backend: str = "numpy") -> Any:
    """`model_dir` is a directory or a `synthetic:<shape>[@seed]` spec (engine.model.synthetic)."""
    from engine.model import synthetic

    model_dir = synthetic.resolve(model_dir)
    if not Path(model_dir).is_dir():
        raise InputError(f"{model_dir}: model directory not found")
    config = ModelConfig.from_dir(model_dir)
    if backend == "fake":
        from engine.model.fake import FakeModel

        return FakeModel(config)
    from engine.model.qwen3 import build
    from engine.model.weights import load_tensors
    from engine.ops import get_ops

    ops = get_ops(backend)
    return build(config, load_tensors(model_dir, config), ops)
