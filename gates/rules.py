"""Gate rules of a matrix (``gates:``): their kinds, bodies and validation."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gates.axes import AXES, SIDES, fail, norm_value, norm_values, number
from gates.blas import ROW_VARIANT

GATE_KINDS = (
    "across_commits",
    "within_commit",
    "resumed",
    "resource",
    "schedule",
    "schedule_across_commits",
    "acceptance_across_commits",
    "served",
)
# live_streams, waiting_streams: busy lanes and queued requests, reported by served arms only
RESOURCE_LIMITS = (
    "pages_in_use",
    "unplanned_allocations",
    "drafter_states",
    "live_streams",
    "waiting_streams",
)
SERVED_MODES = {True: "stream", False: "plain"}  # `stream:` of a served rule -> arm value
SERVED_AGAINST = ("offline", "main", "solo")
BLAS_KINDS = ("across_commits", "within_commit", "resumed")  # rules that take `blas:`
SCHEDULE_METRICS = (
    "max_decode_gap_rounds",
    "short_ttft_rounds",
    "long_gap_rounds",
    "long_first_step_rounds",
    "debt_without_decoders",
    "priority_inversions",
    "background_wait_actions",
)
# Keys of a schedule rule's body that replace the matrix point's value for its arms.
SCHEDULE_OVERRIDES = ("prompts", "parallel", "share")


@dataclass(frozen=True)
class Gate:
    name: str
    kind: str  # one of GATE_KINDS
    where: dict[str, Any]  # axis -> allowed values (a list)
    sides: tuple[str, ...]  # which commits the rule runs on
    vary: str | None = None  # within_commit: the axis that varies
    reference: Any = None  # within_commit: its reference value ("serial" for parallel)
    values: tuple[Any, ...] | None = None  # within_commit: values to try (default: the axis)
    limits: dict[str, int] = field(default_factory=dict)  # resource: metric -> max allowed
    budgets: dict[str, float] = field(default_factory=dict)  # schedule: metric -> max allowed
    override: dict[str, Any] = field(default_factory=dict)  # schedule*: prompts, parallel, share
    metrics: tuple[str, ...] = ()  # schedule_across_commits: metrics head must not worsen
    worse_by: float = 0.0  # schedule_across_commits: allowed increase of each metric
    drafters: tuple[str, ...] = ()  # acceptance_across_commits
    max_drop: float = 0.0  # acceptance_across_commits: allowed drop of accepted/drafted
    served: tuple[str, ...] = ()  # served: "stream" and/or "plain" (the arms' API mode)
    against: str = ""  # served: what a served arm must equal (SERVED_AGAINST)
    blas: str = ""  # "row-variant": the arms run on a BLAS kernel whose bits follow row counts


def _where(path: Path, key: str, raw: Any) -> dict[str, list[Any]]:
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


def _sides(path: Path, key: str, raw: Any, default: tuple[str, ...]) -> tuple[str, ...]:
    if raw is None:
        return default
    vals = raw if isinstance(raw, list) else [raw]
    if not vals or any(v not in SIDES for v in vals):
        raise fail(path, key, "a list of base and/or head", raw)
    return tuple(s for s in SIDES if s in vals)


def parse_gate(path: Path, i: int, raw: Any) -> Gate:
    key = f"gates[{i}]"
    if not isinstance(raw, dict):
        raise fail(path, key, "a mapping with name and one rule kind", raw)
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise fail(path, f"{key}.name", "a non-empty string", name)
    kinds = [k for k in GATE_KINDS if k in raw]
    extra = set(raw) - {"name", "where", "blas", *GATE_KINDS}
    if extra:
        bad = sorted(extra)[0]
        raise fail(path, f"{key}.{bad}", f"one of name, where, blas, {', '.join(GATE_KINDS)}", bad)
    gate = _parse_kind(path, key, name, kinds, raw)
    if "blas" not in raw:
        return gate
    if raw["blas"] != ROW_VARIANT:
        raise fail(path, f"{key}.blas", ROW_VARIANT, raw["blas"])
    if gate.kind not in BLAS_KINDS:
        raise fail(path, f"{key}.blas", f"a rule of {', '.join(BLAS_KINDS)}", gate.kind)
    return dataclasses.replace(gate, blas=ROW_VARIANT)


def _parse_kind(path: Path, key: str, name: str, kinds: list[str], raw: dict[str, Any]) -> Gate:
    if len(kinds) != 1:
        raise fail(path, key, f"exactly one rule kind of {', '.join(GATE_KINDS)}", sorted(raw))
    kind = kinds[0]
    body = raw[kind] if raw[kind] is not None else {}
    if not isinstance(body, dict):
        raise fail(path, f"{key}.{kind}", "a mapping", body)
    where = _where(path, f"{key}.where", raw.get("where"))
    bkey = f"{key}.{kind}"
    if kind == "across_commits":
        # The body is a filter, as in `across_commits: {paging: on}`.
        where = {**where, **_where(path, bkey, body)}
        return Gate(name, kind, where, SIDES)
    if kind in ("schedule", "schedule_across_commits", "acceptance_across_commits"):
        return _behaviour_gate(path, bkey, name, kind, where, body)
    if kind == "served":
        return _served_gate(path, bkey, name, where, body)
    allowed = {
        "within_commit": {"vary", "reference", "values", "commits"},
        "resumed": {"commits"},
        "resource": {"commits", *RESOURCE_LIMITS},
    }[kind]
    for k in body:
        if k not in allowed:
            raise fail(path, f"{bkey}.{k}", f"one of {', '.join(sorted(allowed))}", k)
    sides = _sides(path, f"{bkey}.commits", body.get("commits"), ("head",))
    if kind == "resumed":
        return Gate(name, kind, where, sides)
    if kind == "resource":
        limits = {}
        for k in RESOURCE_LIMITS:
            v = body.get(k, 0)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise fail(path, f"{bkey}.{k}", "a non-negative integer", v)
            limits[k] = v
        return Gate(name, kind, where, sides, limits=limits)
    return _within_gate(path, bkey, name, where, sides, body)


def _within_gate(
    path: Path,
    bkey: str,
    name: str,
    where: dict[str, list[Any]],
    sides: tuple[str, ...],
    body: dict[Any, Any],
) -> Gate:
    vary = body.get("vary")
    if vary not in ("kv", "parallel", "paging", "drafter", "flags", "backend"):
        raise fail(
            path, f"{bkey}.vary", "one of kv, parallel, paging, drafter, flags, backend", vary
        )
    if "reference" not in body:
        raise fail(path, f"{bkey}.reference", "the reference value of " + vary, None)
    ref = body["reference"]
    if vary == "parallel" and ref == "serial":
        reference: Any = "serial"
    else:
        reference = norm_value(path, f"{bkey}.reference", vary, ref)
    values = None
    if body.get("values") is not None:
        values = tuple(norm_values(path, f"{bkey}.values", vary, body["values"]))
    return Gate(name, "within_commit", where, sides, vary=vary, reference=reference, values=values)


def _overrides(path: Path, bkey: str, body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in SCHEDULE_OVERRIDES:
        if k not in body:
            continue
        if k == "share":
            out[k] = number(path, f"{bkey}.share", body[k], 1e-9)
        else:
            out[k] = norm_value(path, f"{bkey}.{k}", k, body[k])
    return out


def _behaviour_gate(
    path: Path, bkey: str, name: str, kind: str, where: dict[str, Any], body: dict[str, Any]
) -> Gate:
    """schedule, schedule_across_commits and acceptance_across_commits rules."""
    if kind == "schedule":
        allowed = {"commits", *SCHEDULE_OVERRIDES, *SCHEDULE_METRICS}
    elif kind == "schedule_across_commits":
        allowed = {*SCHEDULE_OVERRIDES, "metrics", "worse_by"}
    else:
        allowed = {"drafter", "max_drop"}
    for k in body:
        if k not in allowed:
            raise fail(path, f"{bkey}.{k}", f"one of {', '.join(sorted(allowed))}", k)
    if kind == "acceptance_across_commits":
        drafters = norm_values(path, f"{bkey}.drafter", "drafter", body.get("drafter"))
        if "none" in drafters:
            raise fail(path, f"{bkey}.drafter", "drafters other than none", drafters)
        drop = number(path, f"{bkey}.max_drop", body.get("max_drop", 0.05))
        return Gate(name, kind, where, SIDES, drafters=tuple(drafters), max_drop=drop)
    override = _overrides(path, bkey, body)
    if kind == "schedule":
        sides = _sides(path, f"{bkey}.commits", body.get("commits"), ("head",))
        budgets = {k: number(path, f"{bkey}.{k}", body[k]) for k in SCHEDULE_METRICS if k in body}
        if not budgets:
            raise fail(path, bkey, f"at least one budget of {', '.join(SCHEDULE_METRICS)}", body)
        return Gate(name, kind, where, sides, budgets=budgets, override=override)
    raw = body.get("metrics", list(SCHEDULE_METRICS))
    metrics = raw if isinstance(raw, list) else [raw]
    for i, v in enumerate(metrics):
        if v not in SCHEDULE_METRICS:
            raise fail(path, f"{bkey}.metrics[{i}]", f"one of {', '.join(SCHEDULE_METRICS)}", v)
    worse_by = number(path, f"{bkey}.worse_by", body.get("worse_by", 0))
    return Gate(
        name, kind, where, SIDES, override=override, metrics=tuple(metrics), worse_by=worse_by
    )


def _served_gate(
    path: Path, bkey: str, name: str, where: dict[str, Any], body: dict[str, Any]
) -> Gate:
    """served: {stream: true|false|[true, false], against: offline|main|solo, parallel?,
    commits?}: arms that drive `engine serve` through the openai client (gates/served.py)."""
    allowed = {"stream", "against", "parallel", "commits"}
    for k in body:
        if k not in allowed:
            raise fail(path, f"{bkey}.{k}", f"one of {', '.join(sorted(allowed))}", k)
    raw = body.get("stream", True)
    vals = raw if isinstance(raw, list) else [raw]
    if not vals or any(not isinstance(v, bool) for v in vals):
        raise fail(path, f"{bkey}.stream", "true, false or a list of them", raw)
    against = body.get("against", "offline")
    if against not in SERVED_AGAINST:
        raise fail(path, f"{bkey}.against", f"one of {', '.join(SERVED_AGAINST)}", against)
    override = {}
    if "parallel" in body:
        override["parallel"] = norm_value(path, f"{bkey}.parallel", "parallel", body["parallel"])
    default_sides = SIDES if against == "main" else ("head",)
    sides = _sides(path, f"{bkey}.commits", body.get("commits"), default_sides)
    if against == "main" and "commits" in body:
        raise fail(path, f"{bkey}.commits", "no commits (against: main compares both)", sides)
    modes = tuple(dict.fromkeys(SERVED_MODES[v] for v in vals))
    return Gate(name, "served", where, sides, override=override, served=modes, against=against)
