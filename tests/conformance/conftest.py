"""The backend conformance suite: every exactness promise, on every backend present.

A backend is present when its ops load here (cupy needs a working GPU); the others skip.
numpy is always present: if it cannot load the tiny model, every test fails (not skips).
Each test compares whole replies (ids, margins, logit hashes, finish reasons) bit for bit
against the same backend's solo reference; nothing is compared across backends except
the KV codec's bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.errors import EngineFailure, InputError
from engine.lanes.request import Request
from engine.model.loader import load_model
from engine.ops import BACKENDS

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "fixtures" / "models" / "tiny-qwen3"
BLOCK = ROOT / "fixtures" / "models" / "tiny-qwen3-block"
ALWAYS = ("numpy",)  # a backend every machine has: never skipped
LENGTHS = [1, 15, 16, 17, 63, 64, 65, 130]

_models: dict[str, Any] = {}


def backend_model(name: str) -> Any:
    """The bundled tiny model on backend `name`, loaded once; skips where it cannot run,
    except numpy, which runs everywhere: its load error fails the test."""
    if name not in _models:
        try:
            _models[name] = load_model(TINY, name)
        except (InputError, EngineFailure, ImportError) as exc:
            _models[name] = exc
    got = _models[name]
    if isinstance(got, Exception) and name in ALWAYS:
        pytest.fail(f"backend {name} must load everywhere: {got!r}", pytrace=False)
    if isinstance(got, Exception):
        pytest.skip(f"backend {name}: {got}")
    return got


@pytest.fixture(params=BACKENDS, scope="module")
def model(request: pytest.FixtureRequest) -> Any:
    return backend_model(request.param)


def mixed(max_tokens: int = 10, salt: int = 0) -> list[Request]:
    """Prompts at page and key-block edges, greedy and seeded sampling, one stop id."""
    rng = np.random.default_rng(31 + salt)
    reqs = []
    for i, n in enumerate(LENGTHS):
        reqs.append(
            Request(
                id=f"r{i}",
                prompt_ids=[int(x) for x in rng.integers(0, 1000, n)],
                max_tokens=max_tokens,
                temperature=0.9 if i % 2 else 0.0,
                seed=7 + i,
                stop_ids=[421] if i == 5 else [],
            )
        )
    return reqs
