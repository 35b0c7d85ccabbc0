"""The cupy backend's module table without a GPU (a stand-in for cupy.RawModule records what
is compiled and looked up): every attention form the plan can choose has its kernel in the
table, and the attention that stores comes from a module of its own, built only when asked."""

from __future__ import annotations

import importlib
import sys
import types

import numpy as np
import pytest

from engine.ops.cupy_attend_plan import ATTEND_HEAD_DIMS, choose
from engine.ops.cupy_options import CupyOptions


class _Module:
    made: list[_Module] = []

    def __init__(self, code: str, options: tuple[str, ...]) -> None:
        self.code, self.options, self.names = code, options, []
        _Module.made.append(self)

    def get_function(self, name: str) -> str:
        self.names.append(name)
        return name


@pytest.fixture
def modules(monkeypatch):  # type: ignore[no-untyped-def]
    fake = types.ModuleType("cupy")
    fake.RawModule = _Module  # type: ignore[attr-defined]
    for name in ("uint8", "uint16", "float32"):
        setattr(fake, name, getattr(np, name))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    for name in ("engine.ops.cupy_kv", "engine.ops.cupy_modules"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    _Module.made = []
    yield importlib.import_module("engine.ops.cupy_modules")
    for name in ("engine.ops.cupy_kv", "engine.ops.cupy_modules"):
        sys.modules.pop(name, None)


def test_every_form_the_plan_chooses_has_its_kernel(modules) -> None:  # type: ignore[no-untyped-def]
    table = modules.attend_kernels(modules.main_module(), store=False)
    opts = [CupyOptions(), CupyOptions(attend_thread_scores=0), CupyOptions(attend_heads_from=0)]
    for kind in ("f32", "bf16", "fp8"):
        for d in ATTEND_HEAD_DIMS:
            for hq, hkv in ((16, 8), (8, 2), (32, 8), (8, 8)):
                for n in (1, 8, 63, 64, 512):
                    for o in opts:
                        form = choose(n, hq, hkv, d, kind, o, 227 << 10)
                        assert (kind, d, form.kernel) in table, (kind, d, n, hq, hkv, form)
    assert not any(k[2].endswith("_fs") for k in table)
    assert len(_Module.made) == 1  # the store's module is not compiled


def test_the_store_is_a_module_of_its_own(modules) -> None:  # type: ignore[no-untyped-def]
    table = modules.attend_kernels(modules.main_module(), store=True)
    main, fs = _Module.made
    assert modules.FS_DEFINE in fs.options and modules.FS_DEFINE not in main.options
    assert all(name.endswith("_fs") for name in fs.names)
    assert not any(name.endswith("_fs") for name in main.names)
    assert "ENGINE_ATTEND_FS" in fs.code  # the guard the define selects
    for kind in ("f32", "bf16", "fp8"):
        for d in (32, 64, 128):
            for split in ("_split", "_split2", "_split4"):
                assert (kind, d, split + "_fs") in table


def test_the_tail_is_a_module_of_its_own(modules) -> None:  # type: ignore[no-untyped-def]
    """options.attend_tail: the _tail kernels come from a module compiled with its define
    (nothing else built twice), one for every staged split form the plan takes."""
    built: list = []
    table = modules.attend_kernels(modules.main_module(), store=False, tail=True, built=built)
    main, tails = _Module.made
    assert built == [tails]  # kept for the phases tool, which reads each module's own log
    assert modules.TAIL_DEFINE in tails.options and modules.TAIL_DEFINE not in main.options
    assert all(name.endswith("_tail") for name in tails.names)
    assert "ENGINE_ATTEND_TAIL" in tails.code
    opts = CupyOptions(attend_tail=1)
    for kind in ("f32", "bf16", "fp8"):
        for d in (32, 64, 128):
            for n, hq, hkv in ((1, 16, 8), (8, 16, 8), (4, 32, 8)):
                form = choose(n, hq, hkv, d, kind, opts, 227 << 10)
                assert form.thread_scores and (kind, d, form.kernel + "_tail") in table


def test_every_mma_kernel_the_gemm_chooses_is_compiled_and_looked_up(modules) -> None:  # type: ignore[no-untyped-def]
    """cupy_gemm.mma_kernel's names are in the table CupyOps looks up, each defined in the
    source; the fitted kernels serve one tile only: two chunks in flight where a warp has at
    most two (0.6B: qkv and gate/up, K 1024), six where it has five or six (down, K 3072),
    else four (o, K 2048); blocks of 8 outputs where blocks of 16 would fill at most half the
    SMs (o and down, N 1024, on 132 SMs; not on 64)."""
    from pathlib import Path

    from engine.ops import cupy_gemm

    source = (Path(modules.__file__).parent / "cupy_mma.cu").read_text()
    for kind in ("gemm", "silu"):
        for t in cupy_gemm.MMA_TILES:
            for k in (64, 128, 384, 512, 1024, 1088, 2048, 3072, 4096):
                for n, sms in ((1024, 132), (1024, 64), (1056, 132), (1072, 132), (4096, 132)):
                    name = cupy_gemm.mma_kernel(kind, t, k, n, sms)
                    assert name in cupy_gemm.MMA_KERNELS, name
                    if name != f"mma_{kind}_{t}":  # a fitted kernel: defined by its name
                        assert f"{name}(" in source, name
                    assert name.endswith("1u2") == (t == 1 and k <= 1024), (kind, t, k)
                    long = t == 1 and kind == "gemm" and 2048 < k <= 3072
                    assert name.rstrip("h").endswith("1u6") == long, (kind, t, k)
                    small = (n, sms) in ((1024, 132), (1056, 132))  # 64 or 66 blocks of 16
                    half = t == 1 and kind == "gemm" and k > 1024 and small
                    assert name.endswith("h") == half, (kind, t, k, n, sms)
                    plain = cupy_gemm.mma_kernel(kind, t, k, n, sms, fit=False)
                    assert plain == f"mma_{kind}_{t}"
