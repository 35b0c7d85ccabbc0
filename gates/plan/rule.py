"""What the plan phase knows of a gate kind: a ``Rule`` (its YAML key, parsing, the arms it
plans), and the ``Gate`` that holds one with the fields every kind shares.

The kinds themselves (one file each, with their judging and receipt facts) are the judge
phase's (gates/judge/kinds); the matrix is parsed with their registry handed in, so the plan
phase never imports a later one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from gates import BadInput
from gates.plan.axes import AXES, SIDES, fail, norm_value, norm_values, number
from gates.plan.planned import Arm, Plan, matches
from gates.plan.point import Point
from gates.plan.request import PromptRequest

Where = dict[str, list[Any]]  # axis -> the values a rule is limited to
Sets = dict[str, list[PromptRequest]]  # prompt set name -> its requests
Kinds = Mapping[str, type["Rule"]]  # YAML key -> its rule class (the judge phase's KINDS)


class Asked(NamedTuple):
    """A value a rule names beyond ``where`` (checked against the engines' capabilities):
    the key under the rule's body, the axis it belongs to, and the value."""

    key: str
    axis: str
    value: Any


@dataclass(frozen=True)
class Source:
    """One rule's body as the matrix wrote it, and where: every error names ``key``."""

    path: Path
    key: str  # gates[i].<kind>
    name: str  # the gate's name
    where: Where  # the gate's ``where:``, parsed
    body: dict[Any, Any]

    def fail(self, sub: str, expected: str, got: Any) -> BadInput:
        return fail(self.path, f"{self.key}.{sub}" if sub else self.key, expected, got)

    def only(self, allowed: set[str]) -> None:
        """Refuse a key of the body that the rule does not take."""
        for k in self.body:
            if k not in allowed:
                raise self.fail(str(k), f"one of {', '.join(sorted(allowed))}", k)

    def sides(self, default: tuple[str, ...]) -> tuple[str, ...]:
        """``commits:``: base and/or head, in that order."""
        raw = self.body.get("commits")
        if raw is None:
            return default
        vals = raw if isinstance(raw, list) else [raw]
        if not vals or any(v not in SIDES for v in vals):
            raise self.fail("commits", "a list of base and/or head", raw)
        return tuple(s for s in SIDES if s in vals)

    def value(self, sub: str, axis: str) -> Any:
        return norm_value(self.path, f"{self.key}.{sub}", axis, self.body[sub])

    def values(self, sub: str, axis: str) -> list[Any]:
        return norm_values(self.path, f"{self.key}.{sub}", axis, self.body.get(sub))

    def number(self, sub: str, low: float = 0.0, default: float | None = None) -> float:
        v = self.body[sub] if default is None else self.body.get(sub, default)
        return number(self.path, f"{self.key}.{sub}", v, low)


def parse_where(path: Path, key: str, raw: Any) -> Where:
    """A ``where:`` filter (or a body that is one): axis -> value or list of values."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise fail(path, key, "a mapping of axis -> value or list of values", raw)
    out = {}
    for axis, v in raw.items():
        if axis not in AXES:
            raise fail(path, f"{key}.{axis}", f"an axis ({', '.join(AXES)})", axis)
        if axis == "flags":
            vals = v if isinstance(v, list) else [v]
            out[axis] = [norm_value(path, f"{key}.{axis}", axis, x) for x in vals]
        else:
            out[axis] = norm_values(path, f"{key}.{axis}", axis, v)
    return out


class Rule:
    """One gate kind as the plan phase sees it: its YAML key, parsing and arms. Kinds are
    frozen dataclasses of what their body says (gates/judge/kinds/kind.py)."""

    KEY: ClassVar[str]  # the YAML key of the rule
    BLAS: ClassVar[bool] = False  # takes ``blas: row-variant``
    ACROSS: ClassVar[bool] = False  # compares base with head: flags unset unless `where` says
    LAST: ClassVar[bool] = False  # plans after every other rule (it checks their arms)

    @classmethod
    def parse(cls, src: Source) -> Gate:
        """The gate, its body validated (BadInput naming the key)."""
        raise NotImplementedError

    def across(self) -> bool:
        """Whether its arms compare base with head (planned with the flags left unset)."""
        return self.ACROSS

    def plan(self, gate: Gate, plan: Plan, sets: Sets) -> None:
        """Add the arms the rule needs and what to judge of them to ``plan``."""
        raise NotImplementedError

    def asked(self) -> list[Asked]:
        """Values the rule names beyond ``where``: checked against the engines."""
        return []


@dataclass(frozen=True)
class Gate:
    name: str
    where: Where  # axis -> allowed values (a list)
    sides: tuple[str, ...]  # which commits the rule runs on
    rule: Rule
    blas: str = ""  # "row-variant": the arms run on a BLAS kernel whose bits follow row counts

    @property
    def kind(self) -> str:
        return self.rule.KEY

    def points(self, plan: Plan) -> list[Point]:
        """The matrix points this gate applies to."""
        return plan.points(self.where, self.rule.across(), self.blas)


def check_planned_arms(gate: Gate, plan: Plan) -> None:
    """Check every arm planned so far that the gate selects (its sides, its ``where``): a
    rule that reads arms on their own plans last. A matrix of such rules alone runs the
    points themselves."""
    if not plan.arms:
        for side in gate.sides:
            for p in gate.points(plan):
                plan.add(Arm(side, plan.config(p).canonical()))
    checked = 0
    for arm in list(plan.arms):
        if arm.side in gate.sides and matches(arm.config, gate.where):
            plan.check(gate.name, arm)
            checked += 1
    if not checked:
        plan.notes.append(f"{gate.name}: no arm on {'/'.join(gate.sides)} matches")
