"""``served: {stream?, against?, parallel?, commits?}``: arms that drive ``engine serve``
through the openai client (gates/run/served.py) reply as ``engine run`` of the same commit
(offline), as the same served arm on base (main), or as one client at a time on one lane
(solo)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gates.judge.kinds.kind import Kind
from gates.plan.axes import SIDES
from gates.plan.planned import Arm, Plan
from gates.plan.rule import Asked, Gate, Sets, Source

SERVED_MODES = {True: "stream", False: "plain"}  # `stream:` of a served rule -> arm value
SERVED_AGAINST = ("offline", "main", "solo")


@dataclass(frozen=True)
class Served(Kind):
    KEY = "served"

    modes: tuple[str, ...]  # "stream" and/or "plain" (the arms' API mode)
    against: str = "offline"  # what a served arm must equal (SERVED_AGAINST)
    override: dict[str, int] = field(default_factory=dict)  # parallel

    @classmethod
    def parse(cls, src: Source) -> Gate:
        src.only({"stream", "against", "parallel", "commits"})
        raw = src.body.get("stream", True)
        vals = raw if isinstance(raw, list) else [raw]
        if not vals or any(not isinstance(v, bool) for v in vals):
            raise src.fail("stream", "true, false or a list of them", raw)
        against = src.body.get("against", "offline")
        if against not in SERVED_AGAINST:
            raise src.fail("against", f"one of {', '.join(SERVED_AGAINST)}", against)
        override = {}
        if "parallel" in src.body:
            override["parallel"] = src.value("parallel", "parallel")
        sides = src.sides(SIDES if against == "main" else ("head",))
        if against == "main" and "commits" in src.body:
            raise src.fail("commits", "no commits (against: main compares both)", sides)
        modes = tuple(dict.fromkeys(SERVED_MODES[v] for v in vals))
        return Gate(src.name, src.where, sides, cls(modes, against, override))

    def across(self) -> bool:
        return self.against == "main"

    def plan(self, gate: Gate, plan: Plan, sets: Sets) -> None:
        seen: set[tuple[Arm, Arm]] = set()
        before = len(plan.comparisons)
        for p in gate.points(plan):
            point = p.replace(**self.override)
            for mode in self.modes:
                served = plan.config(point).replace(served=mode).canonical()
                if self.against == "main":
                    pairs = [(Arm("base", served), Arm("head", served))]
                else:
                    ref = plan.config(point, serial=self.against == "solo")
                    if self.against == "solo":
                        ref = ref.replace(served=mode)
                    pairs = [(Arm(s, ref.canonical()), Arm(s, served)) for s in gate.sides]
                for a, b in pairs:
                    if (a, b) not in seen:
                        seen.add((a, b))
                        plan.compare(gate.name, point, a, b)
        if len(plan.comparisons) == before:
            plan.nothing_matched(gate.name)

    def asked(self) -> list[Asked]:
        return [Asked(k, k, v) for k, v in self.override.items()]
