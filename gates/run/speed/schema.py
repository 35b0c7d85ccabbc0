"""The bench schema (docs/contract.md, *bench*), read field by field.

The speed gates drive ``engine bench --lockstep`` (bench schema 2). An engine without it
(no ``--lockstep``, no ``bench_schema``, one older than 2 or newer than this runner reads,
a run without ``actions`` or a metric) is *not comparable* for speed: nothing is guessed.
"""

from __future__ import annotations

from typing import Any

from gates.plan.speed import METRICS

__all__ = ["METRICS", "NotComparable", "check_header", "check_run"]

SCHEMA = 2  # the newest bench_schema this runner reads
OLDEST = 2  # the first with --lockstep and per-action samples
ACTION_FIELDS = ("kind", "cpu_s", "wall_s", "rows", "tokens")


class NotComparable(Exception):
    """The engine's bench output cannot be read as the bench schema."""


def check_header(obj: dict[str, Any]) -> int:
    """The bench schema version of a ``--lockstep`` ready line; NotComparable if unreadable."""
    version = obj.get("bench_schema")
    if version is None:
        raise NotComparable("engine bench has no bench_schema (before bench schema 1)")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise NotComparable(f"bench_schema {version!r} is not a version number")
    if version < OLDEST:
        raise NotComparable(f"bench_schema {version} has no --lockstep (before bench schema 2)")
    if version > SCHEMA:
        raise NotComparable(f"bench_schema {version} is newer than this runner reads ({SCHEMA})")
    return version


def check_run(obj: dict[str, Any], n: int, metrics: list[str]) -> dict[str, Any]:
    """One timed run of ``n`` streams, checked: its fields by name and its action lists."""
    if obj.get("parallel") != n:
        raise NotComparable(f"bench answered parallel {obj.get('parallel')!r} for {n}")
    acts = obj.get("actions")
    if not isinstance(acts, dict) or any(not isinstance(acts.get(k), list) for k in ACTION_FIELDS):
        raise NotComparable(f"bench run has no actions {{{', '.join(ACTION_FIELDS)}}}")
    if len({len(acts[k]) for k in ACTION_FIELDS}) != 1:
        raise NotComparable("bench run's action lists differ in length")
    for m in metrics:
        v = obj.get(m)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
            raise NotComparable(f"bench run at parallel {n} has no positive {m} (got {v!r})")
    return obj
