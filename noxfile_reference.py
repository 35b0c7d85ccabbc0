"""nox session `reference`: our greedy ids and logits against code no one here wrote.

    nox -s reference [-- pytest args]

Installs this project with torch (pinned exactly: an unpinned torch may resolve to a
multi-GB CUDA build) and Hugging Face transformers, and, where it installs (mlx ships CPU
wheels for Linux as `mlx[cpu]`), mlx-lm; then runs tests/reference. Not part of the everyday
`tests` session; .ci/run runs it. What is compared and the tolerances: docs/reference.md.
"""

from __future__ import annotations

import nox
from nox.command import CommandFailed

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
