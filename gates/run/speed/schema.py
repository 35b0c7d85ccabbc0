"""The bench schema (docs/contract.md, *bench*), read field by field.

The speed gates drive ``engine bench --lockstep`` (bench schema 2). An engine without it
(no ``--lockstep``, no ``bench_schema``, one older than 2 or newer than this runner reads,
a run without ``actions`` or a metric) is *not comparable* for speed: nothing is guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

from gates.jsontypes import JsonObject
from gates.plan.speed import METRICS

__all__ = ["KEEP", "METRICS", "Actions", "NotComparable", "TimedRun", "Header"]

SCHEMA = 2  # the newest bench_schema this runner reads
OLDEST = 2  # the first with --lockstep and per-action samples
ACTION_FIELDS = ("kind", "cpu_s", "wall_s", "rows", "tokens")
# what the manifest keeps of a timed run (its per-action lists are left out)
KEEP = ("parallel", "cpu_s", "wall_s", "generated_tokens", "prompt_tokens", *METRICS)


class NotComparable(Exception):
    """The engine's bench output cannot be read as the bench schema."""


@dataclass(frozen=True, slots=True)
class Header:
    """The ready line of ``engine bench --lockstep``: its bench schema version."""

    version: int

    @classmethod
    def parse(cls, obj: JsonObject) -> Header:
        """A ``--lockstep`` ready line, read; NotComparable if unreadable."""
        version = obj.get("bench_schema")
        if version is None:
            raise NotComparable("engine bench has no bench_schema (before bench schema 1)")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise NotComparable(f"bench_schema {version!r} is not a version number")
        if version < OLDEST:
            raise NotComparable(f"bench_schema {version} has no --lockstep (before bench schema 2)")
        if version > SCHEMA:
            raise NotComparable(
                f"bench_schema {version} is newer than this runner reads ({SCHEMA})"
            )
        return cls(version)


@dataclass(frozen=True, slots=True)
class Actions:
    """A timed run's engine actions, one entry each: kind (short, long, round, ...), CPU and
    wall seconds, rows fed and tokens made."""

    kind: tuple[str, ...]
    cpu_s: tuple[float, ...]
    wall_s: tuple[float, ...]
    rows: tuple[int, ...]
    tokens: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TimedRun:
    """One timed run of ``n`` streams as ``engine bench --lockstep`` printed it: ``kept``, its
    fields of ``KEEP`` (in that order, as printed), and its ``actions`` (None where it was
    read back from a manifest, which keeps no per-action lists). ``side`` and ``repeat``:
    where the block runner ran it."""

    parallel: int
    kept: dict[str, float]
    actions: Actions | None = None
    side: str = ""
    repeat: int = 0

    @classmethod
    def parse(cls, obj: JsonObject, n: int, metrics: list[str]) -> TimedRun:
        """One timed run of ``n`` streams, checked (its fields by name and its action lists) and
        read."""
        if obj.get("parallel") != n:
            raise NotComparable(f"bench answered parallel {obj.get('parallel')!r} for {n}")
        acts = obj.get("actions")
        if not isinstance(acts, dict) or any(
            not isinstance(acts.get(k), list) for k in ACTION_FIELDS
        ):
            raise NotComparable(f"bench run has no actions {{{', '.join(ACTION_FIELDS)}}}")
        if len({len(acts[k]) for k in ACTION_FIELDS}) != 1:
            raise NotComparable("bench run's action lists differ in length")
        for m in metrics:
            v = obj.get(m)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise NotComparable(f"bench run at parallel {n} has no positive {m} (got {v!r})")
        actions = Actions(*(tuple(acts[k]) for k in ACTION_FIELDS))
        return cls(n, {k: obj[k] for k in KEEP if k in obj}, actions)

    def to_json(self) -> JsonObject:
        """The run as a block's record in the manifest keeps it."""
        return {"side": self.side, **self.kept}

    @classmethod
    def from_json(cls, d: JsonObject) -> TimedRun:
        kept = {k: d[k] for k in KEEP if k in d}
        return cls(int(d.get("parallel") or 0), kept, None, str(d.get("side", "")))
