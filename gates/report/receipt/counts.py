"""How a run's arms were settled, every arm counted once, so the counts add up.

Read from the manifest's arm rows alone (``gates show`` and merged shards get the same line):

- ``cached``: its result came from the result store (this or an earlier run);
- ``run``: run now, one engine process per distinct store key;
- ``shared``: the same store key as an arm run now (base and head with one engine tree, or
  two gates needing the same run): that one run's result, not run twice;
- ``not_comparable``: not run, because one engine lacks what the arm asks for (or refused it);
- ``not_run``: no run of its own: its plain twin failed, or the run was interrupted.
"""

from __future__ import annotations

from collections.abc import Sequence

from gates.run.results import ArmResult

KINDS = ("run", "shared", "cached", "not_comparable", "not_run")


def arm_counts(arms: Sequence[ArmResult]) -> dict[str, int]:
    """Every arm of a manifest in exactly one of ``KINDS``; ``total`` is their sum."""
    out = dict.fromkeys(KINDS, 0)
    seen: set[str] = set()
    for a in arms:
        if a.not_comparable:
            out["not_comparable"] += 1
        elif a.cached:
            out["cached"] += 1
        elif a.key is None or a.status is None or not a.ran:
            out["not_run"] += 1
        elif a.key in seen:
            out["shared"] += 1
        else:
            seen.add(a.key)
            out["run"] += 1
    out["total"] = sum(out[k] for k in KINDS)
    return out


def arms_line(c: dict[str, int]) -> str:
    """'38 arms: 26 run, 12 shared with an identical arm's run (same engine tree), 0 from
    cache': the parts always sum to the total; zero parts after the first three are left out."""
    parts = [f"{c['run']} run", f"{c['cached']} from cache"]
    if c["shared"]:
        parts.insert(1, f"{c['shared']} reused from an identical arm run now (same engine tree)")
    if c["not_comparable"]:
        parts.append(f"{c['not_comparable']} not comparable")
    if c["not_run"]:
        parts.append(f"{c['not_run']} not run (plain twin failed or interrupted)")
    return f"{c['total']} arm{'s' * (c['total'] != 1)}: {', '.join(parts)}"
