"""Gate rules -> the arms to run and the comparisons to make between them.

An *arm* is one engine run: a commit side (base or head) and a config (the axis values
of a matrix point, plus ``serial`` and ``resumed``, plus the matrix's scalars). Arms are
deduplicated, so gates that need the same run share it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gates import prompts as prompts_mod
from gates.matrix import Gate, Matrix, column_axis

COMPARING = ("across_commits", "within_commit", "resumed", "served")  # rules of Comparisons


@dataclass(frozen=True)
class Arm:
    side: str
    config_json: str  # canonical JSON of the config
    name: str = field(default="", compare=False)  # label without the matrix's constant axes

    @property
    def config(self) -> dict[str, Any]:
        return json.loads(self.config_json)

    @property
    def id(self) -> str:
        return f"{self.side}: {self.name or label(self.config)}"


@dataclass
class Comparison:
    gate: str
    column: str
    a: Arm  # the reference (base, plain, serial, cold, ...)
    b: Arm  # the arm that must equal it
    only_ids: list[str] | None = None  # compare only these request ids


@dataclass
class ResourceCheck:
    gate: str
    column: str
    arm: Arm
    limits: dict[str, int]


@dataclass
class ScheduleCheck:
    gate: str
    column: str
    arm: Arm
    budgets: dict[str, float]


@dataclass
class PairCheck:
    """The same arm on base (a) and head (b), compared on behaviour, not bits."""

    gate: str
    column: str
    a: Arm
    b: Arm


@dataclass
class Plan:
    arms: list[Arm] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    checks: list[ResourceCheck] = field(default_factory=list)
    schedule_checks: list[ScheduleCheck] = field(default_factory=list)
    pairs: list[PairCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # rules that matched nothing, and why

    hide: dict[str, Any] = field(default_factory=dict)  # axis -> its one value, not shown

    def add(self, arm: Arm) -> Arm:
        if arm not in self.arms:
            arm = Arm(arm.side, arm.config_json, label(arm.config, self.hide))
            self.arms.append(arm)
            return arm
        return self.arms[self.arms.index(arm)]


def canonical(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def label(c: dict[str, Any], hide: dict[str, Any] | None = None) -> str:
    """A short readable name of a config, unique within a matrix.

    ``hide``: axes with one value in the matrix (model, backend, prompts), left out
    where the config has that value (a schedule rule's own prompt set is shown)."""
    hide = hide or {}

    def shown(k: str) -> bool:
        return k not in hide or c[k] != hide[k]

    parts = []
    if shown("model"):
        parts.append(str(c["model"]).rstrip("/").rsplit("/", 1)[-1])
    parts += [str(c[k]) for k in ("prompts", "backend") if shown(k)]
    parts.append(f"kv={c['kv']}")
    parts.append("serial" if c.get("serial") else f"p={c['parallel']}")
    parts.append(f"paging={c['paging']}")
    if c["drafter"] != "none":
        parts.append(f"drafter={c['drafter']}")
    if c.get("served"):
        parts.append(f"served={c['served']}")
    if c.get("share") is not None:
        parts.append(f"share={c['share']:g}")
    parts.extend(f"{k}={v}" for k, v in c["flags"].items())
    if c.get("resumed"):
        parts.append("resumed")
    if c.get("blas"):
        parts.append(f"blas={c['blas']}")
    return " ".join(parts)


def _config(m: Matrix, point: dict[str, Any], **variant: Any) -> dict[str, Any]:
    c = {
        **point,
        **{k: v for k, v in m.scalars.items() if k not in ("timeout", "columns") and v is not None},
    }
    if c["drafter"] in m.drafter_models:
        c["drafter_model"] = m.drafter_models[c["drafter"]]
    if variant.get("share") is not None:
        c["share"] = variant["share"]
    c["serial"] = bool(variant.get("serial", False))
    c["resumed"] = bool(variant.get("resumed", False))
    if c["serial"]:
        c["parallel"] = 1
    return c


def _matches(point: dict[str, Any], where: dict[str, list[Any]]) -> bool:
    return all(point[axis] in vals for axis, vals in where.items())


def _column(m: Matrix, point: dict[str, Any]) -> str:
    axis = column_axis(m)
    if axis is None:
        return ""
    v = point[axis]
    return json.dumps(v, sort_keys=True) if isinstance(v, dict) else str(v)


def _points(m: Matrix, gate: Gate) -> list[dict[str, Any]]:
    where = dict(gate.where)
    across = gate.kind.endswith("across_commits") or gate.against == "main"
    if across and "flags" not in where:
        where["flags"] = [{}]  # "flags unset == main": compare with the new flags left off
    extra = {"blas": gate.blas} if gate.blas else {}  # a config key, not an axis
    return [{**p, **extra} for p in m.points() if _matches(p, where)]


def build(m: Matrix, prompt_sets: dict[str, list[dict[str, Any]]]) -> Plan:
    """Expand every gate of the matrix into arms and comparisons.

    ``prompt_sets`` maps each prompts axis value to its loaded prompt set.
    """
    plan = Plan(
        hide={a: m.axes[a][0] for a in ("model", "backend", "prompts") if len(m.axes[a]) == 1}
    )
    resource_gates = []
    for gate in m.gates:
        points = _points(m, gate)
        before = len(plan.comparisons)
        if gate.kind == "across_commits":
            for p in points:
                c = canonical(_config(m, p))
                a, b = plan.add(Arm("base", c)), plan.add(Arm("head", c))
                plan.comparisons.append(Comparison(gate.name, _column(m, p), a, b))
        elif gate.kind == "within_commit":
            _within(m, gate, points, plan)
        elif gate.kind in ("schedule", "schedule_across_commits", "acceptance_across_commits"):
            _behaviour(m, gate, points, plan)
        elif gate.kind == "served":
            _served(m, gate, points, plan)
        elif gate.kind == "resumed":
            _resumed(m, gate, points, plan, prompt_sets)
        else:
            resource_gates.append(gate)
            continue
        if len(plan.comparisons) == before and gate.kind in COMPARING:
            plan.notes.append(
                f"{gate.name}: no matrix point matches this rule"
                + (
                    " (no resumable two-turn requests in the prompt sets)"
                    if gate.kind == "resumed"
                    else ""
                )
            )
    for arm in list(plan.arms):  # oracle/noisy drafters read their plain twin's replies
        cfg = arm.config
        if cfg["drafter"] in ("oracle", "noisy") and not cfg.get("drafter_model"):
            plan.add(Arm(arm.side, canonical({**cfg, "drafter": "none"})))
    for gate in resource_gates:
        _resource(m, gate, plan)
    return plan


def _resumed(
    m: Matrix,
    gate: Gate,
    points: list[dict[str, Any]],
    plan: Plan,
    prompt_sets: dict[str, list[dict[str, Any]]],
) -> None:
    """Per side and point with two-turn requests: the set cold (serial) against resumed."""
    for side in gate.sides:
        seen: set[tuple[str, str]] = set()
        for p in points:
            ids = prompts_mod.resumable_ids(prompt_sets[p["prompts"]])
            if not ids:
                continue
            a = Arm(side, canonical(_config(m, p, serial=True)))
            b = Arm(side, canonical(_config(m, p, serial=True, resumed=True)))
            if (a.config_json, b.config_json) in seen:
                continue
            seen.add((a.config_json, b.config_json))
            a, b = plan.add(a), plan.add(b)
            plan.comparisons.append(Comparison(gate.name, _column(m, p), a, b, ids))


def _resource(m: Matrix, gate: Gate, plan: Plan) -> None:
    """A check of every planned arm the gate selects (after all other gates' arms)."""
    if not plan.arms:  # a matrix of resource gates only: run the points themselves
        for side in gate.sides:
            for p in _points(m, gate):
                plan.add(Arm(side, canonical(_config(m, p))))
    checked = 0
    for arm in list(plan.arms):
        cfg = arm.config
        if arm.side in gate.sides and _matches(cfg, gate.where):
            plan.checks.append(ResourceCheck(gate.name, _column(m, cfg), arm, gate.limits))
            checked += 1
    if not checked:
        plan.notes.append(f"{gate.name}: no arm on {'/'.join(gate.sides)} matches")


def _behaviour(m: Matrix, gate: Gate, points: list[dict[str, Any]], plan: Plan) -> None:
    """Arms of the schedule and acceptance rules: each matching point, with the rule's
    own prompt set, lanes and share (schedule) or each of its drafters (acceptance)."""
    axes = {k: v for k, v in gate.override.items() if k != "share"}
    share = gate.override.get("share")
    seen: set[tuple[str, ...]] = set()
    for p in points:
        if gate.kind == "acceptance_across_commits":
            configs = [_config(m, {**p, "drafter": d}) for d in gate.drafters]
        else:
            configs = [_config(m, {**p, **axes}, share=share)]
        for cfg in configs:
            c = canonical(cfg)
            if gate.kind == "schedule":
                for side in gate.sides:
                    if (side, c) not in seen:
                        seen.add((side, c))
                        arm = plan.add(Arm(side, c))
                        plan.schedule_checks.append(
                            ScheduleCheck(gate.name, _column(m, cfg), arm, gate.budgets)
                        )
            elif (c,) not in seen:
                seen.add((c,))
                a, b = plan.add(Arm("base", c)), plan.add(Arm("head", c))
                plan.pairs.append(PairCheck(gate.name, _column(m, cfg), a, b))
    if not points:
        plan.notes.append(f"{gate.name}: no matrix point matches this rule")


def _within(m: Matrix, gate: Gate, points: list[dict[str, Any]], plan: Plan) -> None:
    axis = gate.vary
    assert axis is not None
    seen: set[tuple[str, str, str]] = set()
    for side in gate.sides:
        for p in points:
            if gate.values is not None:
                variants = [{**p, axis: v} for v in gate.values if v != gate.reference]
            elif p[axis] != gate.reference:
                variants = [p]
            else:
                variants = []
            for v in variants:
                if gate.reference == "serial":
                    ref = _config(m, v, serial=True)
                else:
                    ref = _config(m, {**v, axis: gate.reference})
                a = Arm(side, canonical(ref))
                b = Arm(side, canonical(_config(m, v)))
                if (side, a.config_json, b.config_json) in seen:
                    continue
                seen.add((side, a.config_json, b.config_json))
                a, b = plan.add(a), plan.add(b)
                plan.comparisons.append(Comparison(gate.name, _column(m, v), a, b))


def _served(m: Matrix, gate: Gate, points: list[dict[str, Any]], plan: Plan) -> None:
    """Served arms (`engine serve` driven through the openai client, gates/served.py) of
    each point, with the rule's lanes, against `engine run` of the same commit and flags
    (offline), the same served arm on base (main), or one client at a time on one lane
    (solo: the point's serial arm, served)."""
    seen: set[tuple[Arm, Arm]] = set()
    for p in points:
        point = {**p, **gate.override}
        for mode in gate.served:
            served = canonical({**_config(m, point), "served": mode})
            if gate.against == "main":
                pairs = [(Arm("base", served), Arm("head", served))]
            else:
                ref = _config(m, point, serial=gate.against == "solo")
                if gate.against == "solo":
                    ref["served"] = mode
                pairs = [(Arm(s, canonical(ref)), Arm(s, served)) for s in gate.sides]
            for a, b in pairs:
                if (a, b) not in seen:
                    seen.add((a, b))
                    a, b = plan.add(a), plan.add(b)
                    plan.comparisons.append(Comparison(gate.name, _column(m, point), a, b))
