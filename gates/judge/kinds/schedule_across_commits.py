"""``schedule_across_commits: {metrics?, worse_by?, prompts?, parallel?, share?}``: head's
schedule trace is no worse than base's on each metric (by at most ``worse_by``)."""

from __future__ import annotations

from dataclasses import dataclass

from gates.judge.checks import schedule
from gates.judge.kinds.kind import Kind
from gates.judge.kinds.schedule import (
    SCHEDULE_METRICS,
    SCHEDULE_OVERRIDES,
    Override,
    asked,
    background,
    configs,
    overrides,
)
from gates.judge.results import CheckOutcome
from gates.plan.axes import SIDES
from gates.plan.planned import Arm, Check, PairCheck, Plan
from gates.plan.rule import Asked, Gate, Sets, Source
from gates.run.results import ArmRun


@dataclass(frozen=True)
class ScheduleAcrossCommits(Kind):
    KEY = "schedule_across_commits"
    UNIT = "arms"
    ACROSS = True

    override: Override = Override()  # prompts, parallel, share
    metrics: tuple[str, ...] = SCHEDULE_METRICS  # metrics head must not worsen
    worse_by: float = 0.0  # allowed increase of each metric

    @classmethod
    def parse(cls, src: Source) -> Gate:
        src.only({*SCHEDULE_OVERRIDES, "metrics", "worse_by"})
        override = overrides(src)
        raw = src.body.get("metrics", list(SCHEDULE_METRICS))
        metrics = raw if isinstance(raw, list) else [raw]
        for i, v in enumerate(metrics):
            if v not in SCHEDULE_METRICS:
                raise src.fail(f"metrics[{i}]", f"one of {', '.join(SCHEDULE_METRICS)}", v)
        worse_by = src.number("worse_by", default=0)
        return Gate(src.name, src.where, SIDES, cls(override, tuple(metrics), worse_by))

    def plan(self, gate: Gate, plan: Plan, sets: Sets) -> None:
        seen: set[str] = set()
        for cfg in configs(plan, gate, self.override):
            c = cfg.canonical()
            if c not in seen:
                seen.add(c)
                plan.pair(gate.name, Arm("base", c), Arm("head", c))

    def judge(self, check: Check, runs: dict[Arm, ArmRun], sets: Sets) -> CheckOutcome:
        assert isinstance(check, PairCheck)
        a, b = runs[check.a], runs[check.b]
        return schedule.compare(a, b, self.metrics, self.worse_by, background(check.b, sets))

    def asked(self) -> list[Asked]:
        return asked(self.override)
