"""Kernel launches with programmatic dependent launch (PDL) inside CUDA graph captures.

A decode step is a few hundred small kernels, and in a replayed graph each still waits for
the one before to drain before its own blocks are launched. Captured with the programmatic
stream serialization attribute (cuLaunchKernelEx, driver API through ctypes: CuPy's launch
takes no attributes), a kernel's blocks are launched while the kernel before finishes. Every
kernel of ours begins with `griddepcontrol.wait` (PDL_ENTRY, cupy_kernels.cu): it waits
there until the grid before has completed and its memory is visible, before it reads or
writes anything. So the kernels, their order and every sum are what they were: the same
bits; only launch latency is hidden. CupyOps hands a graph's body these launches (its
warm-up and its capture); eager launches elsewhere keep CuPy's own call, with no wrapper.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import cupy as cp
import numpy as np

from engine.errors import EngineFailure

NULL = np.uint64(0)


def or_null(a: Any) -> Any:
    """A kernel's optional array argument: the array, or a null pointer."""
    return a if a is not None else NULL


_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
_SCALARS = {
    np.dtype(np.int32): ctypes.c_int32,
    np.dtype(np.int64): ctypes.c_int64,
    np.dtype(np.uint64): ctypes.c_uint64,
    np.dtype(np.float32): ctypes.c_float,
}


class _Attribute(ctypes.Structure):  # CUlaunchAttribute: id, padding, a 64-byte union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class _Config(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared", ctypes.c_uint),
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(_Attribute)),
        ("num_attrs", ctypes.c_uint),
    ]


_ATTR = _Attribute(id=_PROGRAMMATIC_STREAM_SERIALIZATION)
_ATTR.value[0] = 1
_driver: Any = None


def _launch_ex() -> Any:
    global _driver
    if _driver is None:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuLaunchKernelEx
        fn.argtypes = [ctypes.POINTER(_Config), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        fn.restype = ctypes.c_int
        _driver = fn
    return _driver


def _param(a: Any) -> Any:
    if isinstance(a, cp.ndarray):
        return ctypes.c_void_p(a.data.ptr)
    if isinstance(a, np.generic) and a.dtype in _SCALARS:
        return _SCALARS[a.dtype](a.item())
    raise TypeError(f"cupy launch: an argument of type {type(a).__name__}")


def _dims(d: tuple[int, ...]) -> Any:
    return (ctypes.c_uint * 3)(*d, *(1,) * (3 - len(d)))


class PdlKernel:
    """A RawKernel's call, `(grid, block, args, shared_mem=)`, launched with the PDL
    attribute through cuLaunchKernelEx on the current stream. Attributes set on the
    RawKernel (its dynamic shared memory) hold: the launch takes its function handle."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(
        self, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...], **kw: int
    ) -> None:
        held = [_param(a) for a in args]
        params = (ctypes.c_void_p * len(held))(*(ctypes.addressof(h) for h in held))
        stream = cp.cuda.get_current_stream().ptr
        cfg = _Config(_dims(grid), _dims(block), kw.get("shared_mem", 0), stream,
                      ctypes.pointer(_ATTR), 1)  # fmt: skip
        rc = _launch_ex()(ctypes.byref(cfg), self.fn.kernel.ptr, params, None)
        if rc:
            raise EngineFailure(f"cupy launch: cuLaunchKernelEx failed (CUresult {rc})")


def pdl_kernels(*tables: dict[Any, Any]) -> tuple[dict[Any, PdlKernel], ...]:
    """Each table of RawKernels as PdlKernels: what a graph's body launches."""
    return tuple({n: PdlKernel(f) for n, f in t.items()} for t in tables)


def pdl_body(ops: Any, body: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """body, launching ops' kernels with PDL while it runs (a graph's warm-up and capture),
    where ops.options.pdl; eager launches elsewhere keep CuPy's own call."""
    if not ops.options.pdl:
        return body

    def with_pdl(owner: Any, dev: Any) -> Any:
        plain = ops.k, ops.attend_k
        ops.k, ops.attend_k = ops.pdl_kernels
        try:
            return body(owner, dev)
        finally:
            ops.k, ops.attend_k = plain

    return with_pdl
