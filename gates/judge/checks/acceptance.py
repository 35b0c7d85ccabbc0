"""Drafter behaviour across commits: accepted / drafted of the same arm on base and head.

Drafts never change tokens (drafted == plain holds either way), so a drafter that
proposes worse drafts after a change shows only here: acceptance drops."""

from __future__ import annotations

from gates.judge.results import CheckOutcome
from gates.run.results import ArmRun


def rate(result: ArmRun) -> tuple[int, int]:
    """(accepted, drafted) summed over an arm's replies."""
    acc = drafted = 0
    for r in result.replies or []:
        a, d = r.accepted, r.drafted
        if isinstance(a, int) and isinstance(d, int):
            acc, drafted = acc + a, drafted + d
    return acc, drafted


def compare(a: ArmRun, b: ArmRun, max_drop: float) -> CheckOutcome:
    (aa, ad), (ba, bd) = rate(a), rate(b)
    if ad == 0:
        why = "the base arm drafted nothing: no acceptance to compare"
        return CheckOutcome(None, {"base": "0 drafted"}, [why])
    ra = aa / ad
    rb = ba / bd if bd else 0.0
    values = {"base": f"{ra:.3f} ({aa}/{ad})", "head": f"{rb:.3f} ({ba}/{bd})"}
    problems = []
    if rb < ra - max_drop:
        problems.append(f"acceptance {ra:.3f} → {rb:.3f} (max drop {max_drop:g})")
    return CheckOutcome(not problems, values, problems)
