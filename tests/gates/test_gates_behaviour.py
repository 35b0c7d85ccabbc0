"""Gates that look past the token ids: bits, schedule traces, drafter acceptance."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ran
from gates import BadInput
from gates.judge.checks import acceptance, equality, schedule
from gates.judge.diffs import BitsDiff, Skipped
from gates.judge.kinds import KINDS
from gates.judge.kinds.schedule import SCHEDULE_METRICS
from gates.plan import build as plan
from gates.plan import matrix
from gates.plan.request import PromptRequest
from gates.report.receipt import failures


def reply(rid, ids, **kw):
    return {"id": rid, "ids": ids, "finish_reason": "length", **kw}


def test_same_tokens_other_bits_fails_at_the_first_parted_token():
    a = {"replies": [reply("x", [1, 2, 3], logit_hashes=["aa", "bb", "cc"], margins=[1, 2, 3])]}
    b = {"replies": [reply("x", [1, 2, 3], logit_hashes=["aa", "bX", "cc"], margins=[1, 2, 3])]}
    got = equality.compare(ran(a), ran(b))
    assert (got.matched, got.total) == (0, 1)
    (d,) = got.diffs
    assert isinstance(d, BitsDiff) and (d.bits_of, d.index) == ("logit_hashes", 1)
    line = failures._diff_line(d, "base", "head")
    assert "same tokens, other bits" in line and "token 1" in line and "`bX`" in line


def test_margins_and_embeddings_are_bits_too():
    a = {"replies": [reply("m", [5, 6], margins=[0.5, 0.25]), reply("e", [], embedding=[0.1])]}
    b = {"replies": [reply("m", [5, 6], margins=[0.5, 0.2500001]), reply("e", [], embedding=[0.2])]}
    got = equality.compare(ran(a), ran(b))
    kinds = {d.id: (d.bits_of, d.index) for d in got.diffs if isinstance(d, BitsDiff)}
    assert kinds == {"m": ("margins", 1), "e": ("embedding", 0)}


def test_bits_compared_only_when_both_carry_them():
    a = {"replies": [reply("x", [1], logit_hashes=["aa"])]}
    b = {"replies": [reply("x", [1])]}  # an engine of contract 1
    assert equality.compare(ran(a), ran(b)).matched == 1


def test_dropped_requests_are_skipped_not_missing():
    a = {"replies": [reply("x", [1]), reply("y", [2])]}
    b = {"replies": [reply("x", [1])]}
    got = equality.compare(ran(a), ran(b), dropped={"y": "the head engine has no request key k"})
    assert (got.matched, got.total) == (1, 1)
    assert got.skipped == [Skipped("y", "the head engine has no request key k")]


def row(kind, decoding=(), decoded=(), stepped=None, arrived=None, debt=0.0, first=(), fin=None):
    return {
        "kind": kind,
        "decoding": list(decoding),
        "decoded": list(decoded),
        "stepped": stepped or {},
        "waiting": [],
        "arrived": arrived or {},
        "debt_ms": debt,
        "first_token": list(first),
        "finished": fin or {},
    }


def test_schedule_metrics_from_a_trace():
    trace = [
        row("short", stepped={"d": 4}, arrived={"d": "short", "L": "long"}, first=["d"]),
        row("long", decoding=["d"], stepped={"L": 64}),
        row("short", decoding=["d"], stepped={"s1": 2}, arrived={"s1": "short"}, first=["s1"]),
        row("round", decoding=["d"], decoded=["d"], arrived={"s2": "short"}, debt=9.0),
        row("round", decoding=["d"], decoded=["d"], debt=5.0),
        row("short", decoding=["d"], stepped={"s2": 2}, first=["s2"], fin={"s2": "length"}),
        row("round", decoding=["d"], decoded=["d"], fin={"d": "length"}),
        row("long", stepped={"L": 64}, debt=3.0),
    ]
    got = schedule.metrics(schedule.rows_of(trace))
    assert got == {
        "max_decode_gap_rounds": 2,  # the long step and s1's step
        "short_ttft_rounds": 2,  # s2 waited through two rounds
        "long_gap_rounds": 3,  # three rounds between L's two steps
        "long_first_step_rounds": 0,  # L's first step came at once
        "debt_without_decoders": 3.0,  # owed at the last step, with no decoder
        "priority_inversions": 0,
        "background_wait_actions": 0,
    }
    res = schedule.check(
        ran({"trace": trace}), {"max_decode_gap_rounds": 1, "short_ttft_rounds": 2}
    )
    assert res.ok is False and res.problems == ["largest decode gap (actions): 2 (budget 1)"]
    assert schedule.check(ran({}), {"short_ttft_rounds": 1}).ok is None


def test_schedule_across_commits_fails_when_worse_and_notes_a_change():
    base = [row("round", decoding=["d"], decoded=["d"])]
    head = [row("short", decoding=["d"], stepped={"s": 1}), row("round", ["d"], ["d"])]
    got = schedule.compare(
        ran({"trace": base}), ran({"trace": head}), ("max_decode_gap_rounds",), 0
    )
    assert got.ok is False
    assert got.notice.startswith("schedule changed from event 0")
    same = schedule.compare(
        ran({"trace": base}), ran({"trace": base}), ("max_decode_gap_rounds",), 0
    )
    assert same.ok is True and same.notice is None


def test_rounds_ahead_of_a_due_long_step_read_as_worse_not_better():
    """A head that decodes until its decoder is done before a long prompt's first step has
    smaller decode gaps and no long gap at all; the first-step wait fails it."""
    arrive = {"d": "short", "L": "long"}
    base = [
        row("short", stepped={"d": 4}, arrived=arrive, first=["d"]),
        row("long", decoding=["d"], stepped={"L": 64}),
        row("round", decoding=["d"], decoded=["d"]),
        row("long", decoding=["d"], stepped={"L": 64}),
        row("round", decoding=["d"], decoded=["d"], fin={"d": "length"}),
    ]
    head = [
        row("short", stepped={"d": 4}, arrived=arrive, first=["d"]),
        row("round", decoding=["d"], decoded=["d"]),
        row("round", decoding=["d"], decoded=["d"], fin={"d": "length"}),
        row("long", stepped={"L": 64}),
        row("long", stepped={"L": 64}),
    ]
    mb, mh = schedule.metrics(schedule.rows_of(base)), schedule.metrics(schedule.rows_of(head))
    assert mh["max_decode_gap_rounds"] < mb["max_decode_gap_rounds"]
    assert mh["long_gap_rounds"] < mb["long_gap_rounds"]
    assert (mb["long_first_step_rounds"], mh["long_first_step_rounds"]) == (0, 2)
    names = tuple(SCHEDULE_METRICS)
    got = schedule.compare(ran({"trace": base}), ran({"trace": head}), names, 0)
    assert got.ok is False
    assert got.problems == [
        "long prompt's rounds to its first step: 0 on base, 2 on head (allowed 0 worse)"
    ]


def test_background_wait_bounds_aging():
    def step(rid, waiting, arrived=None):
        r = row("short", stepped={rid: 2}, arrived=arrived, first=[rid], fin={rid: "length"})
        r["waiting"] = waiting
        return r

    def stream(aged_at):  # b1 waits while fresh foreground prompts keep arriving
        rows = [step("f0", ["b1"], {"f0": "short", "b1": "short"})]
        rows += [step(f"f{i}", ["b1"], {f"f{i}": "short"}) for i in range(1, aged_at)]
        return [*rows, step("b1", [])]

    bg = frozenset({"b1"})
    assert schedule.metrics(schedule.rows_of(stream(8)), bg)["background_wait_actions"] == 8
    late = schedule.metrics(schedule.rows_of(stream(9)), bg)
    assert late["background_wait_actions"] == 9 and late["priority_inversions"] == 0
    assert (
        schedule.metrics(schedule.rows_of(stream(7)), bg)["priority_inversions"] == 0
    )  # nobody waited
    early = stream(7)
    early[-1]["waiting"] = ["f7"]
    early[-1]["arrived"] = {"f7": "short"}
    assert schedule.metrics(schedule.rows_of(early), bg)["priority_inversions"] == 1
    starved = stream(8)[:-1]  # never stepped: it waited to the end
    assert schedule.metrics(schedule.rows_of(starved), bg)["background_wait_actions"] == 8


def test_acceptance_drop():
    def arm(acc, drafted):
        return {"replies": [reply("x", [1], accepted=acc, drafted=drafted)]}

    assert acceptance.compare(ran(arm(60, 100)), ran(arm(58, 100)), 0.05).ok is True
    bad = acceptance.compare(ran(arm(60, 100)), ran(arm(20, 100)), 0.05)
    assert bad.ok is False and "0.600 → 0.200" in bad.problems[0]
    assert acceptance.compare(ran(arm(0, 0)), ran(arm(0, 0)), 0.05).ok is None


MATRIX = """
model: m
prompts: p
axes: {kv: [bf16, fp8], parallel: [1, 4], paging: [off, 24]}
gates:
  - name: burst
    schedule: {prompts: sched, parallel: 2, share: 0.01, max_decode_gap_rounds: 2}
    where: {kv: bf16, paging: off}
  - name: no worse
    schedule_across_commits: {prompts: sched, parallel: 2, metrics: [short_ttft_rounds]}
  - name: drafts pay
    acceptance_across_commits: {drafter: [mtp, block], max_drop: 0.1}
    where: {parallel: 4, paging: off, kv: bf16}
"""


def test_schedule_and_acceptance_rules_plan_their_arms(tmp_path: Path):
    p = tmp_path / "m.yaml"
    p.write_text(MATRIX)
    m = matrix.load(p, KINDS)
    assert m.prompt_sets() == ["p", "sched"]
    pl = plan.build(m, {"p": [], "sched": []})
    (check,) = [c for c in pl.checks if c.gate == "burst"]  # p=1, p=4 -> one arm
    cfg = check.arm.config
    assert (cfg.prompts, cfg.parallel, cfg.share, check.arm.side) == (
        "sched",
        2,
        0.01,
        "head",
    )
    no_worse = [c for c in pl.pairs if c.gate == "no worse"]
    assert {c.a.config.kv for c in no_worse} == {"bf16", "fp8"}
    assert all(c.a.side == "base" and c.b.side == "head" for c in no_worse)
    drafts = [c.b.config.drafter for c in pl.pairs if c.gate == "drafts pay"]
    assert drafts == ["mtp", "block"]
    assert {a.config.paging for a in pl.arms} == {"off", 24}


@pytest.mark.parametrize(
    ("body", "key"),
    [
        ("schedule: {max_gap: 2}", "gates[0].schedule.max_gap"),
        ("schedule: {prompts: s}", "gates[0].schedule"),
        ("schedule: {short_ttft_rounds: -1}", "gates[0].schedule.short_ttft_rounds"),
        ("schedule: {share: .nan, short_ttft_rounds: 1}", "gates[0].schedule.share"),
        (
            "schedule_across_commits: {metrics: [speed]}",
            "gates[0].schedule_across_commits.metrics[0]",
        ),
        (
            "acceptance_across_commits: {drafter: [none]}",
            "gates[0].acceptance_across_commits.drafter",
        ),
        (
            "acceptance_across_commits: {drafter: [mtp], max_drop: x}",
            "gates[0].acceptance_across_commits.max_drop",
        ),
    ],
)
def test_bad_behaviour_rules_name_the_key(tmp_path: Path, body: str, key: str):
    p = tmp_path / "m.yaml"
    p.write_text(f"model: m\nprompts: p\ngates:\n  - name: g\n    {body}\n")
    with pytest.raises(BadInput) as e:
        matrix.load(p, KINDS)
    assert str(e.value).startswith(f"{p}: {key}: expected"), str(e.value)


def test_priority_inversions_count_unaged_background_steps_ahead_of_foreground():
    def step(rid, waiting, arrived=None):
        r = row("short", stepped={rid: 2}, arrived=arrived, first=[rid], fin={rid: "length"})
        r["waiting"] = waiting
        return r

    arrived = {"f1": "short", "f2": "short", "b1": "short"}
    good = [step("f1", ["f2", "b1"], arrived), step("f2", ["b1"]), step("b1", [])]
    bad = [step("b1", ["f1", "f2"], arrived), step("f1", ["f2"]), step("f2", [])]
    assert schedule.metrics(schedule.rows_of(good), frozenset({"b1"}))["priority_inversions"] == 0
    assert schedule.metrics(schedule.rows_of(bad), frozenset({"b1"}))["priority_inversions"] == 1
    aged = [step(f"f{i}", [f"f{i + 1}", "b1"], {f"f{i}": "short"}) for i in range(8)]
    aged[0]["arrived"]["b1"] = "short"
    aged.append(step("b1", ["f8"], {"f8": "short"}))  # waited 8 actions: aged, may go first
    assert schedule.metrics(schedule.rows_of(aged), frozenset({"b1"}))["priority_inversions"] == 0


def test_blas_row_variant_rules_plan_their_own_arms(tmp_path: Path):
    body = """
model: m
prompts: p
axes: {kv: [bf16], parallel: [1, 4], paging: [off, on]}
gates:
  - {name: main, across_commits: {}}
  - {name: rows, across_commits: {}, blas: row-variant, where: {parallel: 4, paging: on}}
  - {name: pages, within_commit: {vary: paging, reference: off}, blas: row-variant}
"""
    (tmp_path / "m.yaml").write_text(body)
    m = matrix.load(tmp_path / "m.yaml", KINDS)
    pl = plan.build(m, {"p": [PromptRequest.from_json({"id": "a", "prompt_ids": [1]})]})
    rows = [c for c in pl.comparisons if c.gate == "rows"]
    assert len(rows) == 1 and rows[0].a.config.blas == "row-variant"
    assert "blas=row-variant" in rows[0].b.name
    assert all("blas" not in c.a.config.to_json() for c in pl.comparisons if c.gate == "main")
    assert {c.b.config.parallel for c in pl.comparisons if c.gate == "pages"} == {1, 4}
    for bad, key in (("blas: fast", "gates[0].blas"), ("blas: row-variant", "gates[0].blas")):
        kind = "across_commits: {}" if bad != "blas: row-variant" else "resource: {}"
        (tmp_path / "b.yaml").write_text(
            f"model: m\nprompts: p\ngates:\n  - {{name: x, {kind}, {bad}}}\n"
        )
        with pytest.raises(BadInput, match=re.escape(key)):
            matrix.load(tmp_path / "b.yaml", KINDS)


def test_the_row_variant_kernel_gives_other_bits_at_other_row_counts():
    import subprocess
    import sys

    from gates.run import blas

    core, why = blas.row_variant_kernel(sys.executable)
    if core is None:
        pytest.skip(why)
    env = {"OPENBLAS_CORETYPE": core, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    assert blas._probe(sys.executable, core) == 0, env  # varies by rows, tiles of 8 hold
    code = subprocess.run([sys.executable, "-c", "import numpy"], env=env, check=False)
    assert code.returncode == 0
