"""What every gate kind is beyond its plan: a ``Kind`` judges the checks its rule planned and
names the facts its receipt rows show; subclassing with a ``KEY`` registers it (``KINDS``),
so adding a kind touches its own file of this package, its test and docs/gates.md.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

from gates.judge.results import CheckOutcome
from gates.plan.planned import Arm, Check
from gates.plan.rule import Gate, Rule, Sets
from gates.run.results import ArmRun

KINDS: dict[str, type[Kind]] = {}  # YAML key -> its kind, in the order they register


class Facts(NamedTuple):
    """What a gate's result records about its rule for the receipt."""

    vary: Any = None
    reference: Any = None
    limits: Any = None


class Kind(Rule):
    """One gate kind: a ``Rule`` that also judges and names its receipt facts."""

    UNIT: ClassVar[str] = "pairs"  # what the receipt counts: "pairs" of arms, or "arms"

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        key = cls.__dict__.get("KEY")
        if key is not None:
            if key in KINDS:
                raise TypeError(f"gate kind {key!r} is defined twice")
            KINDS[key] = cls

    def judge(self, check: Check, runs: dict[Arm, ArmRun], sets: Sets) -> CheckOutcome:
        """Judge one arm check or pair check whose arms ran ok (an equality comparison
        is judged by the equality check, for every kind alike)."""
        raise NotImplementedError(f"{self.KEY} plans no checks")

    def facts(self) -> Facts:
        return Facts()


def kind_of(gate: Gate) -> Kind:
    """A parsed gate's kind (a matrix is parsed with ``KINDS``, so every rule is one)."""
    if not isinstance(gate.rule, Kind):
        raise TypeError(f"{gate.name}: {type(gate.rule).__name__} is not a gate kind")
    return gate.rule


def unit(kind: str) -> str:
    """What a kind's receipt cells count ("pairs" for a kind this runner does not know)."""
    rule = KINDS.get(kind)
    return rule.UNIT if rule is not None else "pairs"
