"""The engine's counters: the part that every metrics object shares. `engine run --metrics`
and `engine serve`'s /metrics each add their own keys around them."""

from __future__ import annotations

from typing import Any

COUNTER_KEYS = (
    "pages_in_use", "unplanned_allocations", "cached_pages", "drafter_states", "prefill_tokens",
    "decode_tokens", "rounds", "steps",
)  # fmt: skip


def counters(engine: Any) -> dict[str, int]:
    """COUNTER_KEYS of an Engine, now: its page plan, its drafter's open states, its stats."""
    return {
        "pages_in_use": engine.plan.pages_in_use,
        "unplanned_allocations": engine.plan.unplanned_allocations,
        "cached_pages": engine.plan.cached_pages,
        "drafter_states": len(getattr(engine.drafter, "states", {})),
        **engine.stats,
    }
