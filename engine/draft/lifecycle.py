"""What every drafter shares: per-stream state in the stream's lane area, and the
open/release rules (a second open is refused, a second release is a no-op)."""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.kv.plan import PagePlan


class DrafterStateError(RuntimeError):
    pass


class LaneDrafter:
    taps: tuple[int, ...] = ()

    def __init__(self) -> None:
        self.states: dict[int, Any] = {}
        self.areas: list[dict[str, np.ndarray]] = []
        self.page_plan: PagePlan | None = None
        self.opens_without_lane = 0

    # subclasses: the buffers one lane needs, and a stream's fresh state over them
    def make_area(self) -> dict[str, np.ndarray]:
        return {}

    def new_state(self, stream: Any, area: dict[str, np.ndarray]) -> Any:
        return {}

    def max_tokens(self, k: int) -> int:
        return k

    def plan(self, plan: PagePlan, model: Any) -> None:
        self.page_plan = plan
        self.areas = [self.make_area() for _ in range(plan.lanes)]

    def open(self, stream: Any) -> None:
        if stream.sid in self.states:
            raise DrafterStateError(f"stream {stream.sid}: drafter already open")
        if stream.run is None or stream.run.lane < 0:
            self.opens_without_lane += 1
            if self.page_plan is not None:
                self.page_plan.unplanned_allocations += 1
            area = self.make_area()
        else:
            area = self.areas[stream.run.lane]
        self.states[stream.sid] = self.new_state(stream, area)

    def release(self, stream: Any) -> None:
        self.states.pop(stream.sid, None)

    def absorb_prompt(self, stream: Any, segment: Any, out: Any) -> None:
        pass

    def absorb(self, stream: Any, out: Any, accepted: int, emitted: list[int]) -> None:
        pass

    def propose(self, stream: Any, k: int) -> list[int]:
        return []
