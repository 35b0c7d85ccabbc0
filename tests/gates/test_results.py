"""gates/run/results.py: typed results round-trip through the manifest's JSON, and bad JSON is
refused with the field named."""

from __future__ import annotations

import json

import pytest

from conftest import arm_config
from gates.judge.results import Cell, Comparison, GateResult, gates_of, worst
from gates.run.results import ArmResult, Status, arms_of


def _gate() -> GateResult:
    blocked = Comparison(
        column="cpu",
        status=Status.COULD_NOT_RUN,
        reason="x@head — refused (exit 2) (the other commit ran it)",
        a="x@base",
        b="x@head",
        a_name="base",
        b_name="head",
        stderr_tail="",
        blocked_arm="x@head",
        arm_reason="refused (exit 2)",
        ran_on_other_commit=True,
    )
    ran = Comparison(column="cpu", status=Status.PASS, arm="y@head", matched=1, total=1)
    cell = Cell(Status.COULD_NOT_RUN, 1, 1, {"could_not_run": 1, "pass": 1})
    return GateResult(
        "g",
        "across_commits",
        Status.COULD_NOT_RUN,
        1,
        1,
        ["base", "head"],
        {"cpu": cell},
        [blocked, ran],
    )


def test_round_trip_through_json_text():
    g = _gate()
    text = json.dumps(g.to_json())
    back = GateResult.from_json(json.loads(text))
    assert back == g
    assert isinstance(back.status, Status) and isinstance(back.entries[0].status, Status)
    assert back.entries[0].ran_on_other_commit and not back.entries[1].ran_on_other_commit


def test_json_keeps_the_old_keys():
    """A manifest written before the types still reads: same keys, same status strings,
    and a check entry without ``a_name`` (an entry that ran has no ``stderr_tail``)."""
    old = {
        "name": "res",
        "kind": "resource",
        "sides": ["head"],
        "status": "pass",
        "matched": 1,
        "total": 1,
        "cells": {"cpu": {"matched": 1, "total": 1, "status": "pass", "counts": {"pass": 1}}},
        "entries": [
            {
                "column": "cpu",
                "arm": "a",
                "reason": "",
                "values": {"p": 1},
                "matched": 1,
                "total": 1,
                "status": "pass",
            }
        ],
    }
    g = gates_of({"gates": [old]})[0]
    assert g.status is Status.PASS and g.cells["cpu"].status is Status.PASS
    e = g.entries[0]
    assert not e.is_pair and e.stderr_tail is None and e.where == "a"
    assert e.to_json()["status"] == "pass" and "a_name" not in e.to_json()


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"kind": "k", "status": "pass"}, "name"),
        ({"name": "g", "kind": "k", "status": "meh"}, "status"),
    ],
)
def test_bad_json_names_the_field(bad, field):
    with pytest.raises(ValueError, match=f"'{field}'"):
        GateResult.from_json(bad)


def test_a_gate_that_is_neither_typed_nor_json_is_refused():
    with pytest.raises(TypeError, match="not a GateResult"):
        gates_of({"gates": [("g", "pass")]})


def test_worst_order():
    assert worst([Status.PASS, Status.FAIL, Status.COULD_NOT_RUN]) is Status.FAIL
    assert worst([Status.PASS, Status.NOT_COMPARABLE]) is Status.PASS
    assert worst([]) is Status.EMPTY


def test_arm_rows_read_old_and_new():
    """A manifest's arm row: refused counts as not comparable, a row with no result has no
    status, and a row survives a JSON round trip."""
    rows = [
        {"id": "a", "side": "head", "status": "refused", "reason": "refused (exit 2)"},
        {"id": "b", "side": "base", "config": arm_config(kv="fp8").to_json(), "cached": False},
        {"id": "c", "status": "ok", "wall_s": 1.5, "replies": [{"id": "r", "n": 3}]},
    ]
    a, b, c = arms_of({"arms": rows})
    assert a.not_comparable and a.status is Status.REFUSED
    assert b.status is None and not b.not_comparable and b.config == arm_config(kv="fp8")
    assert (
        b.to_json() == {**rows[1], "label": ""} and c.config is None and c.to_json()["config"] == {}
    )
    with pytest.raises(ValueError, match="'model' is missing"):  # a config the plan never made
        ArmResult.from_json({**rows[1], "config": {"kv": "bf16"}})
    assert ArmResult.from_json(json.loads(json.dumps(c.to_json()))) == c
    with pytest.raises(ValueError, match="'id'"):
        ArmResult.from_json({"status": "ok"})
    with pytest.raises(TypeError, match="not an ArmResult"):
        arms_of({"arms": ["a"]})
