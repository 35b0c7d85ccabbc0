"""``resource: {commits?, pages_in_use?, ...}``: counters of every planned arm the rule
selects, read from its metrics at idle, stay within their limits (default 0)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gates.judge.checks import resources
from gates.judge.kinds.kind import Facts, Kind
from gates.judge.results import CheckOutcome
from gates.plan.planned import Arm, ArmCheck, Check, Plan
from gates.plan.rule import Gate, Sets, Source, check_planned_arms
from gates.run.results import ArmRun

# live_streams, waiting_streams: busy lanes and queued requests, reported by served arms only
RESOURCE_LIMITS = (
    "pages_in_use",
    "unplanned_allocations",
    "drafter_states",
    "live_streams",
    "waiting_streams",
)


@dataclass(frozen=True)
class Resource(Kind):
    KEY = "resource"
    UNIT = "arms"
    LAST = True  # checks the arms every other rule planned

    limits: dict[str, int] = field(default_factory=dict)  # metric -> max allowed

    @classmethod
    def parse(cls, src: Source) -> Gate:
        src.only({"commits", *RESOURCE_LIMITS})
        sides = src.sides(("head",))
        limits = {}
        for k in RESOURCE_LIMITS:
            v = src.body.get(k, 0)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise src.fail(k, "a non-negative integer", v)
            limits[k] = v
        return Gate(src.name, src.where, sides, cls(limits))

    def plan(self, gate: Gate, plan: Plan, sets: Sets) -> None:
        """A check of every planned arm the gate selects (after all other gates' arms)."""
        check_planned_arms(gate, plan)

    def judge(self, check: Check, runs: dict[Arm, ArmRun], sets: Sets) -> CheckOutcome:
        assert isinstance(check, ArmCheck)
        return resources.check(runs[check.arm], self.limits)

    def facts(self) -> Facts:
        return Facts(limits=self.limits)
