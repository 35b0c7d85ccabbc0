"""Per-commit environments: a head that changes the dependency spec runs in its own virtualenv."""

from __future__ import annotations

import subprocess
import sys

import git

from conftest import run_gates
from gates.run import envs


def imports(python: str, module: str) -> bool:
    return subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode == 0


def test_same_spec_shares_the_runners_environment(stub_repo):
    stub_repo.commit("head")
    code, man, md = run_gates(stub_repo)
    assert code == 0, md
    assert {e["kind"] for e in man["environments"].values()} == {"shared"}
    assert "environments: one environment for both sides" in md


def test_a_head_that_adds_a_dependency_runs_in_its_own_cached_virtualenv(stub_repo):
    (stub_repo.root / "pyproject.toml").write_text(
        '[project]\nname = "stub"\nversion = "0"\ndependencies = ["termcolor"]\n'
    )
    stub_repo.commit("head needs termcolor", REQUIRE_MODULE="termcolor")
    code, man, md = run_gates(stub_repo)
    assert code == 0, md
    base, head = man["environments"]["base"], man["environments"]["head"]
    assert (base["kind"], head["kind"]) == ("own", "own")
    assert head["spec"] == ["termcolor"] and base["spec"] == [] and base["key"] != head["key"]
    assert imports(head["python"], "termcolor") and not imports(base["python"], "termcolor")
    assert not imports(sys.executable, "termcolor")  # so head's arms ran in its own env
    assert f"head in its own virtualenv `{head['key']}`" in md
    assert "the dependency specs differ" in md
    # cached: a second run makes no environment and runs no arm again
    code2, man2, _ = run_gates(stub_repo)
    assert (code2, man2["matrix"]["ran"]) == (0, 0)
    assert man2["environments"] == man["environments"]


def test_spec_reads_dependencies_and_the_backends_extras(stub_repo):
    (stub_repo.root / "pyproject.toml").write_text(
        '[project]\nname = "s"\nversion = "0"\ndependencies = ["b>=1", "a"]\n'
        '[project.optional-dependencies]\nmlx = ["mlx>=0.2"]\ncuda = ["cupy-cuda12x"]\n'
        'dev = ["pytest"]\n'
    )
    sha = stub_repo.commit("spec")
    repo = git.Repo(stub_repo.root)
    assert envs.spec(repo, sha, ["numpy"]) == ["a", "b>=1"]
    assert envs.spec(repo, sha, ["numpy", "mlx"]) == ["a", "b>=1", "mlx>=0.2"]
    assert envs.spec(repo, sha, ["cupy"]) == ["a", "b>=1", "cupy-cuda12x"]
    assert envs.spec(repo, f"{sha}~1", ["numpy"]) == []  # no pyproject.toml
