"""The cupy backend's NVRTC modules: which sources each compiles, and the attention kernels'
table (CupyOps.attend_k, keyed by (code kind, head dim, form suffix)).

The main module holds every kernel that may run by default. The attention that stores
(options.attend_store, measured slower) and the split kernels that take a short last chunk
beside the one before (options.attend_tail, opt-in) are modules of their own, compiled only
where their option is on, so no other user pays their compile time (cupy_attend.cu's
instantiations under ENGINE_ATTEND_FS and ENGINE_ATTEND_TAIL).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cupy as cp

from engine.ops.cupy_attend_plan import ATTEND_HEAD_DIMS, SPLIT_FORMS, STAGE_DIMS
from engine.ops.cupy_kv import KINDS

# one module, in this order
_SOURCES = (
    "cupy_kernels.cu",
    "cupy_attend_store.cu",
    "cupy_attend_stage.cu",
    "cupy_attend_parts.cu",
    "cupy_attend.cu",
    "cupy_attend_tile.cu",
    "cupy_moe.cu",
    "cupy_gemm.cu",
    "cupy_mma.cu",
    "cupy_mma_wide.cu",
)
# the pair and split attention alone: the store's module, and the tail's
_FS_SOURCES = (
    "cupy_kernels.cu",
    "cupy_attend_store.cu",
    "cupy_attend_stage.cu",
    "cupy_attend_parts.cu",
    "cupy_attend.cu",
)
FS_DEFINE = "-DENGINE_ATTEND_FS"
TAIL_DEFINE = "-DENGINE_ATTEND_TAIL"  # options.attend_tail: the _tail kernels, from the same files
_OPTIONS = ("-std=c++17",)
# defines of diagnostic builds (bench/cupy_attend_phases.py sets ENGINE_ATTEND_PHASES before it
# makes its CupyOps); the engine never sets one
DIAGNOSTIC_DEFINES: list[str] = []


def code_of(sources: tuple[str, ...]) -> str:
    """The CUDA source of a module: these files of engine/ops, in order."""
    return "\n".join((Path(__file__).parent / f).read_text() for f in sources)


def main_module() -> Any:
    return cp.RawModule(code=code_of(_SOURCES), options=(*_OPTIONS, *DIAGNOSTIC_DEFINES))


def attend_kernels(
    module: Any, store: bool, tail: bool = False, built: list[Any] | None = None
) -> dict[tuple[str, int, str], Any]:
    """The attention kernels by (kind, head dim, suffix) from `module`; with `store`, the
    attention that stores too (`<split>_fs`, its module compiled here); with `tail`, the split
    kernels that take a short last chunk beside the one before (`<split>_tail`, likewise).
    The modules compiled here are appended to `built`."""
    table = {
        (kind, d, split): module.get_function(f"attend_{kind}_{d}{split}")
        for kind in KINDS
        for d in ATTEND_HEAD_DIMS
        for split in ("", "_tile", "_tile_ts", *SPLIT_FORMS)
        if split in ("", "_split") or d <= STAGE_DIMS
    }
    for wanted, define, suffix in ((store, FS_DEFINE, "_fs"), (tail, TAIL_DEFINE, "_tail")):
        if wanted:
            table |= _split_module(define, suffix, built if built is not None else [])
    return table


def _split_module(define: str, suffix: str, built: list[Any]) -> dict[tuple[str, int, str], Any]:
    """The staged split kernels `<split><suffix>` of a module compiled with `define` alone."""
    own = cp.RawModule(code=code_of(_FS_SOURCES), options=(*_OPTIONS, *DIAGNOSTIC_DEFINES, define))
    built.append(own)
    return {
        (kind, d, split + suffix): own.get_function(f"attend_{kind}_{d}{split}{suffix}")
        for kind in KINDS
        for d in ATTEND_HEAD_DIMS
        for split in SPLIT_FORMS
        if d <= STAGE_DIMS
    }
