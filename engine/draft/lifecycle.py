"""What every drafter shares: per-stream state in the stream's lane of the backend's lane
memory (made once, at `plan`), and the open/release rules (a second open is refused, a
second release is a no-op)."""

from __future__ import annotations

from typing import Any

from engine.kv.plan import PagePlan


class DrafterStateError(RuntimeError):
    pass


class LaneDrafter:
    taps: tuple[int, ...] = ()

    def __init__(self) -> None:
        self.states: dict[int, Any] = {}
        self.lanes: Any = None  # the backend's Lanes for every lane of the plan, or None
        self.page_plan: PagePlan | None = None
        self.opens_without_lane = 0
        self._planned: tuple[int, int] | None = None  # (lanes, context) of the lane memory

    # subclasses: lane memory for `count` lanes (None: no per-lane memory), and a stream's
    # fresh state over one lane of it
    def make_lanes(self, count: int) -> Any:
        return None

    def new_state(self, stream: Any, area: tuple[Any, int]) -> Any:
        return {}

    def max_tokens(self, k: int) -> int:
        return k

    def plan(self, plan: PagePlan, model: Any) -> None:
        """Take a new engine's plan. The lane memory of an earlier plan of the same lanes and
        context is kept (a backend's captured passes belong to it); states start empty."""
        self.page_plan = plan
        self.states.clear()
        if self.lanes is None or self._planned != (plan.lanes, plan.context):
            self.lanes = self.make_lanes(plan.lanes)
            self._planned = (plan.lanes, plan.context)

    def open(self, stream: Any) -> None:
        if stream.sid in self.states:
            raise DrafterStateError(f"stream {stream.sid}: drafter already open")
        if stream.run is None or stream.run.lane < 0:
            self.opens_without_lane += 1
            if self.page_plan is not None:
                self.page_plan.unplanned_allocations += 1
            area = (self.make_lanes(1), 0)
        else:
            area = (self.lanes, stream.run.lane)
        self.states[stream.sid] = self.new_state(stream, area)

    def release(self, stream: Any) -> None:
        self.states.pop(stream.sid, None)

    def absorb_prompt(self, stream: Any, segment: Any, out: Any) -> None:
        pass

    def absorb(self, stream: Any, out: Any, accepted: int, emitted: list[int]) -> None:
        pass

    def absorb_many(self, items: list[tuple[Any, Any, int, list[int]]]) -> None:
        """`absorb` for the (stream, out, accepted, emitted) of one round; drafters that
        batch override this."""
        for stream, out, accepted, emitted in items:
            self.absorb(stream, out, accepted, emitted)

    def propose(self, stream: Any, k: int) -> list[int]:
        return []

    def propose_many(self, streams: list[Any], k: int) -> list[list[int]]:
        """Drafts for the streams of one round; drafters that batch override this."""
        return [self.propose(s, k) for s in streams]


def attend_lanes(layer: int, asks: list[tuple[Any, tuple[Any, ...]]]) -> list[Any]:
    """Lane attention for (lanes, (lane, q, q_pos, length)) asks, in ask order: in one
    `attend_many` call where every ask is on one lane memory that offers it (the backend
    guarantees each lane the bits it gets alone), else one `attend` at a time."""
    first = asks[0][0] if asks else None
    if len(asks) > 1 and all(a[0] is first for a in asks) and hasattr(first, "attend_many"):
        return list(first.attend_many(layer, [item for _, item in asks]))
    return [lanes.attend(layer, *item) for lanes, item in asks]
