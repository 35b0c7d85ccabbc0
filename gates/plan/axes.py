"""Axis values of a matrix, normalised, and the one error shape of a bad matrix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gates import BadInput

AXES = ("model", "backend", "prompts", "kv", "parallel", "paging", "drafter", "flags")
AXIS_DEFAULTS: dict[str, str | int | dict[str, str]] = {
    "backend": "numpy",
    "kv": "bf16",
    "parallel": 1,
    "paging": "off",
    "drafter": "none",
    "flags": {},
}
SIDES = ("base", "head")


def fail(path: Path, key: str, expected: str, got: Any) -> BadInput:
    return BadInput(f"{path}: {key}: expected {expected}, got {got!r}")


def norm_value(path: Path, key: str, axis: str, value: Any) -> Any:
    if axis == "paging":
        if value is True or value == "on":
            return "on"
        if value is False or value == "off":
            return "off"
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value  # a pool of this many pages (a small pool puts it under pressure)
        raise fail(path, key, "on, off or a number of pages in the pool", value)
    if axis == "parallel":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise fail(path, key, "a positive integer (1, 2, 4, 8)", value)
        return value
    if axis == "flags":
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise fail(path, key, "a mapping of ENGINE_* variables to values ({} = unset)", value)
        out = {}
        for k, v in value.items():
            if not isinstance(k, str) or not k.startswith("ENGINE_"):
                raise fail(path, f"{key}.{k}", "a variable name starting with ENGINE_", k)
            if isinstance(v, (dict, list)) or v is None:
                raise fail(path, f"{key}.{k}", "a scalar value", v)
            out[k] = str(v).lower() if isinstance(v, bool) else str(v)
        return dict(sorted(out.items()))
    if not isinstance(value, str) or not value:
        raise fail(path, key, "a non-empty string", value)
    return value


def norm_values(path: Path, key: str, axis: str, raw: Any) -> list[Any]:
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise fail(path, key, "a non-empty list", raw)
    out: list[Any] = []
    for i, v in enumerate(items):
        nv = norm_value(path, f"{key}[{i}]" if isinstance(raw, list) else key, axis, v)
        if nv not in out:
            out.append(nv)
    return out


def number(path: Path, key: str, v: Any, low: float = 0.0) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= low:
        raise fail(path, key, f"a number >= {low:g}", v)
    return float(v)
