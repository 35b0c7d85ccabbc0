"""Typed results of the run phase: one status vocabulary, an arm's run and its manifest row.
The records the judge phase makes of them are gates/judge/results.py.

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
from typing import Any, TypeAlias

from gates.jsontypes import JsonObject
from gates.plan.arm_config import ArmConfig
from gates.run.reply import Reply, ReplySummary

# The engine's metrics (``--metrics``, a server's /metrics): name -> a counter (a test
# engine's also a string or null: the device it saw, its thread count).
Metric: TypeAlias = int | float | str | bool | None
Metrics: TypeAlias = dict[str, Metric]


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


def metrics_of(v: object) -> Metrics | None:
    """The metrics an engine wrote (a JSON object), its scalar values (no engine writes
    others); None for no object."""
    if not isinstance(v, dict):
        return None
    return {str(k): x for k, x in v.items() if x is None or isinstance(x, int | float | str)}


def status_of(d: JsonObject, key: str = "status") -> Status:
    try:
        return Status(d[key])
    except (KeyError, ValueError) as e:
        raise ValueError(f"result: field '{key}' is {d.get(key)!r}, not a status") from e


def need(d: JsonObject, key: str, what: str) -> Any:
    if key not in d:
        raise ValueError(f"{what}: field '{key}' is missing")
    return d[key]


def as_json(obj: Any, skip_none: bool = True) -> JsonObject:
    out: JsonObject = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if v is None and skip_none:
            continue
        out[f.name] = str(v) if isinstance(v, Status) else v
    return out


@dataclass(frozen=True, slots=True)
class ArmResult:
    """One arm as the manifest records it (its row): what ran, and how it ended. ``status``
    is None for an arm that has no result (an interrupted run); ``replies`` are summaries
    (id, token count, token hash, finish reason), the full replies stay in the store.
    ``dropped``: request id -> why it was left out of the arm; ``key``: its store key."""

    id: str
    side: str = ""
    label: str = ""
    config: ArmConfig | None = None  # None: a row made before its arm was planned (tests)
    cached: bool = False
    dropped: dict[str, str] = field(default_factory=dict)
    key: str | None = None
    status: Status | None = None
    reason: str = ""
    wall_s: float | None = None
    metrics: Metrics | None = None
    argv: str | None = None
    stderr_tail: str = ""
    replies: list[ReplySummary] = field(default_factory=list)
    device: str | None = None  # where it ran, when not simply here (a GPU, a Ray node)

    @property
    def not_comparable(self) -> bool:
        """Not run because one engine lacks what the arm asks for, or refused it (exit 2)."""
        return self.status in (Status.NOT_COMPARABLE, Status.REFUSED)

    @property
    def ran(self) -> bool:
        """It has a run's result (ok, crashed or refused), not only a plan's verdict."""
        return self.status in RAN

    def to_json(self) -> JsonObject:
        """The manifest's row: what the arm is; ``dropped`` and ``key`` once known; status
        and reason once decided; the run's fields (null where the run had none) once run."""
        out: JsonObject = {k: getattr(self, k) for k in ("id", "side", "label")}
        out["config"] = self.config.to_json() if self.config is not None else {}
        out["cached"] = self.cached
        if self.dropped:
            out["dropped"] = self.dropped
        if self.key is not None:
            out["key"] = self.key
        if self.status is not None:
            out["status"], out["reason"] = str(self.status), self.reason
        if self.ran:
            out.update({k: getattr(self, k) for k in RUN_FIELDS})
            out["replies"] = [r.to_json() for r in self.replies]
            if self.device is not None:
                out["device"] = self.device
        return out

    @classmethod
    def from_json(cls, d: JsonObject) -> ArmResult:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names and v is not None}
        kw["id"] = need(d, "id", "arm")
        if d.get("config"):
            kw["config"] = ArmConfig.from_json(d["config"])
        else:
            kw.pop("config", None)
        kw["status"] = status_of(d) if d.get("status") is not None else None
        kw["stderr_tail"] = d.get("stderr_tail") or ""
        kw["reason"] = d.get("reason") or ""
        kw["metrics"] = metrics_of(d.get("metrics"))
        replies = d.get("replies")
        if not isinstance(replies, list | None):
            raise ValueError(f"arm: field 'replies' is {str(replies)[:40]}, not a list")
        kw["replies"] = [ReplySummary.from_json(r) for r in replies or []]
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
    replies: list[Reply] | None = None
    metrics: Metrics | None = None
    trace: list[JsonObject] | None = None  # the engine's schedule trace, as it wrote it
    harness: str | None = None
    finished_at: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_json(self) -> JsonObject:
        out = as_json(self)
        if self.replies is not None:
            out["replies"] = [r.to_json() for r in self.replies]
        return out

    @classmethod
    def from_json(cls, d: JsonObject) -> ArmRun:
        if not isinstance(d, dict):
            raise ValueError(f"arm run: a {type(d).__name__}, not a JSON object")
        st = status_of(d)
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
        if isinstance(d.get("replies"), list):
            kw["replies"] = [Reply.from_json(r) for r in d["replies"]]
        kw["metrics"] = metrics_of(d.get("metrics"))
        trace = d.get("trace")
        kw["trace"] = [r for r in trace if isinstance(r, dict)] if isinstance(trace, list) else None
        return cls(**kw)


def typed(man: JsonObject, key: str, cls: Any) -> list[Any]:
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


def arms_of(man: JsonObject) -> list[ArmResult]:
    """The typed arm rows of a manifest (typed already, or read from JSON)."""
    return typed(man, "arms", ArmResult)
