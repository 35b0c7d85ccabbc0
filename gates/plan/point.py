"""A point of a matrix: one value of each axis (gates/plan/axes.py AXES), and the ``blas``
of the rule that plans arms of it. A rule varies a point (``replace``) and the plan makes
each arm's config of it (``Plan.config``, gates/plan/arm_config.py); a point itself is
never written as JSON."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from gates.plan.axes import AXES


@dataclass(frozen=True)
class Point:
    model: str
    backend: str
    prompts: str
    kv: str
    parallel: int
    paging: str | int  # on, off, or a pool of this many pages
    drafter: str
    flags: dict[str, str] = field(default_factory=dict)  # ENGINE_* -> value ({} = unset)
    blas: str | None = None  # a rule's blas (row-variant): a config key, not an axis

    def value(self, axis: str) -> Any:
        """The value of an axis by its name, as a rule's ``where`` or ``vary`` names it."""
        if axis not in AXES:
            raise KeyError(axis)
        return getattr(self, axis)

    def replace(self, **changes: Any) -> Point:
        """The point with other values of some axes (a rule's own, or the one it varies)."""
        return dataclasses.replace(self, **changes)
