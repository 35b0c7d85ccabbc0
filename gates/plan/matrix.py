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

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gates import BadInput
from gates.plan import speed as speed_spec
from gates.plan.axes import AXES, AXIS_DEFAULTS, fail, norm_value, norm_values
from gates.plan.point import Point
from gates.plan.rule import Kinds
from gates.plan.rules import Gate, parse_gate

__all__ = ["AXES", "AXIS_DEFAULTS", "Gate", "Matrix", "column_axis", "load"]

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
TOP_KEYS = {
    *("name", "description", "axes", "exclude", "gates", "speed", "drafter_models"),
    *AXES,
    *SCALARS,
}
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
    "quantile": float,
    "turn": int,
    "timeout": int,
    "sample_per": str,  # block (one pair a block) or repeat (one pair a repeat; docs/gates.md)
    "runs": int,  # before bench schema 1: runs per side -> blocks = ceil(runs / 2)
    "max_ratio_drop": float,  # before bench schema 1: -> delta
}


@dataclass(frozen=True)
class Scalars:
    """The matrix's top-level numbers, validated (SCALARS: their types and defaults)."""

    max_tokens: int = 16
    context: int | None = None
    pages: int = 256
    page_rows: int | None = None
    step_rows: int | None = None
    draft_tokens: int | None = None
    share: float | None = None
    timeout: int = 900  # seconds an arm may run
    columns: str | None = None  # the axis shown as receipt columns

    def arm_keys(self) -> dict[str, int | float]:
        """What every arm's config takes from them: the engine's own knobs that are set."""
        return {
            k: v
            for k, v in dataclasses.asdict(self).items()
            if k not in ("timeout", "columns") and v is not None
        }


@dataclass(frozen=True)
class Matrix:
    path: Path
    name: str
    axes: dict[str, list[Any]]  # every axis in AXES, normalised, at least one value
    scalars: Scalars
    gates: list[Gate]
    speed: speed_spec.SpeedSpec | None
    description: str = ""
    drafter_models: dict[str, str] = field(default_factory=dict)  # drafter -> its directory
    keys: dict[str, str] = field(default_factory=dict)  # axis -> where the file sets it
    exclude: list[dict[str, list[Any]]] = field(default_factory=list)  # points left out

    def prompt_sets(self) -> list[str]:
        """Every prompt set an arm may send: the prompts axis, then the gates' own."""
        names = list(self.axes["prompts"])
        for g in self.gates:
            for asked in g.rule.asked():
                if asked.axis == "prompts" and asked.value not in names:
                    names.append(asked.value)
        return names

    def column_axis(self) -> str | None:
        """The axis shown as receipt columns: the matrix's choice, else kv if it varies."""
        if self.scalars.columns:
            return self.scalars.columns
        for axis in ("kv", "backend", "model", "prompts"):
            if len(self.axes[axis]) > 1:
                return axis
        return None

    def points(self) -> list[Point]:
        """The cartesian product of the axes, less the ``exclude`` patterns."""
        names = list(AXES)
        every = [
            Point(**dict(zip(names, combo, strict=True)))
            for combo in itertools.product(*(self.axes[n] for n in names))
        ]
        return [
            p
            for p in every
            if not any(all(p.value(a) in v for a, v in x.items()) for x in self.exclude)
        ]


def _speed(path: Path, raw: Any) -> speed_spec.SpeedSpec | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise fail(path, "speed", "a mapping", raw)

    out = speed_spec.SpeedSpec().to_json()
    for k, v in raw.items():
        if k not in SPEED_KEYS:
            raise fail(path, f"speed.{k}", f"one of {', '.join(SPEED_KEYS)}", k)
        typ = SPEED_KEYS[k]
        if typ is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if not isinstance(v, typ) or isinstance(v, bool):
            raise fail(path, f"speed.{k}", f"a {typ.__name__}", v)
        if k == "parallel":
            v = norm_values(path, "speed.parallel", "parallel", v)
        if k == "metrics":
            bad = [m for m in v if m not in speed_spec.METRICS]
            if bad or not v:
                raise fail(path, "speed.metrics", f"a list of {', '.join(speed_spec.METRICS)}", v)
        out[k] = v
    if "runs" in raw:
        if out["runs"] < 1:
            raise fail(path, "speed.runs", "at least 1", out["runs"])
        if "blocks" not in raw:
            out["blocks"] = max(1, math.ceil(out["runs"] / 2))
    if "max_ratio_drop" in raw and "delta" not in raw:
        out["delta"] = out.pop("max_ratio_drop")
    out.pop("runs", None)
    out.pop("max_ratio_drop", None)
    for k in ("blocks", "max_blocks", "prompt_tokens", "gen_tokens", "repeats", "budget_s", "turn"):
        if out[k] < 1:
            raise fail(path, f"speed.{k}", "at least 1", out[k])
    if out["sample_per"] not in speed_spec.SAMPLE_PER:
        raise fail(
            path,
            "speed.sample_per",
            f"one of {', '.join(speed_spec.SAMPLE_PER)}",
            out["sample_per"],
        )
    if out["add_blocks"] < 0:
        raise fail(path, "speed.add_blocks", "at least 0", out["add_blocks"])
    if out["max_blocks"] < out["blocks"]:
        out["max_blocks"] = out["blocks"]
    for k in ("alpha", "delta", "min_effect"):
        if not 0 <= out[k] < 1:
            raise fail(path, f"speed.{k}", "a fraction in [0, 1)", out[k])
    if not 0 < out["quantile"] < 1:
        raise fail(path, "speed.quantile", "a fraction in (0, 1)", out["quantile"])
    return speed_spec.SpeedSpec.from_json(out)


def load(path: str | Path, kinds: Kinds) -> Matrix:
    """Read and validate a matrix file; raise BadInput naming the file and key. ``kinds``:
    the gate kinds its rules may be (gates.judge.kinds.KINDS)."""
    p = Path(path)
    raw = _read(p)
    axes, keys = _axes(p, raw)
    scalars = _scalars(p, raw)
    gates_raw = raw.get("gates")
    if not isinstance(gates_raw, list) or not gates_raw:
        raise fail(p, "gates", "a non-empty list of gates", gates_raw)
    gates = [parse_gate(p, i, g, kinds) for i, g in enumerate(gates_raw)]
    names = [g.name for g in gates]
    for i, n in enumerate(names):
        if n in names[:i]:
            raise fail(p, f"gates[{i}].name", "a name not used by another gate", n)
    desc = raw.get("description", "")
    dm = raw.get("drafter_models") or {}
    if not isinstance(dm, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in dm.items()
    ):
        raise fail(p, "drafter_models", "a mapping of drafter name -> directory", dm)
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
        exclude=_exclude(p, raw.get("exclude"), axes),
    )


def _read(p: Path) -> dict[Any, Any]:
    """The file's YAML: a mapping of known top-level keys."""
    try:
        text = p.read_text()
    except OSError as e:
        raise BadInput(f"{p}: cannot read matrix: {e.strerror or e}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        why = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise BadInput(f"{p}: not valid YAML{where}: {why}") from None
    if not isinstance(raw, dict):
        raise fail(p, "(top level)", "a mapping", raw)
    for k in raw:
        if k not in TOP_KEYS:
            raise fail(p, str(k), f"one of {', '.join(sorted(TOP_KEYS))}", k)
    return raw


def _axes(p: Path, raw: dict[Any, Any]) -> tuple[dict[str, list[Any]], dict[str, str]]:
    """(axis -> values, axis -> the key it was given at): from ``axes``, the top level, or
    the default."""
    axes_raw = raw.get("axes") or {}
    if not isinstance(axes_raw, dict):
        raise fail(p, "axes", "a mapping of axis -> list of values", axes_raw)
    axes: dict[str, list[Any]] = {}
    keys: dict[str, str] = {}
    for axis, vals in axes_raw.items():
        if axis not in AXES:
            raise fail(p, f"axes.{axis}", f"an axis ({', '.join(AXES)})", axis)
        if axis in raw:
            raise fail(p, f"axes.{axis}", f"{axis} either at the top level or in axes", vals)
        if not isinstance(vals, list):
            raise fail(p, f"axes.{axis}", "a list of values", vals)
        axes[axis] = norm_values(p, f"axes.{axis}", axis, vals)
        keys[axis] = f"axes.{axis}"
    for axis in AXES:
        if axis in axes:
            continue
        if axis in raw:
            axes[axis] = [norm_value(p, axis, axis, raw[axis])]
            keys[axis] = axis
        elif axis in AXIS_DEFAULTS:
            axes[axis] = [AXIS_DEFAULTS[axis]]
        else:
            raise fail(p, axis, f"a {axis} (at the top level or in axes)", None)
    return axes, keys


def _exclude(p: Path, raw: Any, axes: dict[str, list[Any]]) -> list[dict[str, list[Any]]]:
    """``exclude``: a list of patterns (axis -> a value or a list of values of that axis);
    a point that matches every axis of a pattern is not part of the matrix."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise fail(p, "exclude", "a list of patterns (axis -> value or list of values)", raw)
    out = []
    for i, pat in enumerate(raw):
        if not isinstance(pat, dict) or not pat:
            raise fail(p, f"exclude[{i}]", "a non-empty mapping of axis -> values", pat)
        norm: dict[str, list[Any]] = {}
        for axis, vals in pat.items():
            key = f"exclude[{i}].{axis}"
            if axis not in AXES:
                raise fail(p, key, f"an axis ({', '.join(AXES)})", axis)
            norm[axis] = norm_values(p, key, axis, vals)
            for v in norm[axis]:
                if v not in axes[axis]:
                    raise fail(p, key, f"a value of {axis} ({_shown(axes[axis])})", v)
        out.append(norm)
    return out


def _shown(values: list[Any]) -> str:
    return ", ".join(str(v) for v in values)


def _scalars(p: Path, raw: dict[Any, Any]) -> Scalars:
    scalars = {}
    for k, (typ, default) in SCALARS.items():
        v = raw.get(k, default)
        if typ is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if typ is float and v is not None and not (isinstance(v, float) and v > 0):
            raise fail(p, k, "a number > 0", v)
        if v is not None and (not isinstance(v, typ) or isinstance(v, bool)):
            raise fail(p, k, f"a {typ.__name__}", v)
        if typ is int and v is not None and v < 1:
            raise fail(p, k, "a positive integer", v)
        scalars[k] = v
    if scalars["columns"] is not None and scalars["columns"] not in AXES:
        raise fail(p, "columns", f"an axis ({', '.join(AXES)})", scalars["columns"])
    return Scalars(**scalars)


def column_axis(m: Matrix) -> str | None:
    return m.column_axis()
