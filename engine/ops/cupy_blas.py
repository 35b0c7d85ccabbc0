"""cuBLAS through ctypes on an own handle (CuPy 14 refuses its own cuBLAS calls inside CUDA
graph capture). The library is the one CuPy itself loaded, so the versions agree.

Only one call shape is used: y[M, N] (f32) = x[M, K] (bf16) @ w[N, K]^T (bf16), computed in
f32 (CUBLAS_COMPUTE_32F), all row-major, at the fixed M of the backend's row tile. Several
tiles go in one strided-batched call where that gives each tile the bits of its own call:
`steady_batch` finds, once per (N, K), the largest batch for which it does (at every count up
to it), so batching changes the launch count, never a bit.
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
PROBE_BYTES = 64 << 20  # steady_batch's outputs, each


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
        ll = ctypes.c_longlong
        lib.cublasGemmStridedBatchedEx.argtypes = [
            vp, i, i, i, i, i, vp, vp, i, i, ll, vp, i, i, ll, vp, vp, i, i, ll, i, i, i,
        ]  # fmt: skip
        lib.cublasGemmStridedBatchedEx.restype = i
        self._steady: dict[tuple[int, int, int, int], int] = {}
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

    def gemm_bf16_tiles(
        self, x_ptr: int, w_ptr: int, y_ptr: int, tile: int, count: int, n: int, k: int
    ) -> None:
        """`count` tiles of `tile` rows, each y[t] = x[t] @ w^T, in one strided-batched call
        (w shared: stride 0)."""
        self._follow_stream()
        status = self.lib.cublasGemmStridedBatchedEx(
            self.handle, OP_T, OP_N, n, tile, k,
            ctypes.addressof(self._one), w_ptr, CUDA_R_16BF, k, 0,
            x_ptr, CUDA_R_16BF, k, tile * k,
            ctypes.addressof(self._zero), y_ptr, CUDA_R_32F, n, tile * n,
            count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT,
        )  # fmt: skip
        self._check(status, "cublasGemmStridedBatchedEx")

    def steady_batch(self, w_ptr: int, n: int, k: int, tile: int, most: int) -> int:
        """The largest c <= most such that a batched call of every count b <= c gives each
        tile the bits of its own cublasGemmEx call, for the weight at w_ptr (bf16 [n, k])
        and random bf16 rows; 1 where none does. cuBLAS picks its kernel by shape and
        count, not by values, so this runs once per (N, K); `most` shrinks so that the
        probe's two outputs stay under PROBE_BYTES each (a 152k vocabulary head: 13)."""
        import cupy

        most = max(1, min(most, PROBE_BYTES // (n * tile * 4)))
        key = (n, k, tile, most)
        if key in self._steady:
            return self._steady[key]
        rs = cupy.random.RandomState(n * 7919 + k)
        bits = rs.standard_normal((most * tile, k), dtype=cupy.float32).view(cupy.uint32)
        x = (bits >> 16).astype(cupy.uint16)
        want = cupy.empty((most * tile, n), dtype=cupy.float32)
        for t in range(most):
            off = t * tile
            self.gemm_bf16(x[off:].data.ptr, w_ptr, want[off:].data.ptr, tile, n, k)
        got = cupy.empty_like(want)
        best = 1
        for count in range(2, most + 1):
            self.gemm_bf16_tiles(x.data.ptr, w_ptr, got.data.ptr, tile, count, n, k)
            rows = count * tile
            if not bool((got[:rows].view(cupy.uint32) == want[:rows].view(cupy.uint32)).all()):
                break
            best = count
        self._steady[key] = best
        return best
