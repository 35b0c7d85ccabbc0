"""`python -m gates bisect`: a planted break in a small history of the stub engine is found."""

from __future__ import annotations

import json

from tests.gates.conftest import StubRepo, git


def _history(repo: StubRepo) -> list[str]:
    """Six commits after main's first: the fourth plants a batch bug that stays."""
    shas = [git(repo.root, "rev-parse", "HEAD")]
    shas.append(repo.commit("docs only"))
    shas.append(repo.commit("a harmless knob", MAX_PARALLEL=32))
    shas.append(repo.commit("plant: batch bug", BATCH_BUG=True))
    shas.append(repo.commit("after the break 1"))
    shas.append(repo.commit("after the break 2", MAX_PARALLEL=48))
    shas.append(repo.commit("after the break 3"))
    return shas


def _bisect(repo: StubRepo, *args: str) -> tuple[int, dict]:
    from gates.__main__ import main

    out = repo.root / "receipts"
    code = main(
        [
            "bisect",
            "--repo",
            str(repo.root),
            "--matrix",
            "matrices/small.yaml",
            "--out",
            str(out),
            *args,
        ]
    )
    found = sorted(out.glob("bisect-*.json"))
    return code, json.loads(found[-1].read_text()) if found else {}


def test_bisect_finds_the_planted_break(stub_repo: StubRepo, capsys) -> None:
    shas = _history(stub_repo)
    code, r = _bisect(
        stub_repo, "--good", shas[0], "--bad", shas[-1], "--gate", "concurrent == solo"
    )
    text = capsys.readouterr().out
    assert code == 0, text
    assert r["first_failing"] == shas[3]
    assert r["last_holding"] == shas[2]
    assert f"`{shas[3][:10]}` is the first commit where `concurrent == solo` fails" in text
    tried = [s["sha"] for s in r["steps"]]
    assert tried[:2] == [shas[-1], shas[0]]  # bad must fail, good must hold
    assert len(tried) <= 5 and len(set(tried)) == len(tried)
    # the good commit's arms run once: every later step takes them from the cache
    for s in r["steps"][1:]:
        c = s["counts"]
        assert c["cached"] >= 2, s  # small.yaml: 2 base arms (kv bf16, fp8)
        assert (
            sum(c[k] for k in ("run", "shared", "cached", "not_comparable", "not_run"))
            == c["total"]
        )
    assert "| 1 | `" in text and "❌ fails" in text and "✅ holds" in text


def test_bisect_any_gate_and_bad_input(stub_repo: StubRepo, capsys) -> None:
    shas = _history(stub_repo)
    code, r = _bisect(stub_repo, "--good", shas[1], "--bad", shas[4])
    assert code == 0 and r["first_failing"] == shas[3] and r["gate"] is None
    capsys.readouterr()
    # a --bad where the gate holds: nothing to bisect, one clear line, exit 2
    code, _ = _bisect(
        stub_repo, "--good", shas[0], "--bad", shas[2], "--gate", "concurrent == solo"
    )
    err = capsys.readouterr().err
    assert code == 2 and "holds; nothing to bisect" in err
    code, _ = _bisect(stub_repo, "--good", shas[0], "--bad", shas[2], "--gate", "nope")
    assert code == 2 and "--gate 'nope': no such gate" in capsys.readouterr().err
    code, _ = _bisect(stub_repo, "--good", shas[3], "--bad", shas[1])
    assert code == 2 and "is not an ancestor" in capsys.readouterr().err
