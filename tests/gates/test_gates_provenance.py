"""The receipt names the GPU, driver, CUDA and cuBLAS that the engine reports in
capabilities' `backend_info` (docs/contract.md, version 4), read by field name."""

from __future__ import annotations

from gates.report.receipt import render
from gates.run import contract
from gates.run.capabilities import Capabilities
from tests.gates.conftest import SMALL, run_gates

FACTS = {
    "gpu": "Stub GPU 141GB",
    "driver": "580.1.2",
    "cuda_driver": "13.0",
    "cuda_runtime": "13.2",
    "cublas": "13.1.0",
    "cupy": "14.2.0",
}
LINE = (
    "cupy on Stub GPU 141GB (driver 580.1.2, CUDA driver API 13.0, CUDA runtime 13.2, "
    "cuBLAS 13.1.0, CuPy 14.2.0)"
)


def test_the_receipt_names_the_gpu_and_libraries_the_engine_reports(stub_repo):
    (stub_repo.root / "matrices" / "gpu.yaml").write_text(
        SMALL.replace("prompts: t", "prompts: t\nbackend: cupy")
    )
    stub_repo.commit("head", CUPY_INFO=FACTS)
    code, man, receipt = run_gates(stub_repo, "--no-speed", matrix="matrices/gpu.yaml")
    assert man, receipt
    assert man["machine"]["backends"] == {"cupy": FACTS}
    assert LINE in receipt


def test_a_numpy_matrix_records_no_backend_facts(stub_repo):
    stub_repo.commit("head", CUPY_INFO=FACTS)
    code, man, receipt = run_gates(stub_repo, "--no-speed")
    assert man["machine"]["backends"] == {}
    assert "cuBLAS" not in receipt


def test_facts_come_from_whichever_side_reports_them():
    old = Capabilities.from_json({"contract": 3, "backends": ["cupy"]})  # no backend_info
    new = Capabilities.from_json({"contract": 4, "backend_info": {"cupy": FACTS, "numpy": {}}})
    assert contract.backend_facts([old, None, new], ["cupy", "numpy"]) == {"cupy": FACTS}
    assert contract.backend_facts([old], ["cupy"]) == {}
    assert render.backend_facts_text("cupy", FACTS) == LINE
    assert render.backend_facts_text("cupy", {"error": "boom"}) == "cupy (error boom)"
