"""``schedule: {budgets, prompts?, parallel?, share?, commits?}``: an arm's schedule trace
stays within budgets (rounds of decode gap, time to first token, ...)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gates.judge.checks import schedule
from gates.judge.kinds.kind import Facts, Kind
from gates.judge.results import CheckOutcome
from gates.plan.arm_config import ArmConfig
from gates.plan.planned import Arm, ArmCheck, Check, Plan
from gates.plan.rule import Asked, Gate, Sets, Source
from gates.run.results import ArmRun

SCHEDULE_METRICS = (
    "max_decode_gap_rounds",
    "short_ttft_rounds",
    "long_gap_rounds",
    "long_first_step_rounds",
    "debt_without_decoders",
    "priority_inversions",
    "background_wait_actions",
)
# Keys of a schedule rule's body that replace the matrix point's value for its arms.
SCHEDULE_OVERRIDES = ("prompts", "parallel", "share")


@dataclass(frozen=True)
class Override:
    """A schedule rule's own arms: its prompt set, lanes and share, where the body names them."""

    prompts: str | None = None
    parallel: int | None = None
    share: float | None = None

    def axes(self) -> list[tuple[str, str | int]]:
        """(axis, value) of the axes it replaces in a matrix point (share is no axis)."""
        named = (("prompts", self.prompts), ("parallel", self.parallel))
        return [(k, v) for k, v in named if v is not None]


def overrides(src: Source) -> Override:
    """The body's prompts, parallel and share: the rule's own arms."""
    body = src.body
    return Override(
        src.value("prompts", "prompts") if "prompts" in body else None,
        src.value("parallel", "parallel") if "parallel" in body else None,
        src.number("share", 1e-9) if "share" in body else None,
    )


def configs(plan: Plan, gate: Gate, override: Override) -> list[ArmConfig]:
    """Each matching point's config with the rule's own prompt set, lanes and share."""
    points = gate.points(plan)
    if not points:
        plan.nothing_matched(gate.name)
    return [plan.config(p.replace(**dict(override.axes())), share=override.share) for p in points]


def asked(override: Override) -> list[Asked]:
    return [Asked(k, k, v) for k, v in override.axes()]


def background(arm: Arm, sets: Sets) -> frozenset[str]:
    """Ids of the background-priority requests of an arm's prompt set."""
    reqs = sets.get(arm.config.prompts, [])
    return frozenset(r.id for r in reqs if r.priority == "background")


@dataclass(frozen=True)
class Schedule(Kind):
    KEY = "schedule"
    UNIT = "arms"

    budgets: dict[str, float] = field(default_factory=dict)  # metric -> max allowed
    override: Override = Override()  # prompts, parallel, share

    @classmethod
    def parse(cls, src: Source) -> Gate:
        src.only({"commits", *SCHEDULE_OVERRIDES, *SCHEDULE_METRICS})
        override = overrides(src)
        sides = src.sides(("head",))
        budgets = {k: src.number(k) for k in SCHEDULE_METRICS if k in src.body}
        if not budgets:
            raise src.fail("", f"at least one budget of {', '.join(SCHEDULE_METRICS)}", src.body)
        return Gate(src.name, src.where, sides, cls(budgets, override))

    def plan(self, gate: Gate, plan: Plan, sets: Sets) -> None:
        seen: set[tuple[str, str]] = set()
        for cfg in configs(plan, gate, self.override):
            c = cfg.canonical()
            for side in gate.sides:
                if (side, c) not in seen:
                    seen.add((side, c))
                    plan.check(gate.name, Arm(side, c))

    def judge(self, check: Check, runs: dict[Arm, ArmRun], sets: Sets) -> CheckOutcome:
        assert isinstance(check, ArmCheck)
        return schedule.check(runs[check.arm], self.budgets, background(check.arm, sets))

    def asked(self) -> list[Asked]:
        return asked(self.override)

    def facts(self) -> Facts:
        return Facts(limits=self.budgets)
