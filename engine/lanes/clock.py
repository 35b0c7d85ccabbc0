"""Clocks the round loop reads: the real one, a fake one tests advance by hand, and a
virtual one whose time is a pure function of the actions taken (`run --virtual-clock`)."""

from __future__ import annotations

import time
from typing import Protocol

PER_ACTION_S = 1.0e-3  # the virtual cost of any action
PER_ROW_S = 2.0e-5  # and of each row it computes (prompt rows; decode and draft rows)


class Clock(Protocol):
    def now(self) -> float: ...
    def sleep_until(self, t: float) -> None: ...
    def charge(self, kind: str, rows: int) -> None:
        """Called by the Engine after each action: a prompt step ("short" | "long") of
        `rows` rows, or a "round" over `rows` rows (segment lengths, draft rows included)."""


class RealClock:
    def now(self) -> float:
        return time.perf_counter()

    def sleep_until(self, t: float) -> None:
        delay = t - time.perf_counter()
        if delay > 0:
            time.sleep(delay)

    def charge(self, kind: str, rows: int) -> None:
        pass  # the work itself took the time


class FakeClock:
    def __init__(self, start: float = 0.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds

    def sleep_until(self, t: float) -> None:
        self.t = max(self.t, t)

    def charge(self, kind: str, rows: int) -> None:
        pass  # tests advance it by hand or from the model's forwards


def action_cost(rows: int) -> float:
    """Seconds the virtual clock charges for an action over `rows` rows."""
    return PER_ACTION_S + PER_ROW_S * rows


class VirtualClock:
    """Time moves only to an arrival the engine sleeps for, and by `action_cost` after each
    action, so a schedule is a pure function of the requests and the flags."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep_until(self, t: float) -> None:
        self.t = max(self.t, t)

    def charge(self, kind: str, rows: int) -> None:
        self.t += action_cost(rows)
