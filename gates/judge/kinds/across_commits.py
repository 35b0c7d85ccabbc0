"""``across_commits: {filter}``: every matching point on head replies as on base."""

from __future__ import annotations

from dataclasses import dataclass

from gates.judge.kinds.kind import Kind
from gates.plan.axes import SIDES
from gates.plan.planned import Arm, Plan
from gates.plan.rule import Gate, Sets, Source, parse_where


@dataclass(frozen=True)
class AcrossCommits(Kind):
    KEY = "across_commits"
    BLAS = True
    ACROSS = True

    @classmethod
    def parse(cls, src: Source) -> Gate:
        # The body is a filter, as in `across_commits: {paging: on}`.
        where = {**src.where, **parse_where(src.path, src.key, src.body)}
        return Gate(src.name, where, SIDES, cls())

    def plan(self, gate: Gate, plan: Plan, sets: Sets) -> None:
        points = gate.points(plan)
        for p in points:
            c = plan.config(p).canonical()
            plan.compare(gate.name, p, Arm("base", c), Arm("head", c))
        if not points:
            plan.nothing_matched(gate.name)
