"""Shared helpers for the engine's host tests: models, fake clocks, runs and their replies."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.lanes.clock import FakeClock
from engine.lanes.engine import Engine
from engine.lanes.request import Request
from engine.model.config import ModelConfig
from engine.model.fake import FakeModel
from engine.model.loader import load_model
from engine.model.qwen3 import build
from engine.ops.numpy_ops import NumpyOps
from tests.engine.randmodel import random_config, random_tensors

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "fixtures" / "models" / "tiny-qwen3"


class ClockedModel:
    """A model whose forwards advance a FakeClock, so arrivals in fake seconds interleave
    with work as they would on a real clock, but deterministically."""

    def __init__(
        self, model: Any, clock: FakeClock, per_forward: float = 1e-3, per_row: float = 1e-5
    ) -> None:
        self.model = model
        self.clock = clock
        self.per_forward = per_forward
        self.per_row = per_row
        self.config = model.config

    def new_kv(self, pages: int, page_rows: int, kind: str, **lanes: int) -> Any:
        return self.model.new_kv(pages, page_rows, kind, **lanes)

    def forward(self, segments: list, kv: Any, taps: tuple[int, ...] = ()) -> list:
        self.clock.advance(self.per_forward + self.per_row * sum(len(s.tokens) for s in segments))
        return self.model.forward(segments, kv, taps)


@dataclass
class Result:
    """What a finished stream returned, in a form that compares bit for bit."""

    ids: tuple[int, ...]
    margins: bytes
    finish_reason: str
    embedding: bytes | None
    logit_hashes: tuple[str, ...] = ()

    @classmethod
    def of(cls, s: Any) -> Result:
        emb = None if s.embedding is None else np.asarray(s.embedding, np.float32).tobytes()
        margins = np.asarray(s.margins, np.float64).tobytes()
        return cls(tuple(s.generated), margins, s.finish_reason, emb, tuple(s.logit_hashes))


def clocked_engine(
    model: Any, per_forward: float = 1e-3, per_row: float = 1e-5, **cfg: Any
) -> Engine:
    clock = FakeClock()
    return Engine(
        ClockedModel(model, clock, per_forward, per_row), EngineConfig(**cfg), clock=clock
    )


def run_requests(model: Any, requests: list[Request], **cfg: Any) -> dict[str, Result]:
    """Run requests together on one engine (fake clock); results by request id."""
    engine = clocked_engine(model, **cfg)
    for r in requests:
        engine.submit(r)
    engine.run()
    assert engine.plan.pages_in_use == 0 and engine.plan.unplanned_allocations == 0
    return {s.req.id: Result.of(s) for s in engine.finished}


def solo(model: Any, request: Request, **cfg: Any) -> Result:
    """The reference: the request alone on a one-lane engine."""
    cfg = {**cfg, "parallel": 1}
    alone = replace(request, arrival=0.0)
    return run_requests(model, [alone], **cfg)[request.id]


def ids(n: int, salt: int = 0, vocab: int = 1000) -> list[int]:
    """A deterministic prompt of n token ids below `vocab` (avoiding the tiny model's
    special ids >= 1000)."""
    rng = np.random.default_rng(1_000_003 * salt + n)
    return [int(x) for x in rng.integers(0, vocab, n)]


@pytest.fixture(scope="session")
def tiny() -> Any:
    """The bundled tiny Qwen3 (bf16 weights) on the numpy backend."""
    return load_model(TINY, "numpy")


def random_model(seed: int = 0, **shape: Any) -> Any:
    cfg = random_config(**shape)
    return build(cfg, random_tensors(cfg, seed), NumpyOps())


def fake_config(vocab: int = 512, max_pos: int = 8192) -> ModelConfig:
    return random_config(vocab=vocab, max_pos=max_pos)


def fake_engine(
    parallel: int = 2,
    share: float = 1.0,
    step_rows: int = 64,
    context: int = 4096,
    per_row: float = 1e-4,
    per_forward: float = 1e-2,
    **cfg: Any,
) -> Engine:
    """An engine on the fake backend whose forwards advance its FakeClock."""
    clock = FakeClock()
    model = FakeModel(
        fake_config(), clock=clock, seconds_per_row=per_row, seconds_per_forward=per_forward
    )
    return Engine(
        model,
        EngineConfig(
            parallel=parallel,
            share=share,
            step_rows=step_rows,
            context=context,
            **cfg,
        ),
        clock=clock,
    )
