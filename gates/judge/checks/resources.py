"""Resource gates: counters read from an arm's metrics JSON at idle."""

from __future__ import annotations

from gates.judge.results import CheckOutcome, Shown
from gates.run.results import ArmRun

LABELS = {
    "pages_in_use": "pages in use at idle",
    "unplanned_allocations": "unplanned allocations",
    "drafter_states": "drafter states open at idle",
    "live_streams": "streams holding a lane after the run (lanes busy)",
    "waiting_streams": "requests still queued after the run",
}
# drafter_states: contract 2, an older engine that lacks it is not held to it;
# live_streams, waiting_streams: reported by served arms (`engine serve`'s /metrics) only
OPTIONAL = ("drafter_states", "live_streams", "waiting_streams")


def check(result: ArmRun, limits: dict[str, int]) -> CheckOutcome:
    """ok None: the engine reports no metric the limits name (one that is not OPTIONAL)."""
    metrics = result.metrics
    values: dict[str, Shown] = {}
    problems: list[str] = []
    missing: list[str] = []
    for name, limit in limits.items():
        v = metrics.get(name) if isinstance(metrics, dict) else None
        values[name] = v
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            if name not in OPTIONAL:
                missing.append(name)
            else:
                values.pop(name)
        elif v > limit:
            problems.append(f"{LABELS.get(name, name)}: {v} (at most {limit} allowed)")
    if problems:
        return CheckOutcome(False, values, problems)
    if missing:
        return CheckOutcome(
            None, values, [f"the engine reports no {', '.join(missing)} in --metrics"]
        )
    return CheckOutcome(True, values)
