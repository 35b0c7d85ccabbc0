"""A matrix against the engines it will drive: values that neither commit's engine knows
are typos (exit 2, the key named), not "not comparable" cells that pass green."""

from __future__ import annotations

from typing import Any

from gates import BadInput
from gates.plan.matrix import Matrix
from gates.run.capabilities import Capabilities
from gates.run.results import ArmResult

# axis -> the capabilities list that names its values
LISTED = {"kv": "kv", "drafter": "drafters"}


def _known(caps: list[Capabilities], key: str) -> set[Any] | None:
    """The values any engine lists under ``key``; None if no engine lists it at all."""
    lists = [got for c in caps if (got := c.listed(key)) is not None]
    if not lists:
        return None
    return {v for values in lists for v in values}


def _refuse(m: Matrix, key: str, axis: str, value: Any, known: set[Any]) -> BadInput:
    shown = ", ".join(sorted(map(str, known)))
    return BadInput(
        f"{m.path}: {key}: expected a {axis} that the engine of base or head knows "
        f"({shown}), got {value!r}"
    )


def against_capabilities(m: Matrix, caps: list[Capabilities]) -> None:
    """Raise BadInput for an axis, ``where`` or rule value that no engine knows."""
    for axis, cap_key in LISTED.items():
        known = _known(caps, cap_key)
        if known is None:
            continue
        known |= {"none"} if axis == "drafter" else set()
        for i, v in enumerate(m.axes[axis]):
            if v not in known:
                key = m.keys.get(axis, axis)
                raise _refuse(m, f"{key}[{i}]" if key.startswith("axes.") else key, axis, v, known)
        for gi, g in enumerate(m.gates):
            for i, v in enumerate(g.where.get(axis, [])):
                if v not in known:
                    raise _refuse(m, f"gates[{gi}].where.{axis}[{i}]", axis, v, known)
            for asked in g.rule.asked():
                if asked.axis == axis and asked.value not in known:
                    raise _refuse(m, f"gates[{gi}].{g.kind}.{asked.key}", axis, asked.value, known)
    within_limits(m, caps)
    env = _known(caps, "env_flags")
    for i, flags in enumerate(m.axes["flags"]):
        for name in flags:
            if env is not None and name not in env:
                key = m.keys.get("flags", "flags")
                raise _refuse(m, f"{key}[{i}].{name}", "ENGINE_* flag", name, env or {"(none)"})


def _lane_values(m: Matrix) -> list[tuple[str, Any]]:
    """(key, value) of every lane count the matrix asks for."""
    axis = m.keys.get("parallel", "parallel")
    out = [
        (f"{axis}[{i}]" if axis.startswith("axes.") else axis, v)
        for i, v in enumerate(m.axes["parallel"])
    ]
    for gi, g in enumerate(m.gates):
        out += [
            (f"gates[{gi}].where.parallel[{i}]", v)
            for i, v in enumerate(g.where.get("parallel", []))
        ]
        out += [
            (f"gates[{gi}].{g.kind}.{a.key}", a.value)
            for a in g.rule.asked()
            if a.axis == "parallel"
        ]
    speed = m.speed.parallel if m.speed else ()
    out += [(f"speed.parallel[{i}]", v) for i, v in enumerate(speed)]
    return out


def within_limits(m: Matrix, caps: list[Capabilities]) -> None:
    """Raise BadInput for a lane count past what every engine takes (capabilities'
    ``limits.parallel``, contract 5): refused before the first arm, not by each arm."""
    tops = [c.max_parallel for c in caps if c.max_parallel is not None]
    if not tops:
        return
    top = max(tops)
    for key, v in _lane_values(m):
        if isinstance(v, int) and not isinstance(v, bool) and v > top:
            raise BadInput(
                f"{m.path}: {key}: {v} lanes, but the engines of base and head take at most "
                f"{top} (capabilities limits.parallel)"
            )


def values_run_nowhere(m: Matrix, arms: list[ArmResult]) -> list[str]:
    """Axis values whose every arm, on both commits, was refused or not comparable.

    Such a value tests nothing: the matrix asks for something neither engine runs."""
    out: list[str] = []
    for axis in ("parallel", "paging", "kv", "drafter", "backend", "prompts", "model"):
        if len(m.axes[axis]) < 2:
            continue
        for v in m.axes[axis]:
            mine = [a for a in arms if a.config is not None and a.config.value(axis) == v]
            if mine and all(a.not_comparable for a in mine):
                why = mine[0].reason
                key = m.keys.get(axis, axis)
                out.append(f"{m.path}: {key}: {v!r} ran on neither commit: {why}")
    return out
