"""A gate rule of a matrix (``gates:``): its name, ``where`` and ``blas``, and its one kind,
whose body the kind's own rule parses (gates/judge/kinds)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from gates.axes import fail
from gates.blas import ROW_VARIANT
from gates.judge.kinds import KINDS, Gate
from gates.judge.kinds.rule import Source, parse_where

__all__ = ["Gate", "parse_gate"]


def parse_gate(path: Path, i: int, raw: Any) -> Gate:
    key = f"gates[{i}]"
    if not isinstance(raw, dict):
        raise fail(path, key, "a mapping with name and one rule kind", raw)
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise fail(path, f"{key}.name", "a non-empty string", name)
    kinds = [k for k in KINDS if k in raw]
    extra = set(raw) - {"name", "where", "blas", *KINDS}
    if extra:
        bad = sorted(extra)[0]
        raise fail(path, f"{key}.{bad}", f"one of name, where, blas, {', '.join(KINDS)}", bad)
    if len(kinds) != 1:
        raise fail(path, key, f"exactly one rule kind of {', '.join(KINDS)}", sorted(raw))
    kind = kinds[0]
    body = raw[kind] if raw[kind] is not None else {}
    if not isinstance(body, dict):
        raise fail(path, f"{key}.{kind}", "a mapping", body)
    where = parse_where(path, f"{key}.where", raw.get("where"))
    gate = KINDS[kind].parse(Source(path, f"{key}.{kind}", name, where, body))
    if "blas" not in raw:
        return gate
    if raw["blas"] != ROW_VARIANT:
        raise fail(path, f"{key}.blas", ROW_VARIANT, raw["blas"])
    if not gate.rule.BLAS:
        blas_kinds = [k for k, rule in KINDS.items() if rule.BLAS]
        raise fail(path, f"{key}.blas", f"a rule of {', '.join(blas_kinds)}", gate.kind)
    return dataclasses.replace(gate, blas=ROW_VARIANT)
