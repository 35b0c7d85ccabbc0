"""``within_commit: {vary, reference, values?, commits?}``: on one commit, each value of an
axis replies as its reference value (``serial`` for parallel: one request at a time)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gates.judge.kinds.kind import Facts, Kind
from gates.plan.planned import Arm, Plan
from gates.plan.rule import Asked, Gate, Sets, Source

VARIES = ("kv", "parallel", "paging", "drafter", "flags", "backend")


@dataclass(frozen=True)
class WithinCommit(Kind):
    KEY = "within_commit"
    BLAS = True

    vary: str  # the axis that varies
    reference: Any  # its reference value ("serial" for parallel)
    values: tuple[Any, ...] | None = None  # values to try (default: the matrix's)

    @classmethod
    def parse(cls, src: Source) -> Gate:
        src.only({"vary", "reference", "values", "commits"})
        sides = src.sides(("head",))
        vary = src.body.get("vary")
        if vary not in VARIES:
            raise src.fail("vary", f"one of {', '.join(VARIES)}", vary)
        if "reference" not in src.body:
            raise src.fail("reference", "the reference value of " + vary, None)
        ref = src.body["reference"]
        reference = (
            "serial" if vary == "parallel" and ref == "serial" else src.value("reference", vary)
        )
        values = None
        if src.body.get("values") is not None:
            values = tuple(src.values("values", vary))
        return Gate(src.name, src.where, sides, cls(vary, reference, values))

    def plan(self, gate: Gate, plan: Plan, sets: Sets) -> None:
        axis, before = self.vary, len(plan.comparisons)
        seen: set[tuple[str, str, str]] = set()
        for side in gate.sides:
            for p in gate.points(plan):
                if self.values is not None:
                    variants = [p.replace(**{axis: v}) for v in self.values if v != self.reference]
                elif p.value(axis) != self.reference:
                    variants = [p]
                else:
                    variants = []
                for v in variants:
                    if self.reference == "serial":
                        ref = plan.config(v, serial=True)
                    else:
                        ref = plan.config(v.replace(**{axis: self.reference}))
                    a = Arm(side, ref.canonical())
                    b = Arm(side, plan.config(v).canonical())
                    if (side, a.config_json, b.config_json) not in seen:
                        seen.add((side, a.config_json, b.config_json))
                        plan.compare(gate.name, v, a, b)
        if len(plan.comparisons) == before:
            plan.nothing_matched(gate.name)

    def asked(self) -> list[Asked]:
        return [Asked(f"values[{i}]", self.vary, v) for i, v in enumerate(self.values or ())]

    def facts(self) -> Facts:
        return Facts(vary=self.vary, reference=self.reference)
