"""Typed results: one status vocabulary, and the records the evaluate phase hands the receipt.

``Status`` joins what were two vocabularies (an arm's ``ok``/``crashed``/``refused`` and a
gate's ``pass``/``fail``/``could_not_run``); its values are the strings the JSON manifest
always used, so a manifest written before these types still reads (``from_json``) and the
result store keeps its harness version. The renderer reads these fields, never the prose
of a ``reason``: a reason is for people only.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any


class Status(enum.StrEnum):
    # an arm
    OK = "ok"
    CRASHED = "crashed"  # crashed or timed out
    REFUSED = "refused"  # the engine will not run that configuration (exit 2)
    # an arm, an entry, a gate, a speed result
    NOT_COMPARABLE = "not_comparable"
    COULD_NOT_RUN = "could_not_run"
    PASS = "pass"
    FAIL = "fail"
    EMPTY = "empty"  # a gate with no entries
    NOT_RUN = "not_run"


RAN = (Status.OK, Status.CRASHED, Status.REFUSED)  # how a run ends
RUN_FIELDS = ("wall_s", "metrics", "argv", "stderr_tail", "replies")  # an arm row's, once run
ORDER = (Status.FAIL, Status.COULD_NOT_RUN, Status.PASS, Status.NOT_COMPARABLE)


def worst(states: list[Status]) -> Status:
    """A gate or cell state from its entries': fail > could not run > pass > n/c."""
    for s in ORDER:
        if s in states:
            return s
    return Status.EMPTY


def _status(d: dict[str, Any], key: str = "status") -> Status:
    try:
        return Status(d[key])
    except (KeyError, ValueError) as e:
        raise ValueError(f"result: field '{key}' is {d.get(key)!r}, not a status") from e


def _need(d: dict[str, Any], key: str, what: str) -> Any:
    if key not in d:
        raise ValueError(f"{what}: field '{key}' is missing")
    return d[key]


def _json(obj: Any, skip_none: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if v is None and skip_none:
            continue
        out[f.name] = str(v) if isinstance(v, Status) else v
    return out


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
    diffs: list[dict[str, Any]] = field(default_factory=list)
    n_diffs: int = 0
    skipped: list[dict[str, Any]] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)
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

    def to_json(self) -> dict[str, Any]:
        return _json(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Comparison:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["status"] = _status(d)
        kw["column"] = _need(d, "column", "gate entry")
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class Cell:
    """A gate's entries in one column of the receipt's table."""

    status: Status
    matched: int
    total: int
    counts: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return _json(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Cell:
        m, t = _need(d, "matched", "gate cell"), _need(d, "total", "gate cell")
        return cls(_status(d), m, t, dict(d.get("counts", {})))


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

    def to_json(self) -> dict[str, Any]:
        out = _json(self)
        out["cells"] = {k: c.to_json() for k, c in self.cells.items()}
        out["entries"] = [e.to_json() for e in self.entries]
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GateResult:
        return cls(
            name=_need(d, "name", "gate result"),
            kind=_need(d, "kind", "gate result"),
            status=_status(d),
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
class ArmResult:
    """One arm as the manifest records it (its row): what ran, and how it ended. ``status``
    is None for an arm that has no result (an interrupted run); ``replies`` are summaries
    (id, token count, token hash, finish reason), the full replies stay in the store.
    ``dropped``: request id -> why it was left out of the arm; ``key``: its store key."""

    id: str
    side: str = ""
    label: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    cached: bool = False
    dropped: dict[str, str] = field(default_factory=dict)
    key: str | None = None
    status: Status | None = None
    reason: str = ""
    wall_s: float | None = None
    metrics: dict[str, Any] | None = None
    argv: str | None = None
    stderr_tail: str = ""
    replies: list[dict[str, Any]] = field(default_factory=list)
    device: str | None = None  # where it ran, when not simply here (a GPU, a Ray node)

    @property
    def not_comparable(self) -> bool:
        """Not run because one engine lacks what the arm asks for, or refused it (exit 2)."""
        return self.status in (Status.NOT_COMPARABLE, Status.REFUSED)

    @property
    def ran(self) -> bool:
        """It has a run's result (ok, crashed or refused), not only a plan's verdict."""
        return self.status in RAN

    def to_json(self) -> dict[str, Any]:
        """The manifest's row: what the arm is; ``dropped`` and ``key`` once known; status
        and reason once decided; the run's fields (null where the run had none) once run."""
        out: dict[str, Any] = {k: getattr(self, k) for k in ("id", "side", "label", "config")}
        out["cached"] = self.cached
        if self.dropped:
            out["dropped"] = self.dropped
        if self.key is not None:
            out["key"] = self.key
        if self.status is not None:
            out["status"], out["reason"] = str(self.status), self.reason
        if self.ran:
            out.update({k: getattr(self, k) for k in RUN_FIELDS})
            if self.device is not None:
                out["device"] = self.device
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ArmResult:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names and v is not None}
        kw["id"] = _need(d, "id", "arm")
        kw["status"] = _status(d) if d.get("status") is not None else None
        kw["stderr_tail"] = d.get("stderr_tail") or ""
        kw["reason"] = d.get("reason") or ""
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class ArmRun:
    """One arm as it was run (``execute.run_arm``, ``served.run_served``) or read back from the
    result store: how it ended and, when ``ok``, the replies, the engine's metrics and the
    schedule trace. The store keeps ``to_json()``; ``from_json`` reads an entry written
    before this type (same keys), and a bad one raises ValueError (the store's miss)."""

    status: Status
    reason: str = ""
    exit_code: int | None = None
    wall_s: float = 0.0
    argv: str | None = None
    stderr_tail: str = ""
    device: str | None = None
    replies: list[dict[str, Any]] | None = None
    metrics: dict[str, Any] | None = None
    trace: list[dict[str, Any]] | None = None
    harness: str | None = None
    finished_at: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_json(self) -> dict[str, Any]:
        return _json(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ArmRun:
        if not isinstance(d, dict):
            raise ValueError(f"arm run: a {type(d).__name__}, not a JSON object")
        st = _status(d)
        if st not in RAN:
            raise ValueError(f"arm run: field 'status' is {str(st)!r}, not ok/crashed/refused")
        if st is Status.OK and not isinstance(d.get("replies"), list):
            raise ValueError("arm run: an ok run without a list of 'replies'")
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names and v is not None}
        kw["status"] = st
        kw["reason"] = d.get("reason") or ""
        kw["stderr_tail"] = d.get("stderr_tail") or ""
        kw["wall_s"] = float(d.get("wall_s") or 0.0)
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """What a metrics check of one arm, or of base against head, found. ``ok`` is None when
    the engine did not report what the check reads (the entry is not comparable);
    ``problems`` say why it failed (or what was missing), ``notice`` what changed within
    budget."""

    ok: bool | None
    values: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    notice: str | None = None


@dataclass(frozen=True, slots=True)
class Equality:
    """Two arms' replies compared per request: ``matched`` of ``total``, the requests left
    out (``skipped``: id and reason) and one record per differing request (``diffs``)."""

    matched: int = 0
    total: int = 0
    skipped: list[dict[str, Any]] = field(default_factory=list)
    diffs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def all_equal(self) -> bool:
        return self.matched == self.total


def _typed(man: dict[str, Any], key: str, cls: Any) -> list[Any]:
    """A manifest's list under ``key`` as ``cls`` (typed already, or read from JSON)."""
    out = []
    for x in man[key]:
        if isinstance(x, cls):
            out.append(x)
        elif isinstance(x, dict):
            out.append(cls.from_json(x))
        else:
            art = "an" if cls.__name__[0] in "AEIOU" else "a"
            raise TypeError(f"manifest: {key}: a {type(x).__name__}, not {art} {cls.__name__}")
    return out


def arms_of(man: dict[str, Any]) -> list[ArmResult]:
    """The typed arm rows of a manifest (typed already, or read from JSON)."""
    return _typed(man, "arms", ArmResult)


def gates_of(man: dict[str, Any]) -> list[GateResult]:
    """The typed gates of a manifest (as written by the evaluate phase, or read from JSON)."""
    return _typed(man, "gates", GateResult)
