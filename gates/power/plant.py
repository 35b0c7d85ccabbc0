"""One planted change: a bug class (or a no-op change) and its exact text substitutions."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Edit:
    file: str
    old: str
    new: str


@dataclass(frozen=True)
class Plant:
    name: str
    what: str  # one line for the table
    edits: tuple[Edit, ...]
    noop: bool = False  # a change that must not change any output bit


def _p(name: str, what: str, *edits: tuple[str, str, str], noop: bool = False) -> Plant:
    return Plant(name, what, tuple(Edit(f, o, n) for f, o, n in edits), noop)
