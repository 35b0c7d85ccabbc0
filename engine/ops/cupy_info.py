"""Provenance of the cupy backend: which GPU, NVIDIA driver, CUDA and cuBLAS ran the bits.

`python -m engine capabilities --json` reports these under `backend_info.cupy`
(docs/contract.md, version 4), and the gate runner copies them into the receipt's machine
line. The formatting is plain functions so that the CPU tests can check it without a GPU.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

# keys of backend_info["cupy"], in the order the receipt shows them
KEYS = ("gpu", "driver", "cuda_driver", "cuda_runtime", "cublas", "cupy")


def cuda_version(v: int) -> str:
    """CUDA's integer version (1000 * major + 10 * minor) as 'major.minor': 13020 -> 13.2."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def cublas_version(v: int) -> str:
    """cublasGetVersion's integer (major * 10000 + minor * 100 + patch): 130100 -> 13.1.0."""
    return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"


def driver_from_proc(text: str) -> str | None:
    """The kernel module's version from /proc/driver/nvidia/version's text."""
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            for word in line.split():
                if word[:1].isdigit() and "." in word:
                    return word
    return None


def nvidia_driver() -> str:
    """The NVIDIA driver's version (580.159.04), from /proc or NVML; 'unknown' otherwise."""
    try:
        got = driver_from_proc(Path("/proc/driver/nvidia/version").read_text())
        if got:
            return got
    except OSError:
        pass
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        buf = ctypes.create_string_buffer(96)
        if nvml.nvmlInit_v2() == 0 and nvml.nvmlSystemGetDriverVersion(buf, 96) == 0:
            return buf.value.decode()
    except (OSError, AttributeError):
        pass
    return "unknown"


def device_info(cublas: int | None = None) -> dict[str, str]:
    """The facts of the current device, every value a string (KEYS, in order). `cublas`:
    the version of the library the backend calls (its Cublas().version); None opens one."""
    import cupy as cp

    rt = cp.cuda.runtime
    props = rt.getDeviceProperties(cp.cuda.Device().id)
    name: Any = props["name"]
    if cublas is None:
        from engine.ops.cupy_blas import Cublas

        cublas = Cublas().version
    return {
        "gpu": name.decode() if isinstance(name, bytes) else str(name),
        "driver": nvidia_driver(),
        "cuda_driver": cuda_version(rt.driverGetVersion()),
        "cuda_runtime": cuda_version(rt.runtimeGetVersion()),
        "cublas": cublas_version(cublas),
        "cupy": cp.__version__,
    }
