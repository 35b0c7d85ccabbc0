"""Backends. `get_ops(name)` returns the ops object of one backend."""

from __future__ import annotations

from engine.errors import InputError
from engine.ops.base import Ops

BACKENDS = ("numpy", "mlx", "cupy")


def get_ops(name: str) -> Ops:
    if name == "numpy":
        from engine.ops.numpy_ops import NumpyOps

        return NumpyOps()
    if name == "mlx":
        try:
            from engine.ops.mlx_ops import MlxOps
        except ImportError as exc:
            raise InputError(f"--backend mlx: mlx is not installed ({exc})") from None
        return MlxOps()
    if name == "cupy":
        try:
            from engine.ops.cupy_ops import CupyOps
        except ImportError as exc:
            raise InputError(f"--backend cupy: cupy is not installed ({exc})") from None
        return CupyOps()
    raise InputError(f"--backend: unknown backend '{name}' (choose from {', '.join(BACKENDS)})")


def available_backends() -> list[str]:
    names = ["numpy"]
    for name, module in (("mlx", "mlx.core"), ("cupy", "cupy")):
        try:
            __import__(module)
            names.append(name)
        except ImportError:
            pass
    return names
