"""What a plan holds: the arms to run, the comparisons and checks to make of them, and
how a matrix point becomes an arm's config.

An *arm* is one engine run: a commit side (base or head) and a config (the axis values
of a matrix point, plus ``serial`` and ``resumed``, plus the matrix's scalars). Arms are
deduplicated, so gates that need the same run share it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gates.plan.arm_config import ArmConfig
from gates.plan.point import Point


@dataclass(frozen=True)
class Arm:
    side: str
    config_json: str  # canonical JSON of the config (ArmConfig.canonical)
    name: str = field(default="", compare=False)  # label without the matrix's constant axes

    @property
    def config(self) -> ArmConfig:
        return ArmConfig.from_json(json.loads(self.config_json))

    @property
    def id(self) -> str:
        return f"{self.side}: {self.name or label(self.config)}"


@dataclass
class Comparison:
    """Two arms whose replies must be equal, bit for bit."""

    gate: str
    column: str
    a: Arm  # the reference (base, plain, serial, cold, ...)
    b: Arm  # the arm that must equal it
    only_ids: list[str] | None = None  # compare only these request ids


@dataclass
class ArmCheck:
    """One arm, judged by its gate's rule (its metrics, its trace, its replies)."""

    gate: str
    column: str
    arm: Arm


@dataclass
class PairCheck:
    """The same arm on base (a) and head (b), judged by its gate's rule on behaviour, not
    bits."""

    gate: str
    column: str
    a: Arm
    b: Arm


Check = ArmCheck | PairCheck


@dataclass
class Plan:
    """Filled by the gates' rules (gates/judge/kinds), from the matrix's points."""

    matrix_points: list[Point]  # the matrix's points, less its exclusions
    arm_keys: dict[str, int | float]  # the matrix's scalars every arm takes (max_tokens, ...)
    drafter_models: dict[str, str]  # drafter -> its directory
    column_axis: str | None  # the axis shown as receipt columns
    arms: list[Arm] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    checks: list[ArmCheck] = field(default_factory=list)
    pairs: list[PairCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # rules that matched nothing, and why

    hide: dict[str, str] = field(default_factory=dict)  # axis -> its one value, not shown

    def add(self, arm: Arm) -> Arm:
        if arm not in self.arms:
            arm = Arm(arm.side, arm.config_json, label(arm.config, self.hide))
            self.arms.append(arm)
            return arm
        return self.arms[self.arms.index(arm)]

    def compare(self, gate: str, point: Point, a: Arm, b: Arm, **kw: Any) -> None:
        """Plan both arms and the comparison of their replies (``kw``: ``only_ids``)."""
        a, b = self.add(a), self.add(b)
        self.comparisons.append(Comparison(gate, self.column(point), a, b, **kw))

    def check(self, gate: str, arm: Arm) -> None:
        arm = self.add(arm)
        self.checks.append(ArmCheck(gate, self.column(arm.config), arm))

    def pair(self, gate: str, a: Arm, b: Arm) -> None:
        a, b = self.add(a), self.add(b)
        self.pairs.append(PairCheck(gate, self.column(b.config), a, b))

    def config(
        self,
        point: Point,
        serial: bool = False,
        resumed: bool = False,
        share: float | None = None,
    ) -> ArmConfig:
        """An arm's config: the point, the matrix's scalars, ``serial``, ``resumed`` and
        ``share``."""
        knobs = dict(self.arm_keys)
        if share is not None:
            knobs["share"] = share
        return ArmConfig(
            model=point.model,
            backend=point.backend,
            prompts=point.prompts,
            kv=point.kv,
            parallel=1 if serial else point.parallel,
            paging=point.paging,
            drafter=point.drafter,
            flags=dict(point.flags),
            serial=bool(serial),
            resumed=bool(resumed),
            drafter_model=self.drafter_models.get(point.drafter),
            blas=point.blas,
            **knobs,  # the matrix scalars: max_tokens, pages, ... (fields of ArmConfig)
        )

    def column(self, at: Point | ArmConfig) -> str:
        """The receipt column of a point (or an arm's config)."""
        axis = self.column_axis
        if axis is None:
            return ""
        v = at.value(axis)
        return json.dumps(v, sort_keys=True) if isinstance(v, dict) else str(v)

    def points(self, where: dict[str, list[Any]], across: bool, blas: str) -> list[Point]:
        """The matrix points a rule applies to: those ``where`` selects; for a rule across
        commits, with the flags unset unless ``where`` names them; ``blas``: a config key."""
        where = dict(where)
        if across and "flags" not in where:
            where["flags"] = [{}]  # "flags unset == main": compare with the new flags left off
        chosen = [p for p in self.matrix_points if matches(p, where)]
        return [p.replace(blas=blas) for p in chosen] if blas else chosen

    def nothing_matched(self, gate: str, why: str = "") -> None:
        self.notes.append(f"{gate}: no matrix point matches this rule{why}")


def label(c: ArmConfig, hide: dict[str, str] | None = None) -> str:
    """A short readable name of a config, unique within a matrix.

    ``hide``: axes with one value in the matrix (model, backend, prompts), left out
    where the config has that value (a schedule rule's own prompt set is shown)."""
    hide = hide or {}

    def shown(k: str) -> bool:
        return k not in hide or c.value(k) != hide[k]

    parts = []
    if shown("model"):
        parts.append(str(c.model).rstrip("/").rsplit("/", 1)[-1])
    parts += [str(c.value(k)) for k in ("prompts", "backend") if shown(k)]
    parts.append(f"kv={c.kv}")
    parts.append("serial" if c.serial else f"p={c.parallel}")
    parts.append(f"paging={c.paging}")
    if c.drafter != "none":
        parts.append(f"drafter={c.drafter}")
    if c.served:
        parts.append(f"served={c.served}")
    if c.share is not None:
        parts.append(f"share={c.share:g}")
    parts.extend(f"{k}={v}" for k, v in c.flags.items())
    if c.resumed:
        parts.append("resumed")
    if c.blas:
        parts.append(f"blas={c.blas}")
    return " ".join(parts)


def matches(at: Point | ArmConfig, where: dict[str, list[Any]]) -> bool:
    """Whether a point (or an arm's config) has one of ``where``'s values on each axis."""
    return all(at.value(axis) in vals for axis, vals in where.items())
