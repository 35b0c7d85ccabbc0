"""The marks every cupy test module carries: `gpu`, and skipped where the cupy backend cannot
run here (the reason says why)."""

from __future__ import annotations

import pytest

from engine.ops import cupy_problem

GPU_ONLY = [
    pytest.mark.gpu,
    pytest.mark.skipif(cupy_problem() is not None, reason=f"cupy backend: {cupy_problem()}"),
]
