"""Which wide GEMM kernel a launch takes (engine/ops/cupy_gemm.py `wide_kernel`), on the host:
the deep staging only where asked, where the blocks are no more than the SMs and where a
block may have its shared bytes; and the bytes the host asks for match the kernel's stages."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.ops import cupy_gemm
from engine.ops.cupy_options import CupyOptions

SOURCE = Path(cupy_gemm.__file__).with_name("cupy_mma_wide.cu").read_text()


def _ops(deep: int, limit: int = 227 << 10) -> SimpleNamespace:
    return SimpleNamespace(options=dataclasses.replace(CupyOptions(), wide_deep=deep),
                           shared_limit=limit)  # fmt: skip


@pytest.mark.parametrize(
    "deep,blocks,limit,want",
    [
        (0, 128, 227 << 10, "mma_wide_gemm"),  # off: three stages
        (1, 128, 227 << 10, "mma_wide_gemm_deep"),  # the o and down GEMMs of a 512-row prompt
        (1, 132, 227 << 10, "mma_wide_gemm_deep"),  # one block an SM, every SM
        (1, 133, 227 << 10, "mma_wide_gemm"),  # more blocks than SMs
        (1, 512, 227 << 10, "mma_wide_gemm"),  # qkv: three blocks an SM already
        (1, 128, 99 << 10, "mma_wide_gemm"),  # a device whose blocks cannot have 128 KB
    ],
)
def test_wide_kernel_choice(monkeypatch, deep: int, blocks: int, limit: int, want: str) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(cupy_gemm, "sm_count", lambda: 132)
    kernel, shared = cupy_gemm.wide_kernel(_ops(deep, limit), blocks)
    assert kernel == want
    deep_bytes = cupy_gemm.WIDE_DEEP_SHARED
    assert shared == (deep_bytes if want.endswith("_deep") else cupy_gemm.WIDE_SHARED)


def test_shared_bytes_are_the_kernels_stages() -> None:
    stages = {name: int(v) for name, v in re.findall(r"#define (WIDE_\w*STAGES) (\d+)", SOURCE)}
    rows = int(re.search(r"#define WIDE_ROWS (\d+)", SOURCE).group(1))  # type: ignore[union-attr]
    per_stage = 2 * rows * cupy_gemm.MMA_CHUNK * 2  # both tiles of a chunk, bf16
    assert stages["WIDE_STAGES"] * per_stage == cupy_gemm.WIDE_SHARED
    assert stages["WIDE_DEEP_STAGES"] * per_stage == cupy_gemm.WIDE_DEEP_SHARED
    assert "mma_wide_gemm_deep" in cupy_gemm.WIDE_KERNELS
