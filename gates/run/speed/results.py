"""Typed speed results: a verdict per cell and the run that made them.

The manifest stores them as JSON (``to_json``); the receipt reads them back
(``SpeedRun.from_json``) and renders fields, never prose. ``samples`` keeps every timed
run of every block as the engine printed it (minus per-action lists), for re-analysis.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass, field
from typing import Any

from gates.jsontypes import JsonObject
from gates.plan.speed import SpeedSpec
from gates.run.results import Status
from gates.run.speed.schema import TimedRun


class Verdict(enum.StrEnum):
    SLOWER = "slower"
    SLOWER_SMALL = "slower (small)"  # a loss past the tolerance, short of min_effect: no fail
    FASTER = "faster"
    FASTER_SMALL = "faster (small)"
    EQUIVALENT = "equivalent"
    INCONCLUSIVE = "inconclusive"


def _num(v: Any) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


def _float(v: Any) -> float:
    return math.nan if v is None else float(v)


@dataclass(slots=True)
class SpeedCell:
    """One metric at one stream count. ``base``/``head``: medians over blocks of the metric
    (its own unit); ``speed`` > 1 = head faster, with its 95 % interval; ``ratio`` =
    head / base of the metric; ``log_speeds``: one per block."""

    metric: str
    parallel: int
    base: float
    head: float
    blocks: int
    speed: float
    speed_lo: float
    speed_hi: float
    ratio: float
    p: float
    unstable: list[str] = field(default_factory=list)
    log_speeds: list[float] = field(default_factory=list)
    p_holm: float = 1.0
    level: float = 0.0
    verdict: Verdict = Verdict.INCONCLUSIVE
    accepted_by: str | None = None  # a slower cell accepted (gates/report/accept.py): who, how

    def to_json(self) -> JsonObject:
        out = {f.name: _num(getattr(self, f.name)) for f in dataclasses.fields(self)}
        out["verdict"] = str(self.verdict)
        return out

    @classmethod
    def from_json(cls, d: JsonObject) -> SpeedCell:
        kw = {f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d}
        for k in ("base", "head", "speed", "speed_lo", "speed_hi", "ratio", "p", "p_holm"):
            if k in kw:
                kw[k] = _float(kw[k])
        kw["verdict"] = Verdict(d.get("verdict", "inconclusive"))
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class Sample:
    """A block's record (or one repeat's, ``sample_per: repeat``): per cell ``metric@n`` the
    block's value on base and on head (nan: none), the bench schema, the wall seconds and
    load average around it, and its timed runs in the order they ran."""

    block: int
    schema: int
    values: dict[str, list[float]]
    wall_s: float
    load_before: float | None
    load_after: float | None
    runs: list[TimedRun]
    repeat: int | None = None  # the repeat it is, with sample_per: repeat

    def to_json(self) -> JsonObject:
        out: JsonObject = {"block": self.block, "schema": self.schema, "values": self.values}
        if self.repeat is not None:
            out["repeat"] = self.repeat
        out.update(wall_s=self.wall_s, load_before=self.load_before, load_after=self.load_after)
        out["runs"] = [r.to_json() for r in self.runs]
        return out

    @classmethod
    def from_json(cls, d: JsonObject) -> Sample:
        return cls(
            block=d["block"],
            schema=d["schema"],
            values={k: list(v) for k, v in d["values"].items()},
            wall_s=d["wall_s"],
            load_before=d.get("load_before"),
            load_after=d.get("load_after"),
            runs=[TimedRun.from_json(r) for r in d.get("runs") or []],
            repeat=d.get("repeat"),
        )


@dataclass(slots=True)
class SpeedRun:
    """The speed part of one gate run: its status (pass, fail = a *slower* cell,
    not_comparable, could_not_run), why, the cells, and how the blocks went."""

    status: Status
    reason: str = ""
    cells: list[SpeedCell] = field(default_factory=list)
    blocks: int = 0
    looks: int = 0
    max_looks: int = 0
    level: float = 0.0
    wall_s: float = 0.0
    schema: int | None = None
    cpu: int | None = None  # the CPU both sides were pinned to
    cpu_claim: str = ""  # how that CPU was claimed (gates/run/speed/cpus.py)
    stopped: str = ""  # "budget": blocks stopped at budget_s with cells still open
    planted: dict[str, str] | None = None
    spec: SpeedSpec | None = None  # the matrix's speed section
    samples: list[Sample] = field(default_factory=list)  # the blocks' records

    def verdicts(self) -> dict[Verdict, int]:
        out: dict[Verdict, int] = {}
        for c in self.cells:
            out[c.verdict] = out.get(c.verdict, 0) + 1
        return out

    def to_json(self) -> JsonObject:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["status"] = str(self.status)
        out["cells"] = [c.to_json() for c in self.cells]
        out["spec"] = self.spec.to_json() if self.spec else {}
        out["samples"] = [s.to_json() for s in self.samples]
        return out

    @classmethod
    def from_json(cls, d: JsonObject) -> SpeedRun:
        kw = {f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d}
        kw["status"] = Status(d["status"])
        kw["cells"] = [SpeedCell.from_json(c) for c in d.get("cells") or []]
        kw["spec"] = SpeedSpec.from_json(d["spec"]) if d.get("spec") else None
        kw["samples"] = [Sample.from_json(s) for s in d.get("samples") or []]
        return cls(**kw)


def speed_of(man: JsonObject) -> SpeedRun | None:
    """A manifest's speed section, typed (it is JSON on disk, or already a SpeedRun)."""
    sp = man.get("speed")
    if sp is None or isinstance(sp, SpeedRun):
        return sp
    return SpeedRun.from_json(sp)
