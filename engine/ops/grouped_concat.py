"""Concatenation that a captured CUDA graph can hold.

`cupy.concatenate` of more than 8 arrays builds a table of their device pointers on the host
and copies it over before one kernel reads it; that host copy has no place in a captured graph
(a replay would read a stale table, or the capture fails). Of up to 8 arrays it copies each
array by itself, which a graph replays as it ran. So the cupy backend concatenates at most
GROUP arrays a call: by groups, then groups of groups. The values and their places are those
of one concatenation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

GROUP = 8


def grouped_concat(parts: Sequence[Any], axis: int, concat: Callable[..., Any]) -> Any:
    """concat(parts, axis=axis), made of calls of at most GROUP arrays each."""
    parts = list(parts)
    while len(parts) > GROUP:
        groups = [parts[i : i + GROUP] for i in range(0, len(parts), GROUP)]
        parts = [g[0] if len(g) == 1 else concat(g, axis=axis) for g in groups]
    return parts[0] if len(parts) == 1 else concat(parts, axis=axis)
