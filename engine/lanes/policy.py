"""The scheduler policy: a pure function over stream summaries (no arrays, no clock).

* Short prompts (they fit in one step) are admitted and filled in a loop ahead of rounds;
  after a lane count of them have begun in one loop, a round goes first, or with no
  decoder a waiting long prompt's step does.
* Short prompts are picked among themselves (aged, then foreground, then least left) and
  never wait for decode debt; long prompts are picked among long prompts.
* A long step of t seconds leaves t / share seconds of decode owed; the next long step is
  due when the debt is paid. A long prompt passed over for AGED_AFTER choices is aged.
* Debt is cleared whenever no stream is decoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

AGED_AFTER = 8

Phase = Literal["short", "long", "decoding"]
Kind = Literal["short", "long", "round", "idle"]


@dataclass(frozen=True)
class StreamView:
    id: int
    phase: Phase
    rows_left: int
    foreground: bool = True
    passed_over: int = 0
    has_lane: bool = False
    can_open: bool = True  # a lane and pages are free for it (or it already holds them)


@dataclass
class PolicyState:
    debt: float = 0.0
    shorts_in_loop: int = 0


@dataclass(frozen=True)
class Action:
    kind: Kind
    stream: int | None = None


def _rank(s: StreamView) -> tuple:
    return (s.passed_over < AGED_AFTER, not s.foreground, s.rows_left, s.id)


def choose(streams: list[StreamView], lanes: int, state: PolicyState) -> Action:
    decoders = [s for s in streams if s.phase == "decoding"]
    shorts = [s for s in streams if s.phase == "short" and (s.has_lane or s.can_open)]
    longs = [s for s in streams if s.phase == "long" and (s.has_lane or s.can_open)]
    if not decoders:
        state.debt = 0.0
    if shorts and state.shorts_in_loop < lanes:
        return Action("short", min(shorts, key=_rank).id)
    if shorts:
        if decoders:
            return Action("round")
        if longs:
            return Action("long", min(longs, key=_rank).id)
        state.shorts_in_loop = 0
        return Action("short", min(shorts, key=_rank).id)
    if longs and state.debt <= 0:  # with no decoder the debt is 0: a long never waits
        return Action("long", min(longs, key=_rank).id)
    if decoders:
        return Action("round")
    return Action("idle")


def account(state: PolicyState, action: Action, seconds: float, share: float) -> None:
    """Update the policy state after an action took `seconds`."""
    if action.kind == "short":
        state.shorts_in_loop += 1
        return
    state.shorts_in_loop = 0
    if action.kind == "long":
        state.debt += seconds / share
    elif action.kind == "round":
        state.debt = max(0.0, state.debt - seconds)
