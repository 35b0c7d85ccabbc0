"""Clocks the round loop reads: the real one, and a fake one tests advance by hand."""

from __future__ import annotations

import time


class RealClock:
    def now(self) -> float:
        return time.perf_counter()

    def sleep_until(self, t: float) -> None:
        delay = t - time.perf_counter()
        if delay > 0:
            time.sleep(delay)


class FakeClock:
    def __init__(self, start: float = 0.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds

    def sleep_until(self, t: float) -> None:
        self.t = max(self.t, t)
