"""`run --shard i/n` and `merge`: shards of one run joined == one unsharded run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import arm_config, git, run_gates
from gates.__main__ import main
from gates.plan.build import Arm
from gates.run.info import RunInfo
from gates.run.shard import group_index, select

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "fixtures" / "models" / "tiny-qwen3"


def verdicts(man: dict) -> list[tuple]:
    """What a receipt decides: per gate its status, counts and cells, and the verdict."""
    gates = [(g["name"], g["status"], g["matched"], g["total"], g["cells"]) for g in man["gates"]]
    return [man["verdict"], man["exit_code"], *gates]


def run_shards(
    root: Path, out: Path, n: int, *args: str, base: str, head: str, matrix: str
) -> list[str]:
    paths = []
    for i in range(1, n + 1):
        code = main(
            ["run", "--repo", str(root), "--base", base, "--head", head, "--matrix", matrix]
            + ["--quiet", "--out", str(out), "--shard", f"{i}/{n}", *args]
        )
        assert code == 0
        paths += [str(p) for p in out.glob(f"*.shard-{i}-of-{n}.json")]
    assert len(paths) == n
    return paths


def merge(root: Path, out: Path, *paths: str) -> tuple[int, dict]:
    code = main(["merge", "--repo", str(root), "--out", str(out), *paths])
    found = [p for p in out.glob("*.json") if ".shard-" not in p.name]
    return code, (json.loads(found[0].read_text()) if found else {})


def test_select_splits_arms_keeping_sides_and_truth_twins_together():
    def arm(side: str, drafter: str, p: int) -> Arm:
        return Arm(side, arm_config(drafter=drafter, parallel=p).canonical())

    drafters = ("none", "noisy", "mtp")
    arms = [arm(s, d, p) for p in (1, 4) for d in drafters for s in ("base", "head")]
    parts = [select(arms, i, 3) for i in (1, 2, 3)]
    every = [a for part in parts for a in part]
    assert len(every) == len(arms) and set(every) == set(arms)  # each arm exactly once
    assert all(parts)
    index = group_index(arms)
    for part in parts:
        for a in part:  # the other side of a config, and a noisy arm's plain twin, come along
            assert all(b in part for b in arms if index[b] == index[a])
    assert index[arm("head", "noisy", 4)] == index[arm("base", "none", 4)]
    assert index[arm("head", "mtp", 4)] != index[arm("base", "none", 4)]


def test_two_shards_merged_equal_one_unsharded_run(stub_repo, tmp_path):
    stub_repo.commit("head changes tokens", OUTPUT_SALT="h", LEAK_PAGES=1)
    code, whole, _ = run_gates(stub_repo, matrix="matrices/t.yaml")
    assert code == 1
    out = tmp_path / "shards"
    paths = run_shards(
        stub_repo.root, out, 2, "--no-cache", base="main~1", head="main", matrix="matrices/t.yaml"
    )
    shards = [json.loads(Path(p).read_text()) for p in paths]
    assert all(s["ran"] > 0 for s in shards)  # --no-cache: each shard really ran its arms
    assert sum(len(s["arms"]) for s in shards) == whole["matrix"]["arms"]
    code, merged = merge(stub_repo.root, tmp_path / "merged", *paths)
    assert code == 1
    assert verdicts(merged) == verdicts(whole)
    assert [a["id"] for a in merged["arms"]] == [a["id"] for a in whole["arms"]]
    assert [s["shard"] for s in merged["shards"]] == [1, 2]
    assert merged["matrix"]["ran"] == sum(s["ran"] for s in shards)
    run = shards[0]["run"]  # the run's facts read back as written (RunInfo), sides and all
    assert json.dumps(RunInfo.from_json(run).to_json()) == json.dumps(run)
    assert (merged["base"], merged["head"]) == (run["base"], run["head"])


def test_merge_refuses_missing_twice_and_foreign_shards(stub_repo, tmp_path, capsys):
    base = git(stub_repo.root, "rev-parse", "HEAD")
    stub_repo.commit("head")
    a = run_shards(stub_repo.root, tmp_path / "a", 2, base=base, head="main", matrix="small")
    stub_repo.commit("another head", OUTPUT_SALT="x")
    b = run_shards(stub_repo.root, tmp_path / "b", 2, base=base, head="main", matrix="small")
    root, out = stub_repo.root, tmp_path / "out"
    capsys.readouterr()
    cases = [
        ([a[0]], "shard 2/2 missing"),
        ([a[0], a[0]], "given twice"),
        ([a[0], b[1]], "head "),
        ([a[0], str(root / "matrices" / "small.yaml")], "not a shard manifest"),
    ]
    for paths, why in cases:
        code, man = merge(root, out, *paths)
        err = capsys.readouterr().err.strip()
        assert (code, man) == (2, {}), paths
        assert len(err.splitlines()) == 1 and why in err, err
    assert main(["show", "--repo", str(root), a[0]]) == 2  # a shard is not a receipt
    assert "join shards with `merge`" in capsys.readouterr().err
    (root / "matrices" / "small.yaml").write_text(
        (root / "matrices" / "small.yaml").read_text().replace("timeout: 20", "timeout: 21")
    )
    assert merge(root, out, *a)[0] == 2
    assert "not the matrix file the shards ran" in capsys.readouterr().err


@pytest.mark.skipif(not MODEL.is_dir(), reason="no bundled model in this tree")
def test_shards_on_the_tiny_model_merge_to_the_unsharded_verdicts(tmp_path, monkeypatch):
    monkeypatch.setenv("GATES_CACHE", str(tmp_path / "cache"))
    matrix = tmp_path / "tiny.yaml"
    matrix.write_text(
        f"model: {MODEL}\nbackend: numpy\nprompts: chats\nmax_tokens: 4\ntimeout: 300\n"
        "axes:\n  kv: [bf16]\n  parallel: [1, 2]\n  paging: [off]\n"
        "gates:\n  - name: flags unset == main\n    across_commits: {}\n"
        "  - name: concurrent == solo\n    within_commit: {vary: parallel, reference: serial}\n"
        "  - name: drafted == plain\n"
        "    within_commit: {vary: drafter, values: [noisy, mtp], reference: none}\n"
        "    where: {parallel: 2}\n"
        "  - name: no pages at idle\n    resource: {pages_in_use: 0, unplanned_allocations: 0}\n"
    )
    whole_out, shard_out = tmp_path / "whole", tmp_path / "shards"
    args = ["--repo", str(REPO), "--base", "HEAD", "--head", "HEAD", "--matrix", str(matrix)]
    assert main(["run", *args, "--quiet", "--out", str(whole_out)]) == 0
    whole = json.loads(next(whole_out.glob("*.json")).read_text())
    paths = run_shards(
        REPO, shard_out, 2, "--no-cache", base="HEAD", head="HEAD", matrix=str(matrix)
    )
    code, merged = merge(REPO, tmp_path / "merged", *paths)
    assert code == 0
    assert verdicts(merged) == verdicts(whole)
    assert all(g["status"] == "pass" for g in merged["gates"])
    main(["clean", "--repo", str(REPO)])
