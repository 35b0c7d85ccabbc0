"""The power check's catalog and verdict logic (no engine run: a few seconds at most)."""

from __future__ import annotations

import py_compile
import shutil
from pathlib import Path

import pytest

from gates import EXIT_ARM_FAILED, EXIT_BAD_INPUT, EXIT_GATE_FAILED, EXIT_OK
from gates.__main__ import parser
from gates.power import plants
from gates.power.run import Outcome, exit_code, failed_gates, render, verdict_for

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = {
    "sched-burst-starves",
    "sched-short-behind-debt",
    "sched-debt-outlives-decoders",
    "cancel-leaks-page",
    "evict-stale-prefix",
    "prefix-hash-unchained",
    "sampling-not-positional",
    "drafter-absorbs-extra-row",
    "linear-row-count-bits",
    "rope-long-positions",
    "fp8-scale-off",
    "stop-ids-ignored",
    "embed-wrong-row",
    "background-first",
    "attention-merge-order",
    "drafter-state-leak",
    "resume-off-by-one",
    "serve-seed-misread",
    "serve-stream-drops-last",
    "aging-late",
    "long-waits-for-decoders",
    "cache-unfed-row",
    "serve-length-as-stop",
    "prefill-untiled",
}


def test_catalog_has_every_class_and_three_noops() -> None:
    names = [p.name for p in plants.PLANTS]
    assert len(names) == len(set(names))
    assert {p.name for p in plants.PLANTS if not p.noop} >= REQUIRED
    assert sum(p.noop for p in plants.PLANTS) >= 3
    assert all(p.what and "\n" not in p.what and p.edits for p in plants.PLANTS)


@pytest.mark.parametrize("plant", plants.PLANTS, ids=lambda p: p.name)
def test_anchor_occurs_once_in_the_current_tree(plant: plants.Plant) -> None:
    assert plants.anchor_problems(plant, ROOT) == []
    for e in plant.edits:
        assert e.old != e.new


@pytest.mark.parametrize("plant", plants.PLANTS, ids=lambda p: p.name)
def test_patched_file_compiles(plant: plants.Plant, tmp_path: Path) -> None:
    for f in {e.file for e in plant.edits}:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / f, tmp_path / f)
    changed = plants.apply(plant, tmp_path)
    for f in changed:
        py_compile.compile(str(tmp_path / f), cfile=str(tmp_path / "x.pyc"), doraise=True)
        assert (tmp_path / f).read_text() != (ROOT / f).read_text()


def test_an_anchor_not_found_does_not_apply(tmp_path: Path) -> None:
    plant = plants.PLANTS[0]
    f = tmp_path / plant.edits[0].file
    f.parent.mkdir(parents=True)
    f.write_text("nothing to see\n")
    assert "found 0 times" in plants.anchor_problems(plant, tmp_path)[0]
    with pytest.raises(ValueError):
        plants.apply(plant, tmp_path)
    f.write_text(plant.edits[0].old * 2)
    assert "found 2 times" in plants.anchor_problems(plant, tmp_path)[0]


def test_select() -> None:
    assert len(plants.select(None)) == len(plants.PLANTS)
    assert [p.name for p in plants.select("noop-rename, fp8-scale-off")] == [
        "noop-rename",
        "fp8-scale-off",
    ]
    with pytest.raises(ValueError, match="no-such"):
        plants.select("no-such")


@pytest.mark.parametrize(
    ("noop", "code", "verdict"),
    [
        (False, EXIT_GATE_FAILED, "caught"),
        (False, EXIT_ARM_FAILED, "caught (an arm crashed)"),
        (False, EXIT_OK, "MISSED"),
        (False, EXIT_BAD_INPUT, "harness error"),
        (False, -1, "harness error"),
        (True, EXIT_OK, "clean"),
        (True, EXIT_GATE_FAILED, "FALSE ALARM"),
        (True, EXIT_ARM_FAILED, "FALSE ALARM"),
        (True, EXIT_BAD_INPUT, "harness error"),
    ],
)
def test_verdicts(noop: bool, code: int, verdict: str) -> None:
    assert verdict_for(noop, code) == verdict


def test_failed_gates_from_a_manifest() -> None:
    man = {
        "gates": [
            {"name": "a", "kind": "across_commits", "status": "pass"},
            {"name": "b", "kind": "across_commits", "status": "fail"},
            {"name": "c", "kind": "within_commit", "status": "could_not_run"},
        ],
        "speed": None,
    }
    assert failed_gates(man) == ["b"]
    man["gates"][1]["status"] = "pass"
    assert failed_gates(man) == ["c (could not run)"]


def _o(name: str, verdict: str, gates: list[str] | None = None) -> Outcome:
    return Outcome(plants.by_name()[name], verdict, gates or [], 12.3)


def test_table_and_exit_code() -> None:
    outs = [
        _o("fp8-scale-off", "caught", ["flags unset == main", "paging == main paging"]),
        _o("stop-ids-ignored", "MISSED"),
        _o("cancel-leaks-page", "does not apply (anchor not found)"),
        _o("noop-rename", "clean"),
        _o("noop-docstring", "FALSE ALARM", ["flags unset == main"]),
    ]
    text = render(outs, "Power check")
    assert text.startswith("Power check\n")
    assert "| `fp8-scale-off` |" in text and "flags unset == main, paging == main paging" in text
    assert "❌ MISSED" in text and "| 12 |" in text
    assert "caught 1 of 2 bug classes; 1 false alarm over 2 no-op changes" in text
    assert "did not apply (anchor not found): cancel-leaks-page" in text
    assert exit_code(outs) == EXIT_GATE_FAILED
    good = [outs[0], outs[3]]
    assert exit_code(good) == EXIT_OK
    assert exit_code([*good, outs[2]]) == EXIT_GATE_FAILED  # a plant that did not apply
    assert exit_code([]) == EXIT_GATE_FAILED


def test_cli_flags() -> None:
    a = parser().parse_args(
        ["selftest", "--power", "--only", "fp8-scale-off", "--jobs", "2", "--out", "x.md"]
    )
    assert a.power and a.only == "fp8-scale-off" and a.jobs == 2 and a.out == "x.md"
    assert a.matrix == "matrices/quick.yaml"
