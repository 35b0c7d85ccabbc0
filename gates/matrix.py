"""YAML matrix -> axes, points and gate rules, validated with errors that name the key.

A matrix file looks like::

    model: fixtures/models/tiny-qwen3
    backend: numpy
    prompts: quick            # fixtures/prompts/quick.jsonl, or a path
    max_tokens: 16
    axes:
      kv: [bf16, fp8]
      parallel: [1, 4]
      paging: [off, on]
      drafter: [none]
      flags: [{}]             # sets of ENGINE_* environment variables; {} is "unset"
    gates:
      - name: flags unset == main
        across_commits: {}
      - name: concurrent == solo
        within_commit: {vary: parallel, reference: serial}

See docs/gates.md for every key.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gates import BadInput

AXES = ("model", "backend", "prompts", "kv", "parallel", "paging", "drafter", "flags")
AXIS_DEFAULTS: dict[str, Any] = {
    "backend": "numpy",
    "kv": "bf16",
    "parallel": 1,
    "paging": "off",
    "drafter": "none",
    "flags": {},
}
SCALARS = {
    "max_tokens": (int, 16),
    "context": (int, None),
    "pages": (int, 256),
    "page_rows": (int, None),
    "step_rows": (int, None),
    "draft_tokens": (int, None),
    "share": (float, None),
    "timeout": (int, 900),
    "columns": (str, None),
}
TOP_KEYS = {"name", "description", "axes", "gates", "speed", "drafter_models", *AXES, *SCALARS}
SIDES = ("base", "head")
GATE_KINDS = (
    "across_commits",
    "within_commit",
    "resumed",
    "resource",
    "schedule",
    "schedule_across_commits",
    "acceptance_across_commits",
)
RESOURCE_LIMITS = ("pages_in_use", "unplanned_allocations", "drafter_states")
SCHEDULE_METRICS = (
    "max_decode_gap_rounds",
    "short_ttft_rounds",
    "long_gap_rounds",
    "debt_without_decoders",
    "priority_inversions",
)
# Keys of a schedule rule's body that replace the matrix point's value for its arms.
SCHEDULE_OVERRIDES = ("prompts", "parallel", "share")
SPEED_KEYS = {
    "parallel": list,
    "prompt_tokens": int,
    "gen_tokens": int,
    "repeats": int,
    "metrics": list,
    "blocks": int,
    "add_blocks": int,
    "max_blocks": int,
    "budget_s": int,
    "alpha": float,
    "delta": float,
    "min_effect": float,
    "timeout": int,
    "runs": int,  # before bench schema 1: runs per side -> blocks = ceil(runs / 2)
    "max_ratio_drop": float,  # before bench schema 1: -> delta
}


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


@dataclass
class Matrix:
    path: Path
    name: str
    axes: dict[str, list[Any]]  # every axis in AXES, normalised, at least one value
    scalars: dict[str, Any]
    gates: list[Gate]
    speed: dict[str, Any] | None
    description: str = ""
    drafter_models: dict[str, str] = field(default_factory=dict)  # drafter -> its directory
    keys: dict[str, str] = field(default_factory=dict)  # axis -> where the file sets it

    def prompt_sets(self) -> list[str]:
        """Every prompt set an arm may send: the prompts axis, then the gates' own."""
        names = list(self.axes["prompts"])
        for g in self.gates:
            name = g.override.get("prompts")
            if name is not None and name not in names:
                names.append(name)
        return names

    def points(self) -> list[dict[str, Any]]:
        """The cartesian product of the axes, as dicts."""
        names = list(AXES)
        return [
            dict(zip(names, combo, strict=True))
            for combo in itertools.product(*(self.axes[n] for n in names))
        ]


def _fail(path: Path, key: str, expected: str, got: Any) -> BadInput:
    return BadInput(f"{path}: {key}: expected {expected}, got {got!r}")


def _norm_value(path: Path, key: str, axis: str, value: Any) -> Any:
    if axis == "paging":
        if value is True or value == "on":
            return "on"
        if value is False or value == "off":
            return "off"
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value  # a pool of this many pages (a small pool puts it under pressure)
        raise _fail(path, key, "on, off or a number of pages in the pool", value)
    if axis == "parallel":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _fail(path, key, "a positive integer (1, 2, 4, 8)", value)
        return value
    if axis == "flags":
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise _fail(path, key, "a mapping of ENGINE_* variables to values ({} = unset)", value)
        out = {}
        for k, v in value.items():
            if not isinstance(k, str) or not k.startswith("ENGINE_"):
                raise _fail(path, f"{key}.{k}", "a variable name starting with ENGINE_", k)
            if isinstance(v, (dict, list)) or v is None:
                raise _fail(path, f"{key}.{k}", "a scalar value", v)
            out[k] = str(v).lower() if isinstance(v, bool) else str(v)
        return dict(sorted(out.items()))
    if not isinstance(value, str) or not value:
        raise _fail(path, key, "a non-empty string", value)
    return value


def _norm_values(path: Path, key: str, axis: str, raw: Any) -> list[Any]:
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise _fail(path, key, "a non-empty list", raw)
    out: list[Any] = []
    for i, v in enumerate(items):
        nv = _norm_value(path, f"{key}[{i}]" if isinstance(raw, list) else key, axis, v)
        if nv not in out:
            out.append(nv)
    return out


def _where(path: Path, key: str, raw: Any) -> dict[str, list[Any]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _fail(path, key, "a mapping of axis -> value or list of values", raw)
    out = {}
    for axis, v in raw.items():
        if axis not in AXES:
            raise _fail(path, f"{key}.{axis}", f"an axis ({', '.join(AXES)})", axis)
        if axis == "flags":
            vals = v if isinstance(v, list) else [v]
            out[axis] = [_norm_value(path, f"{key}.{axis}", axis, x) for x in vals]
        else:
            out[axis] = _norm_values(path, f"{key}.{axis}", axis, v)
    return out


def _sides(path: Path, key: str, raw: Any, default: tuple[str, ...]) -> tuple[str, ...]:
    if raw is None:
        return default
    vals = raw if isinstance(raw, list) else [raw]
    if not vals or any(v not in SIDES for v in vals):
        raise _fail(path, key, "a list of base and/or head", raw)
    return tuple(s for s in SIDES if s in vals)


def _gate(path: Path, i: int, raw: Any) -> Gate:
    key = f"gates[{i}]"
    if not isinstance(raw, dict):
        raise _fail(path, key, "a mapping with name and one rule kind", raw)
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _fail(path, f"{key}.name", "a non-empty string", name)
    kinds = [k for k in GATE_KINDS if k in raw]
    extra = set(raw) - {"name", "where", *GATE_KINDS}
    if extra:
        bad = sorted(extra)[0]
        raise _fail(path, f"{key}.{bad}", f"one of name, where, {', '.join(GATE_KINDS)}", bad)
    if len(kinds) != 1:
        raise _fail(path, key, f"exactly one rule kind of {', '.join(GATE_KINDS)}", sorted(raw))
    kind = kinds[0]
    body = raw[kind] if raw[kind] is not None else {}
    if not isinstance(body, dict):
        raise _fail(path, f"{key}.{kind}", "a mapping", body)
    where = _where(path, f"{key}.where", raw.get("where"))
    bkey = f"{key}.{kind}"
    if kind == "across_commits":
        # The body is a filter, as in `across_commits: {paging: on}`.
        where = {**where, **_where(path, bkey, body)}
        return Gate(name, kind, where, SIDES)
    if kind in ("schedule", "schedule_across_commits", "acceptance_across_commits"):
        return _behaviour_gate(path, bkey, name, kind, where, body)
    allowed = {
        "within_commit": {"vary", "reference", "values", "commits"},
        "resumed": {"commits"},
        "resource": {"commits", *RESOURCE_LIMITS},
    }[kind]
    for k in body:
        if k not in allowed:
            raise _fail(path, f"{bkey}.{k}", f"one of {', '.join(sorted(allowed))}", k)
    sides = _sides(path, f"{bkey}.commits", body.get("commits"), ("head",))
    if kind == "resumed":
        return Gate(name, kind, where, sides)
    if kind == "resource":
        limits = {}
        for k in RESOURCE_LIMITS:
            v = body.get(k, 0)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise _fail(path, f"{bkey}.{k}", "a non-negative integer", v)
            limits[k] = v
        return Gate(name, kind, where, sides, limits=limits)
    vary = body.get("vary")
    if vary not in ("kv", "parallel", "paging", "drafter", "flags", "backend"):
        raise _fail(
            path, f"{bkey}.vary", "one of kv, parallel, paging, drafter, flags, backend", vary
        )
    if "reference" not in body:
        raise _fail(path, f"{bkey}.reference", "the reference value of " + vary, None)
    ref = body["reference"]
    if vary == "parallel" and ref == "serial":
        reference: Any = "serial"
    else:
        reference = _norm_value(path, f"{bkey}.reference", vary, ref)
    values = None
    if body.get("values") is not None:
        values = tuple(_norm_values(path, f"{bkey}.values", vary, body["values"]))
    return Gate(name, kind, where, sides, vary=vary, reference=reference, values=values)


def _number(path: Path, key: str, v: Any, low: float = 0.0) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= low:
        raise _fail(path, key, f"a number >= {low:g}", v)
    return float(v)


def _overrides(path: Path, bkey: str, body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in SCHEDULE_OVERRIDES:
        if k not in body:
            continue
        if k == "share":
            out[k] = _number(path, f"{bkey}.share", body[k], 1e-9)
        else:
            out[k] = _norm_value(path, f"{bkey}.{k}", k, body[k])
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
            raise _fail(path, f"{bkey}.{k}", f"one of {', '.join(sorted(allowed))}", k)
    if kind == "acceptance_across_commits":
        drafters = _norm_values(path, f"{bkey}.drafter", "drafter", body.get("drafter"))
        if "none" in drafters:
            raise _fail(path, f"{bkey}.drafter", "drafters other than none", drafters)
        drop = _number(path, f"{bkey}.max_drop", body.get("max_drop", 0.05))
        return Gate(name, kind, where, SIDES, drafters=tuple(drafters), max_drop=drop)
    override = _overrides(path, bkey, body)
    if kind == "schedule":
        sides = _sides(path, f"{bkey}.commits", body.get("commits"), ("head",))
        budgets = {k: _number(path, f"{bkey}.{k}", body[k]) for k in SCHEDULE_METRICS if k in body}
        if not budgets:
            raise _fail(path, bkey, f"at least one budget of {', '.join(SCHEDULE_METRICS)}", body)
        return Gate(name, kind, where, sides, budgets=budgets, override=override)
    raw = body.get("metrics", list(SCHEDULE_METRICS))
    metrics = raw if isinstance(raw, list) else [raw]
    for i, v in enumerate(metrics):
        if v not in SCHEDULE_METRICS:
            raise _fail(path, f"{bkey}.metrics[{i}]", f"one of {', '.join(SCHEDULE_METRICS)}", v)
    worse_by = _number(path, f"{bkey}.worse_by", body.get("worse_by", 0))
    return Gate(
        name, kind, where, SIDES, override=override, metrics=tuple(metrics), worse_by=worse_by
    )


def _speed(path: Path, raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _fail(path, "speed", "a mapping", raw)
    from gates.speed import schema

    out: dict[str, Any] = {
        "parallel": [1, 2, 4, 8],
        "prompt_tokens": 128,
        "gen_tokens": 32,
        "repeats": 1,
        "metrics": list(schema.DEFAULT_METRICS),
        "blocks": 6,
        "add_blocks": 6,
        "max_blocks": 24,
        "budget_s": 270,
        "alpha": 0.05,
        "delta": 0.05,
        "min_effect": 0.02,
        "timeout": 600,
    }
    for k, v in raw.items():
        if k not in SPEED_KEYS:
            raise _fail(path, f"speed.{k}", f"one of {', '.join(SPEED_KEYS)}", k)
        typ = SPEED_KEYS[k]
        if typ is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if not isinstance(v, typ) or isinstance(v, bool):
            raise _fail(path, f"speed.{k}", f"a {typ.__name__}", v)
        if k == "parallel":
            v = _norm_values(path, "speed.parallel", "parallel", v)
        if k == "metrics":
            bad = [m for m in v if m not in schema.METRICS]
            if bad or not v:
                raise _fail(path, "speed.metrics", f"a list of {', '.join(schema.METRICS)}", v)
        out[k] = v
    if "runs" in raw:
        if out["runs"] < 1:
            raise _fail(path, "speed.runs", "at least 1", out["runs"])
        if "blocks" not in raw:
            out["blocks"] = max(1, math.ceil(out["runs"] / 2))
    if "max_ratio_drop" in raw and "delta" not in raw:
        out["delta"] = out.pop("max_ratio_drop")
    out.pop("runs", None)
    out.pop("max_ratio_drop", None)
    for k in ("blocks", "max_blocks", "prompt_tokens", "gen_tokens", "repeats", "budget_s"):
        if out[k] < 1:
            raise _fail(path, f"speed.{k}", "at least 1", out[k])
    if out["add_blocks"] < 0:
        raise _fail(path, "speed.add_blocks", "at least 0", out["add_blocks"])
    if out["max_blocks"] < out["blocks"]:
        out["max_blocks"] = out["blocks"]
    for k in ("alpha", "delta", "min_effect"):
        if not 0 <= out[k] < 1:
            raise _fail(path, f"speed.{k}", "a fraction in [0, 1)", out[k])
    return out


def load(path: str | Path) -> Matrix:
    """Read and validate a matrix file; raise BadInput naming the file and key."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise BadInput(f"{p}: cannot read matrix: {e.strerror or e}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise BadInput(f"{p}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise _fail(p, "(top level)", "a mapping", raw)
    for k in raw:
        if k not in TOP_KEYS:
            raise _fail(p, str(k), f"one of {', '.join(sorted(TOP_KEYS))}", k)
    axes_raw = raw.get("axes") or {}
    if not isinstance(axes_raw, dict):
        raise _fail(p, "axes", "a mapping of axis -> list of values", axes_raw)
    axes: dict[str, list[Any]] = {}
    keys: dict[str, str] = {}
    for axis, vals in axes_raw.items():
        if axis not in AXES:
            raise _fail(p, f"axes.{axis}", f"an axis ({', '.join(AXES)})", axis)
        if axis in raw:
            raise _fail(p, f"axes.{axis}", f"{axis} either at the top level or in axes", vals)
        if not isinstance(vals, list):
            raise _fail(p, f"axes.{axis}", "a list of values", vals)
        axes[axis] = _norm_values(p, f"axes.{axis}", axis, vals)
        keys[axis] = f"axes.{axis}"
    for axis in AXES:
        if axis in axes:
            continue
        if axis in raw:
            axes[axis] = [_norm_value(p, axis, axis, raw[axis])]
            keys[axis] = axis
        elif axis in AXIS_DEFAULTS:
            axes[axis] = [AXIS_DEFAULTS[axis]]
        else:
            raise _fail(p, axis, f"a {axis} (at the top level or in axes)", None)
    scalars: dict[str, Any] = {}
    for k, (typ, default) in SCALARS.items():
        v = raw.get(k, default)
        if typ is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if typ is float and v is not None and not (isinstance(v, float) and v > 0):
            raise _fail(p, k, "a number > 0", v)
        if v is not None and (not isinstance(v, typ) or isinstance(v, bool)):
            raise _fail(p, k, f"a {typ.__name__}", v)
        if typ is int and v is not None and v < 1:
            raise _fail(p, k, "a positive integer", v)
        scalars[k] = v
    if scalars["columns"] is not None and scalars["columns"] not in AXES:
        raise _fail(p, "columns", f"an axis ({', '.join(AXES)})", scalars["columns"])
    gates_raw = raw.get("gates")
    if not isinstance(gates_raw, list) or not gates_raw:
        raise _fail(p, "gates", "a non-empty list of gates", gates_raw)
    gates = [_gate(p, i, g) for i, g in enumerate(gates_raw)]
    names = [g.name for g in gates]
    for i, n in enumerate(names):
        if n in names[:i]:
            raise _fail(p, f"gates[{i}].name", "a name not used by another gate", n)
    desc = raw.get("description", "")
    dm = raw.get("drafter_models") or {}
    if not isinstance(dm, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in dm.items()
    ):
        raise _fail(p, "drafter_models", "a mapping of drafter name -> directory", dm)
    return Matrix(
        path=p,
        name=str(raw.get("name") or p.stem),
        axes=axes,
        scalars=scalars,
        gates=gates,
        speed=_speed(p, raw.get("speed")),
        description=str(desc) if desc else "",
        drafter_models=dict(dm),
        keys=keys,
    )


def column_axis(m: Matrix) -> str | None:
    """The axis shown as receipt columns: the matrix's choice, else kv if it varies."""
    if m.scalars.get("columns"):
        return m.scalars["columns"]
    for axis in ("kv", "backend", "model", "prompts"):
        if len(m.axes[axis]) > 1:
            return axis
    return None
