"""A gate rule of a matrix (``gates:``): its name, ``where`` and ``blas``, and its one kind,
whose body the kind's own rule parses (gates/judge/kinds)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from gates.plan.axes import fail
from gates.plan.rule import Gate, Kinds, Source, parse_where

__all__ = ["ROW_VARIANT", "Gate", "parse_gate"]

ROW_VARIANT = "row-variant"  # ``blas:``: run the arms on a kernel whose bits follow row counts


def parse_gate(path: Path, i: int, raw: Any, kinds: Kinds) -> Gate:
    """One gate of ``gates:``, its kind one of ``kinds`` (YAML key -> rule class)."""
    key = f"gates[{i}]"
    if not isinstance(raw, dict):
        raise fail(path, key, "a mapping with name and one rule kind", raw)
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise fail(path, f"{key}.name", "a non-empty string", name)
    named = [k for k in kinds if k in raw]
    extra = set(raw) - {"name", "where", "blas", *kinds}
    if extra:
        bad = sorted(extra)[0]
        raise fail(path, f"{key}.{bad}", f"one of name, where, blas, {', '.join(kinds)}", bad)
    if len(named) != 1:
        raise fail(path, key, f"exactly one rule kind of {', '.join(kinds)}", sorted(raw))
    kind = named[0]
    body = raw[kind] if raw[kind] is not None else {}
    if not isinstance(body, dict):
        raise fail(path, f"{key}.{kind}", "a mapping", body)
    where = parse_where(path, f"{key}.where", raw.get("where"))
    gate = kinds[kind].parse(Source(path, f"{key}.{kind}", name, where, body))
    if "blas" not in raw:
        return gate
    if raw["blas"] != ROW_VARIANT:
        raise fail(path, f"{key}.blas", ROW_VARIANT, raw["blas"])
    if not gate.rule.BLAS:
        blas_kinds = [k for k, rule in kinds.items() if rule.BLAS]
        raise fail(path, f"{key}.blas", f"a rule of {', '.join(blas_kinds)}", gate.kind)
    return dataclasses.replace(gate, blas=ROW_VARIANT)
