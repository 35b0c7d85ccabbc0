"""The ``lengths`` gate kind: each arm's replies keep to their requests' max_tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from gates import BadInput
from gates.judge.kinds import KINDS, unit
from gates.judge.kinds.lengths import problems
from gates.judge.results import Cell
from gates.plan import build as plan
from gates.plan import matrix
from gates.plan.request import PromptRequest
from gates.report.receipt.render import cell_text
from gates.run.reply import Reply
from gates.run.results import ArmRun, Status

MATRIX = """
model: m
prompts: p
max_tokens: 4
axes: {parallel: [1, 2]}
gates:
  - name: concurrent == solo
    within_commit: {vary: parallel, reference: serial}
  - name: replies keep max_tokens
    lengths: {}
"""
SET = [
    PromptRequest.from_json(d)
    for d in ({"id": "a", "prompt_ids": [1]}, {"id": "b", "prompt_ids": [2], "max_tokens": 2})
]


def load(tmp_path: Path, text: str = MATRIX) -> matrix.Matrix:
    (tmp_path / "m.yaml").write_text(text)
    return matrix.load(tmp_path / "m.yaml", KINDS)


def run(*replies: dict) -> ArmRun:
    return ArmRun(Status.OK, replies=[Reply.from_json(r) for r in replies])


def test_the_kind_is_found_by_its_key_and_checks_every_head_arm(tmp_path: Path):
    m = load(tmp_path)
    assert "lengths" in KINDS and m.gates[1].kind == "lengths"
    p = plan.build(m, {"p": SET})
    checked = [c.arm for c in p.checks if c.gate == "replies keep max_tokens"]
    assert (
        checked == [a for a in p.arms if a.side == "head"] and len(checked) == 3
    )  # serial, p=1, p=2
    assert unit("lengths") == "arms"
    assert cell_text("lengths", Cell(Status.PASS, 1, 1, {"pass": 2})) == "✅ 2/2 arms hold"


def test_a_bad_lengths_rule_names_its_key(tmp_path: Path):
    bad = MATRIX.replace("lengths: {}", "lengths: {max: 3}")
    with pytest.raises(BadInput, match=r"gates\[1\]\.lengths\.max: expected one of commits"):
        load(tmp_path, bad)


def test_replies_within_max_tokens_hold():
    reqs = {r.id: r for r in SET}
    ok = run(
        {"id": "a", "ids": [5, 6, 7, 8], "finish_reason": "length"},
        {"id": "b", "ids": [5], "finish_reason": "stop"},  # eos before its own limit of 2
        {"id": "a/turn1", "ids": [], "finish_reason": "error"},  # no ids: not measured
    )
    assert problems(ok, reqs, 4) == []


def test_one_token_too_many_or_a_short_length_fails():
    """The planted engine bugs: a stream that runs past max_tokens, and one that stops short
    of it but says ``length``."""
    reqs = {r.id: r for r in SET}
    over = run({"id": "b", "ids": [5, 6, 7], "finish_reason": "length"})
    assert problems(over, reqs, 4) == ["`b`: 3 tokens, max_tokens 2"]
    short = run({"id": "a", "ids": [5, 6, 7], "finish_reason": "length"})
    assert problems(short, reqs, 4) == ["`a`: stopped for length after 3 of 4 tokens"]


def test_the_rule_judges_an_arm_and_names_the_reply(tmp_path: Path):
    m = load(tmp_path)
    p = plan.build(m, {"p": SET})
    check = next(c for c in p.checks if c.gate == "replies keep max_tokens")
    rule = m.gates[1].rule
    good = run({"id": "a", "ids": [1, 2, 3, 4], "finish_reason": "length"})
    assert rule.judge(check, {check.arm: good}, {"p": SET}).ok is True
    bad = run({"id": "a", "ids": [1, 2, 3, 4, 5], "finish_reason": "length"})
    got = rule.judge(check, {check.arm: bad}, {"p": SET})
    assert got.ok is False and got.problems == ["`a`: 5 tokens, max_tokens 4"]


def test_a_resumed_arms_first_turn_keeps_its_own_requests_max_tokens(tmp_path: Path):
    # A resumed arm first sends each two-turn request's first turn (`c/turn1`), with that
    # request's max_tokens (2), not the matrix's (4): quick's conv2 failed this way.
    m = load(tmp_path)
    line = {"id": "c", "prompt_ids": [1, 2, 3], "resume_from": 2, "max_tokens": 2}
    two_turn = [PromptRequest.from_json(line)]
    p = plan.build(m, {"p": two_turn})
    check = next(c for c in p.checks if c.gate == "replies keep max_tokens")
    rule = m.gates[1].rule
    first = {"id": "c/turn1", "ids": [7, 8], "finish_reason": "length"}
    whole = {"id": "c", "ids": [7, 8], "finish_reason": "length"}
    assert rule.judge(check, {check.arm: run(first, whole)}, {"p": two_turn}).ok is True
    over = {"id": "c/turn1", "ids": [7, 8, 9], "finish_reason": "length"}
    got = rule.judge(check, {check.arm: run(over, whole)}, {"p": two_turn})
    assert got.ok is False and got.problems == ["`c/turn1`: 3 tokens, max_tokens 2"]
