"""The receipt's counts explain themselves: arms add up, one notion of *held* per gate, speed
cells counted once, the speed budget honoured, and a run that lost arms says what it lost."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from gates.plan.speed import SpeedSpec
from gates.report import speed_chart as chart
from gates.report.receipt import render
from gates.report.view import Manifest
from gates.run import execute
from gates.run.results import ArmResult, Status
from gates.run.speed.results import SpeedCell, SpeedRun, Verdict
from tests.gates.conftest import run_gates
from tests.gates.test_gates_receipt import crash

STUB = Path(__file__).parent / "stub_engine"


def _arms_line(md: str) -> str:
    return next(line for line in md.splitlines() if line.startswith("- matrix "))


def test_every_arm_is_counted_once_in_the_line(stub_repo):
    stub_repo.commit("docs only: the same engine tree on both sides")
    code, man, md = run_gates(stub_repo)
    assert code == 0
    # small.yaml: 2 base arms, 4 head arms; head's 2 at 4 streams are base's (one tree)
    assert _arms_line(md).startswith(
        "- matrix small (`matrices/small.yaml`): 6 arms: 4 run, 2 reused from an identical "
        "arm run now (same engine tree), 0 from cache ·"
    )
    code, man, md = run_gates(stub_repo)
    assert "6 arms: 0 run, 6 from cache ·" in _arms_line(md)


def test_one_notion_of_held_per_gate(stub_repo):
    stub_repo.commit("batch bug", BATCH_BUG=True)
    code, man, md = run_gates(stub_repo)
    assert code == 1
    rows = {line.split(" | ")[0]: line for line in md.splitlines() if line.startswith("| ")}
    solo = rows["| ❌ concurrent == solo"]
    assert "❌ 0/1 pairs hold, " in solo and " requests differ" in solo
    assert rows["| ✅ no pages at idle"].count("✅ 2/2 arms hold") == 2  # head's, per kv
    summary = render.summary(Manifest.parse(man))
    assert "concurrent == solo: ❌ 0/2 pairs hold, " in summary
    assert "no pages at idle: ✅ 4/4 arms hold" in summary


def test_a_run_whose_every_arm_crashed_says_so(stub_repo, monkeypatch):
    stub_repo.commit("an engine change", MAX_PARALLEL=32)
    monkeypatch.setattr(execute, "run_arm", lambda job, *a, **k: crash(job))
    code, man, md = run_gates(stub_repo, "--no-cache")
    assert code == 3
    want = "⚠️ could not run: 6 of 6 arms crashed or timed out; 3 of 3 gates could not run"
    assert man["verdict"] == want
    assert md.startswith(f"### Gates: {want}")
    assert "0 gates" not in md
    assert "6 arms: 6 run, 0 from cache" in _arms_line(md)


def _cell(verdict: Verdict, unstable: list[str] | None = None) -> SpeedCell:
    c = SpeedCell("decode_tok_s", 1, 1.0, 1.0, 12, 1.0, 0.99, 1.01, 1.0, 0.5)
    c.verdict, c.unstable = verdict, unstable or []
    return c


def test_speed_cells_are_counted_once():
    eq = Verdict.EQUIVALENT
    sp = SpeedRun(Status.PASS, cells=[_cell(eq), _cell(eq), _cell(eq, ["spread 6%"])])
    sp.cells.append(_cell(Verdict.INCONCLUSIVE))
    assert chart.summary_line(sp) == "4 cells: 3 equivalent, 1 inconclusive; 1 of them unstable"
    sp.stopped = "budget"
    assert chart.summary_line(sp).startswith("4 cells: 3 equivalent, 1 inconclusive: budget;")
    assert "inconclusive: budget" in chart.table(sp)


def test_the_speed_budget_stops_blocks(tmp_path):
    """A budget that one block already spends: no second block, though `blocks` asks for 12
    (red before: the first `blocks` blocks always ran); every cell says why it is open."""
    from gates.run.speed.measure import run_speed

    spec = SpeedSpec(parallel=(1,), metrics=("decode_cpu_s_per_token",), budget_s=0.01)
    got = run_speed({"base": STUB, "head": STUB}, STUB, "numpy", spec, tmp_path)
    assert got.blocks == 1 and got.stopped == "budget"
    assert [c.verdict for c in got.cells] == [Verdict.INCONCLUSIVE]
    assert math.isnan(got.cells[0].speed_lo)
    assert chart.summary_line(got) == "1 cell: 1 inconclusive: budget"
    assert SpeedRun.from_json(got.to_json()).stopped == "budget"


def _speed_line(sp: SpeedRun) -> str:
    """The receipt template's speed paragraph, rendered for sp."""
    src = (render.TEMPLATES / "receipt.md.j2").read_text().splitlines()
    line = next(ln for ln in src if ln.startswith('{% if speed.spec.sample_per == "repeat" %}'))
    return render._env().from_string(line).render(speed=sp, speed_summary="S")


def test_the_speed_line_says_what_a_sample_is():
    """A pair per repeat reads as pairs from so many process pairs, not as blocks of fresh
    processes; with min_effect under delta no *slower (small)* range is promised (it would
    be a loss past 2 % short of 1 %)."""
    spec = SpeedSpec(repeats=12, sample_per="repeat", delta=0.02, min_effect=0.01)
    sp = SpeedRun(Status.PASS, spec=spec, blocks=24, wall_s=30.0, cpu=3, level=0.0167)
    line = _speed_line(sp)
    assert line.startswith("24 pairs, one a timed run, from 2 pairs of processes (12 timed")
    assert "test on the pairs' log speeds" in line and "medians over pairs" in line
    assert "slower (small)" not in line and "*slower* fails (a loss of 1% or more" in line
    assert _speed_line(dataclasses.replace(sp, blocks=12)).startswith(
        "12 pairs, one a timed run, from 1 pair of "
    )
    block = SpeedSpec(repeats=2, delta=0.03, min_effect=0.05)
    line = _speed_line(SpeedRun(Status.PASS, spec=block, blocks=12, wall_s=30.0, cpu=3))
    assert line.startswith("12 blocks (2 timed runs per stream count and side in each")
    assert "a fresh pair of processes per block" in line and "blocks' log speeds" in line
    assert (
        "*slower (small)* = the interval below 1 and a loss past the ±3% tolerance but "
        "short of 5%" in line
    )


def test_the_verdict_counts_each_lost_arm_once():
    """A drafter whose plain twin crashed is settled as crashed (with no store key): the
    verdict counts it there, not again as not run; an arm with no outcome (an interrupted
    run's) is 'not run'. Red when the verdict took counts.py's not_run, which holds both."""
    arms = (
        ArmResult("plain", key="k1", status=Status.CRASHED),
        ArmResult("drafted", status=Status.CRASHED, reason="its plain twin did not run"),
        ArmResult("unfinished", key="k3"),
        ArmResult("fine", key="k4", status=Status.OK),
    )
    man = dataclasses.replace(Manifest.parse({}), arms=arms)
    assert render.verdict(man) == (
        "⚠️ could not run: 2 of 4 arms crashed or timed out; 1 of 4 arms not run",
        3,
    )
