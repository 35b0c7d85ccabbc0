"""``engine bench --lockstep``: timed runs on request, so a driver can interleave two engines.

After loading and the warm-up the process prints one JSON line, the bench header with
``"ready": true``. Then each line on stdin is a JSON object ``{"parallel": N}``; the
process answers each with one JSON line: the sweep row of one timed run of N streams and
its ``actions`` (per engine action: kind, CPU seconds, wall seconds, rows, tokens made).
A bad line is answered ``{"error": "..."}`` and the process goes on; end of input ends it
with exit 0. The speed gates run base and head this way, one action at a time each, so
both meet the same seconds of the machine.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TextIO


def _parallel(line: str) -> int:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        raise ValueError(f'expected a JSON object like {{"parallel": 4}}, got {line!r}') from None
    n = obj.get("parallel") if isinstance(obj, dict) else None
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"parallel: expected a positive integer, got {n!r}")
    return n


def serve_units(
    measure: Callable[[int], dict[str, Any]],
    header: dict[str, Any],
    inp: TextIO | None = None,
    out: TextIO | None = None,
) -> int:
    inp, out = inp or sys.stdin, out or sys.stdout
    print(json.dumps({**header, "ready": True}), file=out, flush=True)
    for line in inp:
        if not line.strip():
            continue
        try:
            n = _parallel(line)
        except ValueError as e:
            print(json.dumps({"error": str(e)}), file=out, flush=True)
            continue
        print(json.dumps(measure(n)), file=out, flush=True)
    return 0
