"""``engine bench --lockstep``: timed runs on request, so a driver can interleave two engines.

After loading and the warm-up the process prints one JSON line, the bench header with
``"ready": true``. Then each line on stdin is a JSON object:

* ``{"parallel": N}``: one whole timed run of N streams, answered with its sweep row and
  ``actions`` (per engine action: kind, CPU seconds, wall seconds, rows, tokens made);
* ``{"parallel": N, "turn": T}``: the next T engine actions of a run of N streams (opened
  by the first such line), answered ``{"parallel": N, "done": false, "ran": k}`` until the
  run ends; the line that ends it is answered with the whole run's row and ``actions``
  and ``"done": true``. A driver that gives two engines turns of one action each has them
  meet the same milliseconds of the machine.

A bad line is answered ``{"error": "..."}`` and the process goes on; end of input ends it
with exit 0.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, Protocol, TextIO


class Steppable(Protocol):
    n: int
    done: bool

    def step(self) -> bool: ...

    def summary(self) -> dict[str, Any]: ...


def _positive(obj: dict[str, Any], key: str) -> int:
    v = obj.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{key}: expected a positive integer, got {v!r}")
    return v


def parse(line: str) -> tuple[int, int | None]:
    """(parallel, turn or None) of a request line; ValueError names what is wrong."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        raise ValueError(f'expected a JSON object like {{"parallel": 4}}, got {line!r}') from None
    if not isinstance(obj, dict):
        raise ValueError(f'expected a JSON object like {{"parallel": 4}}, got {line!r}')
    turn = _positive(obj, "turn") if "turn" in obj else None
    return _positive(obj, "parallel"), turn


def serve_units(
    measure: Callable[[int], dict[str, Any]],
    start: Callable[[int], Steppable],
    header: dict[str, Any],
    inp: TextIO | None = None,
    out: TextIO | None = None,
) -> int:
    inp, out = inp or sys.stdin, out or sys.stdout
    print(json.dumps({**header, "ready": True}), file=out, flush=True)
    open_run: Steppable | None = None
    for line in inp:
        if not line.strip():
            continue
        try:
            n, turn = parse(line)
            if turn is not None and open_run is not None and open_run.n != n:
                raise ValueError(f"parallel: a run of {open_run.n} streams is open, got {n}")
        except ValueError as e:
            print(json.dumps({"error": str(e)}), file=out, flush=True)
            continue
        if turn is None:
            answer = measure(n)
        else:
            open_run = open_run or start(n)
            ran = 0
            while ran < turn and open_run.step():
                ran += 1
            if open_run.done:
                answer, open_run = {**open_run.summary(), "done": True}, None
            else:
                answer = {"parallel": n, "done": False, "ran": ran}
        print(json.dumps(answer), file=out, flush=True)
    return 0
