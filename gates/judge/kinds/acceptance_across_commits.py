"""``acceptance_across_commits: {drafter, max_drop?}``: each drafter's accepted / drafted
on head drops by at most ``max_drop`` from base's (drafts never change tokens, so a worse
drafter shows only here)."""

from __future__ import annotations

from dataclasses import dataclass

from gates.judge.checks import acceptance
from gates.judge.kinds.kind import Kind
from gates.judge.results import CheckOutcome
from gates.plan.axes import SIDES
from gates.plan.planned import Arm, Check, PairCheck, Plan
from gates.plan.rule import Asked, Gate, Sets, Source
from gates.run.results import ArmRun


@dataclass(frozen=True)
class AcceptanceAcrossCommits(Kind):
    KEY = "acceptance_across_commits"
    UNIT = "arms"
    ACROSS = True

    drafters: tuple[str, ...]
    max_drop: float = 0.05  # allowed drop of accepted/drafted

    @classmethod
    def parse(cls, src: Source) -> Gate:
        src.only({"drafter", "max_drop"})
        drafters = src.values("drafter", "drafter")
        if "none" in drafters:
            raise src.fail("drafter", "drafters other than none", drafters)
        drop = src.number("max_drop", default=0.05)
        return Gate(src.name, src.where, SIDES, cls(tuple(drafters), drop))

    def plan(self, gate: Gate, plan: Plan, sets: Sets) -> None:
        points = gate.points(plan)
        seen: set[str] = set()
        for p in points:
            for d in self.drafters:
                c = plan.config(p.replace(drafter=d)).canonical()
                if c not in seen:
                    seen.add(c)
                    plan.pair(gate.name, Arm("base", c), Arm("head", c))
        if not points:
            plan.nothing_matched(gate.name)

    def judge(self, check: Check, runs: dict[Arm, ArmRun], sets: Sets) -> CheckOutcome:
        assert isinstance(check, PairCheck)
        return acceptance.compare(runs[check.a], runs[check.b], self.max_drop)

    def asked(self) -> list[Asked]:
        return [Asked(f"drafter[{i}]", "drafter", d) for i, d in enumerate(self.drafters)]
