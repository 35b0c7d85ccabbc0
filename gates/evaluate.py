"""Arm results -> gate results: one entry per comparison or resource check, then cells.

Entry and gate states: ``pass``, ``fail``, ``could_not_run`` (an arm it needs crashed or
timed out), ``not_comparable`` (an arm it needs asks for something that commit's engine
lacks). A gate fails if any entry fails; otherwise it could not run if any entry could
not run; otherwise it holds if any entry held.
"""

from __future__ import annotations

from typing import Any

from gates.checks import acceptance, equality, resources, schedule
from gates.matrix import Gate, Matrix
from gates.plan import Arm, Comparison, PairCheck, Plan, ResourceCheck, ScheduleCheck

MAX_DIFFS = 5  # per comparison, kept in the manifest
ORDER = ("fail", "could_not_run", "pass", "not_comparable")


def pair_names(a: Arm, b: Arm) -> tuple[str, str]:
    """Short names of the two sides of a comparison (base/head, serial/p=4, ...)."""
    if a.side != b.side:
        return a.side, b.side
    ca, cb = a.config, b.config
    if ca.get("served") != cb.get("served"):
        return (
            f"served {ca['served']}" if ca.get("served") else "offline",
            f"served {cb['served']}" if cb.get("served") else "offline",
        )
    if ca.get("resumed") != cb.get("resumed"):
        return (
            "resumed" if ca.get("resumed") else "cold",
            "resumed" if cb.get("resumed") else "cold",
        )
    if ca.get("serial") != cb.get("serial"):
        return (
            "serial" if ca.get("serial") else f"p={ca['parallel']}",
            "serial" if cb.get("serial") else f"p={cb['parallel']}",
        )
    diff = [k for k in sorted(ca) if ca[k] != cb.get(k)]
    if not diff:
        return "a", "b"

    def show(c: dict[str, Any]) -> str:
        return " ".join(f"{k}={c[k] if c[k] != {} else 'unset'}" for k in diff)

    return show(ca), show(cb)


def _blocked(
    arms: tuple[Arm, ...], rows: dict[Arm, dict[str, Any]], results: dict[Arm, dict[str, Any]]
) -> tuple[str, str, str] | None:
    """(state, reason, stderr tail) if an arm is not comparable or did not finish.

    An arm the engine refused (exit 2: it will not run that configuration) is not
    comparable, unless the same arm ran on the other commit: then head (or base) lost
    something the other side has, and the comparison could not run."""
    for arm in arms:
        row = rows[arm]
        if row.get("status") == "not_comparable":
            return "not_comparable", row.get("reason", ""), ""
    status = {arm: (results.get(arm) or {}).get("status") for arm in arms}
    for arm in arms:
        r = results.get(arm)
        if r is None:
            return "could_not_run", f"{arm.id}: no result (interrupted?)", ""
        if r.get("status") == "refused":
            others = [a for a in arms if a is not arm]
            lost = any(status[a] == "ok" and a.side != arm.side for a in others)
            state = "could_not_run" if lost else "not_comparable"
            why = f"{arm.id} — {r.get('reason', 'refused')}"
            if lost:
                why += " (the other commit ran it)"
            return state, why, r.get("stderr_tail", "")
    for arm in arms:
        r = results[arm]
        if r.get("status") != "ok":
            return (
                "could_not_run",
                f"{arm.id}: {r.get('reason', 'crashed')}",
                r.get("stderr_tail", ""),
            )
    return None


def _comparison(
    c: Comparison,
    rows: dict[Arm, dict[str, Any]],
    results: dict[Arm, dict[str, Any]],
    requests: dict[str, dict[str, Any]],
    decode: equality.Decoder | None,
) -> dict[str, Any]:
    a_name, b_name = pair_names(c.a, c.b)
    e: dict[str, Any] = {
        "column": c.column,
        "a": c.a.id,
        "b": c.b.id,
        "a_name": a_name,
        "b_name": b_name,
        "matched": 0,
        "total": 0,
        "reason": "",
        "diffs": [],
        "n_diffs": 0,
        "skipped": [],
    }
    blocked = _blocked((c.a, c.b), rows, results)
    if blocked:
        e["status"], e["reason"], e["stderr_tail"] = blocked
        return e
    dropped = {**rows[c.a].get("dropped", {}), **rows[c.b].get("dropped", {})}
    got = equality.compare(results[c.a], results[c.b], c.only_ids, requests, decode, dropped)
    e.update(
        matched=got["matched"],
        total=got["total"],
        skipped=got["skipped"],
        n_diffs=len(got["diffs"]),
        diffs=got["diffs"][:MAX_DIFFS],
    )
    e["status"] = "pass" if got["matched"] == got["total"] else "fail"
    return e


def background(arm: Arm, sets: dict[str, list[dict[str, Any]]]) -> frozenset[str]:
    """Ids of the background-priority requests of an arm's prompt set."""
    reqs = sets.get(arm.config["prompts"], [])
    return frozenset(r["id"] for r in reqs if r.get("priority") == "background")


def _check(
    c: ResourceCheck | ScheduleCheck | PairCheck,
    rows: dict[Arm, dict[str, Any]],
    results: dict[Arm, dict[str, Any]],
    gate: Gate,
    sets: dict[str, list[dict[str, Any]]],
) -> dict[str, Any]:
    """A check of one arm (resource, schedule) or of base against head (behaviour)."""
    arms = (c.a, c.b) if isinstance(c, PairCheck) else (c.arm,)
    e: dict[str, Any] = {
        "column": c.column,
        "arm": arms[-1].id,
        "reason": "",
        "values": {},
        "matched": 0,
        "total": 0,
    }
    blocked = _blocked(arms, rows, results)
    if blocked:
        e["status"], e["reason"], e["stderr_tail"] = blocked
        return e
    if isinstance(c, ResourceCheck):
        got = resources.check(results[c.arm], c.limits)
    elif isinstance(c, ScheduleCheck):
        got = schedule.check(results[c.arm], c.budgets, background(c.arm, sets))
    elif gate.kind == "schedule_across_commits":
        bg = background(c.b, sets)
        got = schedule.compare(results[c.a], results[c.b], gate.metrics, gate.worse_by, bg)
    else:
        got = acceptance.compare(results[c.a], results[c.b], gate.max_drop)
    e["values"] = got["values"]
    e["reason"] = "; ".join(got["problems"])
    if got.get("notice"):
        e["notice"] = got["notice"]
    e["total"] = 1
    if got["ok"] is None:
        e["status"] = "not_comparable"
        e["total"] = 0
    elif got["ok"]:
        e["status"], e["matched"] = "pass", 1
    else:
        e["status"] = "fail"
    return e


def _state(states: list[str]) -> str:
    for s in ORDER:
        if s in states:
            return s
    return "empty"


def evaluate(
    m: Matrix,
    plan: Plan,
    results: dict[Arm, dict[str, Any]],
    rows: dict[Arm, dict[str, Any]],
    sets: dict[str, list[dict[str, Any]]],
    decoders: dict[str, equality.Decoder | None],
) -> list[dict[str, Any]]:
    out = []
    for gate in m.gates:
        entries: list[dict[str, Any]] = []
        for c in plan.comparisons:
            if c.gate == gate.name:
                cfg = c.b.config
                reqs = {r["id"]: r for r in sets[cfg["prompts"]]}
                entries.append(_comparison(c, rows, results, reqs, decoders.get(cfg["model"])))
        for rc in [*plan.checks, *plan.schedule_checks, *plan.pairs]:
            if rc.gate == gate.name:
                entries.append(_check(rc, rows, results, gate, sets))
        cells: dict[str, dict[str, Any]] = {}
        for e in entries:
            cell = cells.setdefault(e["column"], {"matched": 0, "total": 0, "states": []})
            cell["matched"] += e["matched"]
            cell["total"] += e["total"]
            cell["states"].append(e["status"])
        for cell in cells.values():
            cell["status"] = _state(cell["states"])
            cell["counts"] = {s: cell["states"].count(s) for s in ORDER}
            del cell["states"]
        g = {
            "name": gate.name,
            "kind": gate.kind,
            "sides": list(gate.sides),
            "status": _state([e["status"] for e in entries]),
            "matched": sum(e["matched"] for e in entries),
            "total": sum(e["total"] for e in entries),
            "cells": cells,
            "entries": entries,
        }
        if gate.kind == "within_commit":
            g["vary"] = gate.vary
            g["reference"] = gate.reference
        if gate.kind == "resource":
            g["limits"] = gate.limits
        if gate.kind == "schedule":
            g["limits"] = gate.budgets
        out.append(g)
    return out
