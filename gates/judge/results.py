"""Typed results of the judge phase: a gate's entries and cells, what a check found, and an
equality of two arms' replies; the receipt reads these fields, never the prose of a reason.
Their statuses are the run phase's one vocabulary (gates/run/results.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from gates.jsontypes import JsonObject
from gates.judge import diffs as diffs_mod
from gates.judge.diffs import Diff, Skipped
from gates.run.results import Status, as_json, need, status_of, typed

# a value a gate's entry shows beside its name: a metric as the engine reported it, or text
# made to be shown ("0.912 (31/34)", "3 → 4")
Shown: TypeAlias = int | float | str | bool | None
ORDER = (Status.FAIL, Status.COULD_NOT_RUN, Status.PASS, Status.NOT_COMPARABLE)


def worst(states: list[Status]) -> Status:
    """A gate or cell state from its entries': fail > could not run > pass > n/c."""
    for s in ORDER:
        if s in states:
            return s
    return Status.EMPTY


@dataclass(frozen=True, slots=True)
class Comparison:
    """One entry of a gate: a comparison of two arms, or a check of one arm (``arm``) or of
    base against head. ``stderr_tail`` is None when the arms ran (a blocked entry has
    one, maybe empty); ``blocked_arm`` names the arm that blocked it, ``arm_reason`` is
    that arm's own reason, and ``ran_on_other_commit`` says that arm was refused on one
    commit but ran on the other."""

    column: str
    status: Status
    reason: str = ""
    matched: int = 0
    total: int = 0
    a: str | None = None
    b: str | None = None
    a_name: str | None = None
    b_name: str | None = None
    arm: str | None = None
    diffs: list[Diff] = field(default_factory=list)
    n_diffs: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    values: dict[str, Shown] = field(default_factory=dict)
    notice: str | None = None
    stderr_tail: str | None = None
    blocked_arm: str | None = None
    arm_reason: str | None = None
    ran_on_other_commit: bool = False

    @property
    def is_pair(self) -> bool:
        """A comparison of two arms' replies (not a metrics check)."""
        return self.a_name is not None

    @property
    def where(self) -> str:
        return self.b or self.arm or ""

    def to_json(self) -> JsonObject:
        out = as_json(self)
        out["diffs"] = [x.to_json() for x in self.diffs]
        out["skipped"] = [x.to_json() for x in self.skipped]
        return out

    @classmethod
    def from_json(cls, d: JsonObject) -> Comparison:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["status"] = status_of(d)
        kw["column"] = need(d, "column", "gate entry")
        kw["diffs"] = [diffs_mod.from_json(x) for x in d.get("diffs", [])]
        kw["skipped"] = [Skipped.from_json(x) for x in d.get("skipped", [])]
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class Cell:
    """A gate's entries in one column of the receipt's table."""

    status: Status
    matched: int
    total: int
    counts: dict[str, int]

    def to_json(self) -> JsonObject:
        return as_json(self)

    @classmethod
    def from_json(cls, d: JsonObject) -> Cell:
        m, t = need(d, "matched", "gate cell"), need(d, "total", "gate cell")
        return cls(status_of(d), m, t, dict(d.get("counts", {})))


@dataclass(frozen=True, slots=True)
class GateResult:
    name: str
    kind: str
    status: Status
    matched: int
    total: int
    sides: list[str] = field(default_factory=list)
    cells: dict[str, Cell] = field(default_factory=dict)
    entries: list[Comparison] = field(default_factory=list)
    vary: Any = None
    reference: Any = None
    limits: Any = None

    def to_json(self) -> JsonObject:
        out = as_json(self)
        out["cells"] = {k: c.to_json() for k, c in self.cells.items()}
        out["entries"] = [e.to_json() for e in self.entries]
        return out

    @classmethod
    def from_json(cls, d: JsonObject) -> GateResult:
        return cls(
            name=need(d, "name", "gate result"),
            kind=need(d, "kind", "gate result"),
            status=status_of(d),
            matched=d.get("matched", 0),
            total=d.get("total", 0),
            sides=list(d.get("sides", [])),
            cells={k: Cell.from_json(c) for k, c in d.get("cells", {}).items()},
            entries=[Comparison.from_json(e) for e in d.get("entries", [])],
            vary=d.get("vary"),
            reference=d.get("reference"),
            limits=d.get("limits"),
        )


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """What a metrics check of one arm, or of base against head, found. ``ok`` is None when
    the engine did not report what the check reads (the entry is not comparable);
    ``problems`` say why it failed (or what was missing), ``notice`` what changed within
    budget."""

    ok: bool | None
    values: dict[str, Shown] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    notice: str | None = None


@dataclass(frozen=True, slots=True)
class Equality:
    """Two arms' replies compared per request: ``matched`` of ``total``, the requests left
    out (``skipped``: id and reason) and one record per differing request (``diffs``)."""

    matched: int = 0
    total: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    diffs: list[Diff] = field(default_factory=list)

    @property
    def all_equal(self) -> bool:
        return self.matched == self.total


def gates_of(man: JsonObject) -> list[GateResult]:
    """The typed gates of a manifest (as written by the evaluate phase, or read from JSON)."""
    return typed(man, "gates", GateResult)
