"""The drafter protocol: open, propose, absorb, release.

Order for a stepped prompt: the target's first step, then `open`, then that step's rows
are absorbed (`absorb_prompt`). Per-stream state lives in the stream's lane of the backend's lane
memory; anything allocated outside it counts as an unplanned allocation.
"""

from __future__ import annotations

from typing import Any, Protocol

from engine.draft.lifecycle import LaneDrafter
from engine.kv.plan import PagePlan


class Drafter(Protocol):
    taps: tuple[int, ...]

    def max_tokens(self, k: int) -> int: ...
    def plan(self, plan: PagePlan, model: Any) -> None: ...
    def open(self, stream: Any) -> None: ...
    def absorb_prompt(self, stream: Any, segment: Any, out: Any) -> None: ...
    def propose(self, stream: Any, k: int) -> list[int]: ...
    def propose_many(self, streams: list[Any], k: int) -> list[list[int]]: ...
    def absorb(self, stream: Any, out: Any, accepted: int, emitted: list[int]) -> None: ...
    def absorb_many(self, items: list[tuple[Any, Any, int, list[int]]]) -> None: ...
    def release(self, stream: Any) -> None: ...


class NoDrafter(LaneDrafter):
    """Plain decoding: proposes nothing and keeps no state."""

    def max_tokens(self, k: int) -> int:
        return 0

    def open(self, stream: Any) -> None:
        pass
