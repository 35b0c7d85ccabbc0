"""capabilities' `backend_info` (contract 4): the cupy backend's provenance facts, checked on
the CPU with a stand-in device, and read by the gate runner under the same field name."""

from __future__ import annotations

import engine.ops
from engine.cli.capabilities import capabilities
from engine.ops import cupy_info

PROC = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Thu Oct  2 05:38:18 UTC 2025\n"
    "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n"
)


def test_versions_read_as_people_write_them() -> None:
    assert cupy_info.cuda_version(13020) == "13.2"
    assert cupy_info.cuda_version(12080) == "12.8"
    assert cupy_info.cublas_version(130100) == "13.1.0"
    assert cupy_info.cublas_version(120904) == "12.9.4"
    assert cupy_info.driver_from_proc(PROC) == "580.159.04"
    assert cupy_info.driver_from_proc("no driver here") is None


def test_capabilities_carry_the_cupy_facts(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from gates.report.receipt import render
    from gates.run import contract
    from gates.run.capabilities import Capabilities

    fake = dict(
        zip(cupy_info.KEYS, ("GPU X", "1.2.3", "13.0", "13.2", "13.1.0", "14.2.0"), strict=True)
    )
    monkeypatch.setattr(engine.ops, "cupy_problem", lambda: None)
    monkeypatch.setattr(cupy_info, "device_info", lambda cublas=None: dict(fake))
    caps = capabilities()
    assert caps["contract"] >= 4
    assert caps[contract.BACKEND_INFO] == {"cupy": fake}
    facts = contract.backend_facts([Capabilities.from_json(caps)], ["cupy"])["cupy"]
    line = render.backend_facts_text("cupy", facts)
    assert line == (
        "cupy on GPU X (driver 1.2.3, CUDA driver API 13.0, CUDA runtime 13.2, "
        "cuBLAS 13.1.0, CuPy 14.2.0)"
    )


def test_a_failing_device_is_reported_not_raised(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def broken(cublas=None):  # type: ignore[no-untyped-def]
        raise RuntimeError("cublasCreate failed\nmore")

    monkeypatch.setattr(engine.ops, "cupy_problem", lambda: None)
    monkeypatch.setattr(cupy_info, "device_info", broken)
    assert engine.ops.backend_info() == {"cupy": {"error": "cublasCreate failed"}}


def test_without_cupy_there_are_no_facts(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(engine.ops, "cupy_problem", lambda: "cupy is not installed")
    assert engine.ops.backend_info() == {}
