"""Typos in a matrix are bad input (exit 2, the key named), never a green "not comparable"."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from conftest import arm_config, run_gates
from gates import BadInput
from gates.judge.kinds import KINDS
from gates.plan import matrix
from gates.run import validate
from gates.run.capabilities import Capabilities
from gates.run.results import ArmResult, Status

CAPS = Capabilities(kv=("bf16", "fp8"), drafters=("none", "mtp"), env_flags=("ENGINE_X",))
BF16 = dataclasses.replace(CAPS, kv=("bf16",))
HEAD = "model: m\nprompts: p\n"


def load(tmp_path: Path, text: str) -> matrix.Matrix:
    p = tmp_path / "m.yaml"
    p.write_text(text)
    return matrix.load(p, KINDS)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("axes: {kv: [bf16, fp4]}\ngates: [{name: g, across_commits: {}}]", "axes.kv[1]"),
        ("kv: fp4\ngates: [{name: g, across_commits: {}}]", "kv"),
        ("gates: [{name: g, across_commits: {}, where: {kv: fp4}}]", "gates[0].where.kv[0]"),
        (
            "gates: [{name: g, within_commit: {vary: drafter, values: [warp], reference: none}}]",
            "gates[0].within_commit.values[0]",
        ),
        (
            "gates: [{name: g, acceptance_across_commits: {drafter: [mpt]}}]",
            "gates[0].acceptance_across_commits.drafter[0]",
        ),
        (
            "axes: {flags: [{}, {ENGINE_Y: 1}]}\ngates: [{name: g, across_commits: {}}]",
            "axes.flags[1].ENGINE_Y",
        ),
    ],
)
def test_values_no_engine_knows_are_bad_input(tmp_path, text, key):
    m = load(tmp_path, HEAD + text)
    with pytest.raises(BadInput) as e:
        validate.against_capabilities(m, [CAPS, BF16])
    assert str(e.value).startswith(f"{m.path}: {key}: expected"), str(e.value)


def test_a_value_one_engine_knows_is_fine(tmp_path):
    m = load(tmp_path, HEAD + "axes: {kv: [bf16, fp8]}\ngates: [{name: g, across_commits: {}}]")
    validate.against_capabilities(m, [BF16, CAPS])


def test_an_axis_value_refused_on_both_commits_is_named(tmp_path):
    m = load(tmp_path, HEAD + "axes: {parallel: [1, 100]}\ngates: [{name: g, across_commits: {}}]")
    why = "at most 64 lanes"
    arms = [
        ArmResult("a", config=arm_config(parallel=1), status=Status.OK),
        ArmResult("b", config=arm_config(parallel=100), status=Status.REFUSED, reason=why),
        ArmResult("c", config=arm_config(parallel=100), status=Status.REFUSED, reason=why),
    ]
    (line,) = validate.values_run_nowhere(m, arms)
    assert "axes.parallel: 100 ran on neither commit: at most 64 lanes" in line
    arms[1] = dataclasses.replace(arms[1], status=Status.OK)  # one commit ran it: n/c, no typo
    assert validate.values_run_nowhere(m, arms) == []


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [
        ("kv: [bf16, fp8]", "kv: [bf16, fp4]", "axes.kv[1]: expected a kv"),
        ("parallel: [4]", "parallel: [1, 100]", "axes.parallel: 100 ran on neither commit"),
        ("paging: [on]", "paging: [on]\n  drafter: [none, warp]", "axes.drafter[1]: expected"),
        (
            "across_commits: {}",
            "across_commits: {}\n    where: {kv: fp4}",
            "gates[0].where.kv[0]: expected a kv",
        ),
    ],
)
def test_a_matrix_typo_is_exit_2_naming_file_and_key(stub_repo, capsys, old, new, named):
    """Each matrix typo of issue 10 through `gates run`: exit 2 (it was 0 or 3), one line
    naming the matrix file and the key."""
    bad = stub_repo.root / "matrices" / "typo.yaml"
    text = (stub_repo.root / "matrices" / "small.yaml").read_text()
    assert old in text
    bad.write_text(text.replace(old, new, 1))
    stub_repo.commit("head", OUTPUT_SALT="")
    code, _, md = run_gates(stub_repo, matrix="matrices/typo.yaml")
    err = capsys.readouterr().err
    assert code == 2, (err, md[:300])
    assert f"{bad}: {named}" in err + md, err


@pytest.mark.parametrize("where", ["a-file/x", "/proc/x"])
def test_an_out_folder_that_cannot_hold_a_receipt_fails_before_any_arm(stub_repo, capsys, where):
    from gates.__main__ import main

    if where.startswith("/proc") and not Path("/proc/self").is_dir():
        pytest.skip("no /proc here")
    (stub_repo.root / "a-file").write_text("")
    out = where if where.startswith("/") else str(stub_repo.root / where)
    repo = str(stub_repo.root)
    argv = ["run", "--repo", repo, "--base", "main", "--head", "main", "--matrix"]
    code = main([*argv, "matrices/small.yaml", "--quiet", "--out", out])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"gates: error: --out {out}: cannot write") and err.count("\n") == 1
    assert not (Path(os.environ["GATES_CACHE"]) / "runs").exists()  # no arm ran


def test_a_receipt_stays_under_githubs_comment_size(stub_repo, tmp_path):
    from gates.report.receipt import render

    stub_repo.commit("head", OUTPUT_SALT="")
    code, man, md = run_gates(stub_repo)
    assert code == 0 and "| --- |" in md and "|--" not in md  # unpadded tables
    man["arms"] = man["arms"] * 3000  # a matrix far wider than any bundled one
    md_path, _ = render.write(man, tmp_path)
    text = md_path.read_text()
    assert len(text) <= render.MAX_MARKDOWN
    full = md_path.with_name(md_path.name.replace(".md", ".full.md"))
    assert full.is_file() and len(full.read_text()) > render.MAX_MARKDOWN
    assert full.name in text and man["verdict"] in text
    assert md_path.name.endswith(".small.md")  # the matrix's name is in the file name
    assert oct(md_path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask
