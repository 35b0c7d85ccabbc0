"""The executor seam without Ray: bad input names what to install, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_gates

REPO = Path(__file__).resolve().parents[2]


def test_ray_missing_is_bad_input_naming_the_extra(stub_repo, monkeypatch, capsys):
    stub_repo.commit("head")
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    code, man, _ = run_gates(stub_repo, "--executor", "ray")
    err = capsys.readouterr().err.strip()
    assert (code, man) == (2, {})
    assert len(err.splitlines()) == 1 and "pip install -e '.[ray]'" in err, err


def test_an_address_without_ray_is_bad_input(stub_repo, capsys):
    stub_repo.commit("head")
    code, _, _ = run_gates(stub_repo, "--address", "auto")
    assert code == 2
    assert "--address is for --executor ray" in capsys.readouterr().err


def test_gates_imports_without_ray():
    """Ray is imported only by --executor ray: every module a plain run loads imports without."""
    code = (
        "import sys; sys.modules['ray'] = None; import gates.__main__, gates.run, gates.executors"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_one_fingerprint_is_one_kind_and_a_configuration_keeps_to_one_kind():
    rx = pytest.importorskip("gates.executors.ray")  # needs Ray importable, not a cluster
    from gates.plan import Arm, canonical

    nodes = [
        {"NodeID": "a", "Resources": {"CPU": 16, "GPU": 8}},
        {"NodeID": "b", "Resources": {"CPU": 16, "GPU": 8}},
        {"NodeID": "c", "Resources": {"CPU": 8, "GPU": 4}},
        {"NodeID": "d", "Resources": {"CPU": 2}},
    ]
    fps = {"a": "h200", "b": "h200", "c": "a100", "d": "cpu"}
    facts = {n: {"fp": fp, "machine": {"fp": fp}, "host": n} for n, fp in fps.items()}
    gpu = rx.kinds_of(nodes, facts, True)
    assert [(k.fp, k.nodes, k.capacity) for k in gpu] == [
        ("h200", ["a", "b"], 16),
        ("a100", ["c"], 4),
    ]
    assert [k.fp for k in rx.kinds_of(nodes, facts, False)] == ["h200", "a100", "cpu"]
    ex = object.__new__(rx.RayExecutor)
    ex.kinds = {True: gpu, False: []}
    seen = set()
    for p, kv, paging in [
        (p, kv, g) for p in (1, 2, 4, 8) for kv in ("bf16", "fp8") for g in ("off", "on", 24)
    ]:
        cfg = {"backend": "cupy", "kv": kv, "parallel": p, "drafter": "none", "paging": paging}
        arms = [
            Arm(s, canonical({**cfg, "drafter": d}))
            for s in ("base", "head")
            for d in ("none", "noisy")
        ]
        kinds = {ex.fingerprint(a) for a in arms}  # both sides and the noisy twin
        assert len(kinds) == 1, cfg
        seen |= kinds
    assert seen == {"h200", "a100"}  # the groups spread over both kinds
