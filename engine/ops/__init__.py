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
        problem = cupy_problem()
        if problem:
            raise InputError(f"--backend cupy: {problem}")
        from engine.ops.cupy_ops import CupyOps
        from engine.ops.cupy_options import CupyOptions

        return CupyOps(CupyOptions.from_environ())
    raise InputError(f"--backend: unknown backend '{name}' (choose from {', '.join(BACKENDS)})")


def cupy_problem() -> str | None:
    """Why the cupy backend cannot run here (None: it can): cupy missing, no CUDA device,
    or a device that fails a first kernel."""
    try:
        import cupy
    except ImportError as exc:
        return f"cupy is not installed ({exc}); pip install 'exact-engine[cuda]'"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "cupy is installed but sees no CUDA device"
        if int((cupy.arange(4, dtype=cupy.int32) + 1).sum()) != 10:
            return "cupy is installed but a first kernel gave a wrong result"
    except Exception as exc:  # CUDARuntimeError, CompileException, missing driver libraries
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"cupy is installed but CUDA does not work here ({first})"
    return None


def available_backends() -> list[str]:
    names = ["numpy"]
    try:
        __import__("mlx.core")
        names.append("mlx")
    except ImportError:
        pass
    if cupy_problem() is None:
        names.append("cupy")
    return names


def backend_info() -> dict[str, dict[str, str]]:
    """Facts about the hardware and libraries behind each backend that has any, for
    provenance (capabilities' `backend_info`, docs/contract.md): cupy names its GPU, the
    NVIDIA driver, the CUDA driver API and runtime, cuBLAS and CuPy (cupy_info.KEYS)."""
    info: dict[str, dict[str, str]] = {}
    if cupy_problem() is None:
        try:
            from engine.ops.cupy_info import device_info

            info["cupy"] = device_info()
        except Exception as exc:  # a library that loads but fails; say so, not crash
            info["cupy"] = {"error": str(exc).strip().splitlines()[0] if str(exc) else repr(exc)}
    return info
