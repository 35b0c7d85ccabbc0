"""The bench schema (docs/contract.md, *bench*), read field by field.

An engine whose ``bench --json`` has no ``bench_schema`` (or a newer one than this runner
reads, or a row without a metric) is *not comparable* for speed: nothing is guessed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

SCHEMA = 1  # the newest bench_schema this runner reads


@dataclass(frozen=True)
class Metric:
    label: str  # for the receipt
    better: str  # higher | lower
    scale: float = 1.0  # shown value = raw * scale
    unit: str = ""


METRICS = {
    "cpu_s_per_token": Metric("CPU per token", "lower", 1000.0, "ms"),
    "decode_cpu_s_per_token": Metric("decode CPU per token", "lower", 1000.0, "ms"),
    "prefill_cpu_s_per_token": Metric("prefill CPU per token", "lower", 1e6, "µs"),
    "decode_tok_s": Metric("decode", "higher", 1.0, "tok/s"),
    "prefill_tok_s": Metric("prefill", "higher", 1.0, "tok/s"),
    "ttft_ms": Metric("TTFT", "lower", 1.0, "ms"),
}
DEFAULT_METRICS = ("cpu_s_per_token", "decode_tok_s", "prefill_tok_s", "ttft_ms")


class NotComparable(Exception):
    """The engine's bench output cannot be read as the bench schema."""


def parse(text: str, metrics: tuple[str, ...] | list[str], parallel: list[int]) -> dict[str, Any]:
    """``{"rows": {parallel: {metric: value}}, "machine": ..., "process": ...}``."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        raise NotComparable("engine bench --json printed no JSON") from None
    if not isinstance(obj, dict) or "bench_schema" not in obj:
        raise NotComparable("engine bench --json has no bench_schema (before bench schema 1)")
    version = obj["bench_schema"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise NotComparable(f"bench_schema {version!r} is not a version number")
    if version > SCHEMA:
        raise NotComparable(f"bench_schema {version} is newer than this runner reads ({SCHEMA})")
    sweep = obj.get("sweep")
    if not isinstance(sweep, list):
        raise NotComparable("bench JSON has no sweep list")
    rows: dict[int, dict[str, float]] = {}
    for i, row in enumerate(sweep):
        if not isinstance(row, dict) or not isinstance(row.get("parallel"), int):
            raise NotComparable(f"bench sweep[{i}] has no integer parallel")
        vals = {}
        for m in metrics:
            v = row.get(m)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise NotComparable(f"bench sweep[{i}] has no positive {m} (got {v!r})")
            vals[m] = float(v)
        rows[row["parallel"]] = vals
    missing = [n for n in parallel if n not in rows]
    if missing:
        raise NotComparable(f"bench sweep has no row for parallel {missing}")
    return {
        "schema": version,
        "rows": {n: rows[n] for n in parallel},
        "machine": obj.get("machine"),
        "process": obj.get("process"),
    }


def label(metric: str, parallel: int) -> str:
    m = METRICS.get(metric)
    name = f"{m.label} ({m.unit})" if m else metric
    return f"{name} at {parallel} stream{'s' * (parallel != 1)}"
