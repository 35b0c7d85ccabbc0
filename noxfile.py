"""nox sessions: tests, gates, lean, bench, fixtures, reference, lint."""

from __future__ import annotations

import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent))

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def tests(session: nox.Session) -> None:
    """Host tests, in parallel (pytest-xdist)."""
    session.install("-e", ".[dev]")
    if sys.platform == "linux":  # MLX's CPU build, so the mlx backend's tests run in CI too
        session.install("mlx[cpu]>=0.20")
    args = session.posargs or ["-n", "auto", "-q"]
    session.run("pytest", *args)


@nox.session
def bench(session: nox.Session) -> None:
    """The stream sweep on the bundled tiny model."""
    session.install("-e", ".")
    args = session.posargs or ["--parallel", "1,2,4,8"]
    session.run("python", "-m", "engine", "bench", "--model", "fixtures/models/tiny-qwen3", *args)


@nox.session
def fixtures(session: nox.Session) -> None:
    """Retrain the bundled tiny models and drafters (torch on CPU, deterministic, ~12 min).

    `nox -s fixtures -- --minutes 0.3` for a quick run into fixtures/models."""
    session.install("-e", ".[train]")
    session.run("python", "-m", "fixtures.train_tiny", *session.posargs)


# sessions kept beside this file, one concern each
from noxfile_gates import *  # noqa: E402,F401,F403
from noxfile_reference import *  # noqa: E402,F401,F403
