"""``resumed: {commits?}``: a two-turn request resumed from its cached first turn replies as
the same request sent cold (both serial)."""

from __future__ import annotations

from dataclasses import dataclass

from gates.judge.kinds.kind import Kind
from gates.plan import prompts
from gates.plan.planned import Arm, Plan
from gates.plan.rule import Gate, Sets, Source


@dataclass(frozen=True)
class Resumed(Kind):
    KEY = "resumed"
    BLAS = True

    @classmethod
    def parse(cls, src: Source) -> Gate:
        src.only({"commits"})
        return Gate(src.name, src.where, src.sides(("head",)), cls())

    def plan(self, gate: Gate, plan: Plan, sets: Sets) -> None:
        """Per side and point with two-turn requests: the set cold (serial) against resumed."""
        before = len(plan.comparisons)
        for side in gate.sides:
            seen: set[tuple[str, str]] = set()
            for p in gate.points(plan):
                ids = prompts.resumable_ids(sets[p.prompts])
                if not ids:
                    continue
                a = Arm(side, plan.config(p, serial=True).canonical())
                b = Arm(side, plan.config(p, serial=True, resumed=True).canonical())
                if (a.config_json, b.config_json) not in seen:
                    seen.add((a.config_json, b.config_json))
                    plan.compare(gate.name, p, a, b, only_ids=ids)
        if len(plan.comparisons) == before:
            why = " (no resumable two-turn requests in the prompt sets)"
            plan.nothing_matched(gate.name, why)
