"""cuBLAS through ctypes on an own handle (CuPy 14 refuses its own cuBLAS calls inside CUDA
graph capture). The library is the one CuPy itself loaded, so the versions agree.

Only one call shape is used: y[M, N] (f32) = x[M, K] (bf16) @ w[N, K]^T (bf16), computed in
f32 (CUBLAS_COMPUTE_32F), all row-major, at the fixed M of the backend's row tile.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from pathlib import Path

from engine.errors import EngineFailure

CUDA_R_32F, CUDA_R_16BF = 0, 14
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1
OP_N, OP_T = 0, 1
WORKSPACE_BYTES = 32 << 20


def _loaded_cublas() -> str | None:
    """The libcublas that this process has mapped (CuPy loads it for its handle)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split()[-1] if line.split() else ""
        if "/libcublas.so" in path:
            return path
    return None


def _open_library() -> ctypes.CDLL:
    import cupy

    cupy.cuda.device.get_cublas_handle()  # makes CuPy load its libcublas
    names = [
        _loaded_cublas(),
        "libcublas.so.13",
        "libcublas.so.12",
        ctypes.util.find_library("cublas"),
    ]
    for name in names:
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise EngineFailure("cupy backend: cannot load libcublas (tried CuPy's and the system's)")


class Cublas:
    """A cuBLAS handle with its own workspace, following the calling thread's CuPy stream."""

    def __init__(self) -> None:
        import cupy

        lib = _open_library()
        self.lib = lib
        self.handle = ctypes.c_void_p()
        self._check(lib.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")
        self.workspace = cupy.empty(WORKSPACE_BYTES, dtype=cupy.uint8)
        self._stream = None
        vp, i = ctypes.c_void_p, ctypes.c_int
        lib.cublasGemmEx.argtypes = [vp, i, i, i, i, i, vp, vp, i, i, vp, i, i, vp, vp, i, i, i, i]
        lib.cublasGemmEx.restype = i
        lib.cublasSetStream_v2.argtypes = [vp, vp]
        lib.cublasSetWorkspace_v2.argtypes = [vp, vp, ctypes.c_size_t]
        ver = ctypes.c_int()
        lib.cublasGetVersion_v2.argtypes = [vp, ctypes.POINTER(ctypes.c_int)]
        self._check(lib.cublasGetVersion_v2(self.handle, ctypes.byref(ver)), "cublasGetVersion")
        self.version = ver.value
        self._one = ctypes.c_float(1.0)
        self._zero = ctypes.c_float(0.0)

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise EngineFailure(f"cupy backend: {what} failed with cuBLAS status {status}")

    def _follow_stream(self) -> None:
        import cupy

        ptr = cupy.cuda.get_current_stream().ptr
        if ptr == self._stream:
            return
        # setting the stream resets the workspace: set it again after
        self._check(self.lib.cublasSetStream_v2(self.handle, ptr), "cublasSetStream")
        self._check(
            self.lib.cublasSetWorkspace_v2(self.handle, self.workspace.data.ptr, WORKSPACE_BYTES),
            "cublasSetWorkspace",
        )
        self._stream = ptr

    def gemm_bf16(self, x_ptr: int, w_ptr: int, y_ptr: int, m: int, n: int, k: int) -> None:
        """y[m, n] f32 = x[m, k] bf16 @ w[n, k]^T bf16, row-major, contiguous."""
        self._follow_stream()
        # column-major view: y^T [n, m] = w [n, k] (stored as k x n, transposed) @ x^T [k, m]
        status = self.lib.cublasGemmEx(
            self.handle, OP_T, OP_N, n, m, k,
            ctypes.addressof(self._one), w_ptr, CUDA_R_16BF, k,
            x_ptr, CUDA_R_16BF, k,
            ctypes.addressof(self._zero), y_ptr, CUDA_R_32F, n,
            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT,
        )  # fmt: skip
        self._check(status, "cublasGemmEx")
