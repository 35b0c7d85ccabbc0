"""Accepting a named speed cell's slowdown: by a commit trailer or a PR label; the receipt
records who accepted what, and only every slower cell accepted lets the speed part pass."""

from __future__ import annotations

import json

import pytest

from gates import BadInput
from gates.judge.results import GateResult
from gates.report import accept
from gates.report.receipt import render
from gates.report.view import Manifest
from gates.run.results import Status
from tests.gates.conftest import git, run_gates
from tests.gates.test_speed import _speed_result

ALICE = {"cell": "decode_cpu_s_per_token@1", "by": "@alice", "via": "label x"}


def _man(accepted: list[dict]) -> dict:
    gate = GateResult("g", "across_commits", Status.PASS, 1, 1)
    man = {"gates": [gate], "arms": [], "speed": _speed_result(1.05).to_json()}
    accept.apply(man, accepted)
    return man


def test_one_accepted_cell_of_eight_slower_still_fails_but_is_named():
    man = _man([ALICE])
    assert render.verdict(Manifest.parse(man)) == ("❌ 1 gate failed: speed", 1)
    by = {f"{c['metric']}@{c['parallel']}": c.get("accepted_by") for c in man["speed"]["cells"]}
    assert by["decode_cpu_s_per_token@1"] == "@alice (label x)"
    assert sum(v is not None for v in by.values()) == 1
    assert man["accepted"] == [ALICE | {"applied": True}]


def test_every_slower_cell_accepted_passes_and_says_who():
    cells = [f"{m}@{n}" for m in ("decode_cpu_s_per_token", "decode_tok_s") for n in (1, 2, 4, 8)]
    taken = [{"cell": c, "by": "Ann <a@x>", "via": "trailer abc"} for c in cells]
    man = _man([*taken, {"cell": "ttft_ms@1", "by": "@bob", "via": "label y"}])
    verdict, code = render.verdict(Manifest.parse(man))
    assert code == 0 and verdict.startswith("✅ all hold (slower decode_cpu_s_per_token@1, ")
    lines = accept.lines(Manifest.parse(man))
    assert lines[0] == "slower `decode_cpu_s_per_token@1` accepted by Ann <a@x> (trailer abc)"
    assert lines[-1] == "`ttft_ms@1` accepted by @bob (label y), but it is not slower"


def test_trailers_on_the_branch_are_read_with_their_author(stub_repo):
    from gates.run import refs

    msg = (
        "slower on purpose\n\nGates-Accept-Slower: decode_tok_s@4\nGates-Accept-Slower: ttft_ms@1\n"
    )
    git(stub_repo.root, "commit", "-q", "--allow-empty", "-m", msg)
    sha = git(stub_repo.root, "rev-parse", "HEAD")
    repo = refs.open_repo(stub_repo.root)
    got = accept.from_trailers(repo, git(stub_repo.root, "rev-parse", "HEAD~1"), sha)
    via = f"trailer {sha[:12]}"
    assert got == [
        {"cell": "decode_tok_s@4", "by": "t <t@example.com>", "via": via},
        {"cell": "ttft_ms@1", "by": "t <t@example.com>", "via": via},
    ]
    # the run records them; nothing is slower here, so nothing applied
    code, man, md = run_gates(stub_repo)
    assert code == 0 and [a["applied"] for a in man["accepted"]] == [False, False]
    git(stub_repo.root, "commit", "-q", "--allow-empty", "-m", "x\n\nGates-Accept-Slower: fast")
    with pytest.raises(BadInput, match="'fast' is not a speed cell"):
        accept.from_trailers(repo, sha, "HEAD")


def test_an_accept_file_is_checked(tmp_path):
    p = tmp_path / "a.json"
    p.write_text(json.dumps([ALICE]))
    assert accept.load(str(p)) == [ALICE]
    p.write_text(json.dumps([{"cell": "decode_tok_s@1"}]))
    with pytest.raises(BadInput, match="item 0: expected"):
        accept.load(str(p))
    with pytest.raises(BadInput, match="not a JSON list"):
        accept.load(str(tmp_path / "missing.json"))
