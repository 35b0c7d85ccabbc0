"""The executor seam without Ray: bad input names what to install, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
