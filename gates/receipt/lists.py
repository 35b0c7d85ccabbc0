"""The receipt's lists: arms that could not run, what was skipped or not comparable, and
what changed within budget. Each item may be many lines (a traceback): the template fences
all but the first."""

from __future__ import annotations

from typing import Any

ARM_CHECKS = ("resource", "schedule", "schedule_across_commits", "acceptance_across_commits")


def skipped(man: dict[str, Any]) -> list[str]:
    """Not comparable arms grouped by reason, notes of the plan, requests left out."""
    groups: dict[str, list[str]] = {}
    for a in man["arms"]:
        if a.get("status") in ("not_comparable", "refused"):
            groups.setdefault(a.get("reason", ""), []).append(a["id"])
    out = []
    for why, ids in groups.items():
        first, nl, rest = why.partition("\n")  # the count stays out of a fenced traceback
        n = f"{len(ids)} arm{'s' * (len(ids) > 1)}, e.g. {ids[0]}"
        out.append(f"not comparable: {first} ({n}){nl}{rest}")
    out += [f"skipped: {n}" for n in man.get("notes", [])]
    for g in man["gates"]:
        for e in g["entries"]:
            for s in e.get("skipped", []):
                out.append(f"left out of {g['name']}: request `{s['id']}` — {s['reason']}")
            if (
                e["status"] == "not_comparable"
                and g["kind"] in ARM_CHECKS
                and "stderr_tail" not in e  # the arms ran; a metric or trace is missing
            ):
                out.append(f"{g['name']}: {e['arm']}: {e['reason']}")
    sp = man.get("speed")
    if sp and sp.get("status") == "not_comparable":
        out.append(f"speed not comparable: {sp.get('reason')}")
    return list(dict.fromkeys(out))


def notices(man: dict[str, Any]) -> list[str]:
    """What changed without failing a gate (a schedule that moved within its budgets)."""
    out = []
    for g in man["gates"]:
        for e in g["entries"]:
            if e.get("notice"):
                out.append(f"{g['name']} · `{e['arm']}`: {e['notice']}")
    return out


def crashed(man: dict[str, Any]) -> list[dict[str, Any]]:
    """Crashed arms grouped by reason and stderr: one record per group."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for a in man["arms"]:
        if a.get("status") != "crashed":
            continue
        g = groups.setdefault(
            (a.get("reason", ""), a.get("stderr_tail", "")),
            {"reason": a.get("reason", ""), "stderr_tail": a.get("stderr_tail", ""), "ids": []},
        )
        g["ids"].append(a["id"])
    for gate in man["gates"]:  # an arm refused on one commit that the other one ran
        for e in gate["entries"]:
            if e["status"] == "could_not_run" and "(the other commit ran it)" in e["reason"]:
                arm_id, _, why = e["reason"].partition(" — ")
                g = groups.setdefault((why, ""), {"reason": why, "stderr_tail": "", "ids": []})
                if arm_id not in g["ids"]:
                    g["ids"].append(arm_id)
    return list(groups.values())
