"""The receipt's lists: arms that could not run, what was skipped or not comparable, and
what changed within budget. Each item may be many lines (a traceback): the template fences
all but the first."""

from __future__ import annotations

from dataclasses import dataclass, field

from gates.judge.kinds import unit
from gates.report.view import Manifest
from gates.run.results import Status


def skipped(man: Manifest) -> list[str]:
    """Not comparable arms grouped by reason, notes of the plan, requests left out."""
    groups: dict[str, list[str]] = {}
    for a in man.arms:
        if a.not_comparable:
            groups.setdefault(a.reason, []).append(a.id)
    out = []
    for why, ids in groups.items():
        first, nl, rest = why.partition("\n")  # the count stays out of a fenced traceback
        n = f"{len(ids)} arm{'s' * (len(ids) > 1)}, e.g. {ids[0]}"
        out.append(f"not comparable: {first} ({n}){nl}{rest}")
    out += [f"skipped: {n}" for n in man.notes]
    for g in man.gates:
        for e in g.entries:
            for s in e.skipped:
                out.append(f"left out of {g.name}: request `{s.id}` — {s.reason}")
            if (
                e.status == Status.NOT_COMPARABLE
                and unit(g.kind) == "arms"
                and e.stderr_tail is None  # the arms ran; a metric or trace is missing
            ):
                out.append(f"{g.name}: {e.arm}: {e.reason}")
    sp = man.speed
    if sp and sp.status == Status.NOT_COMPARABLE:
        out.append(f"speed not comparable: {sp.reason}")
    return list(dict.fromkeys(out))


def notices(man: Manifest) -> list[str]:
    """What changed without failing a gate (a schedule that moved within its budgets)."""
    out = []
    for g in man.gates:
        for e in g.entries:
            if e.notice:
                out.append(f"{g.name} · `{e.arm}`: {e.notice}")
    return out


@dataclass(frozen=True)
class Crashed:
    """Arms that could not run for one reason (and one stderr): a record of the receipt."""

    reason: str
    stderr_tail: str
    ids: list[str] = field(default_factory=list)


def crashed(man: Manifest) -> list[Crashed]:
    """Crashed arms grouped by reason and stderr: one record per group."""
    groups: dict[tuple[str, str], Crashed] = {}
    for a in man.arms:
        if a.status != Status.CRASHED:
            continue
        g = groups.setdefault((a.reason, a.stderr_tail), Crashed(a.reason, a.stderr_tail))
        g.ids.append(a.id)
    for gate in man.gates:  # an arm refused on one commit that the other one ran
        for e in gate.entries:
            if e.ran_on_other_commit and e.blocked_arm:
                why = f"{e.arm_reason} (the other commit ran it)"
                g = groups.setdefault((why, ""), Crashed(why, ""))
                if e.blocked_arm not in g.ids:
                    g.ids.append(e.blocked_arm)
    return list(groups.values())
