"""Helpers of the lane lifecycle tests (test_lanes_lifecycle.py, test_lanes_cancel.py): requests
and engines on the fake backend, a stream's solo reply, the idle-and-clean check, an injected
forward failure and cancels at chosen events."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from engine.lanes.engine import Engine, Event
from engine.lanes.request import Request
from tests.engine.conftest import fake_engine, ids

PAGING = [pytest.param(0, id="paging-off"), pytest.param(24, id="paging-on")]


def req(rid: str, n: int, max_tokens: int = 8, salt: int = 0, **kw: Any) -> Request:
    kw.setdefault("ignore_eos", True)
    return Request(rid, ids(n, salt, vocab=500), max_tokens=max_tokens, **kw)


def engine(kv_pages: int = 0, **kw: Any) -> Engine:
    kw.setdefault("parallel", 4)
    kw.setdefault("step_rows", 16)
    kw.setdefault("context", 256)
    return fake_engine(kv_pages=kv_pages, **kw)


def solo_tokens(r: Request) -> tuple[list[int], str]:
    e = engine(parallel=1)
    s = e.submit(replace(r, arrival=0.0, cancel_after=None))
    e.run()
    return s.generated, s.finish_reason


def assert_idle_clean(e: Engine) -> None:
    plan = e.plan
    assert e.idle and not e.live and not e.waiting
    assert plan.pages_in_use == 0 and plan.unplanned_allocations == 0
    assert plan.free_lanes == list(range(plan.lanes))
    assert all(r == 0 for r in plan.refs)
    if plan.paging:
        assert len(plan.free_pages) + plan.cached_pages == plan.total_pages
        assert len(set(plan.free_pages)) == len(plan.free_pages)


class Failing:
    """Wraps a model's forward: raises on chosen calls, whenever a segment feeds `poison`,
    or when `when(segments)` says so."""

    def __init__(
        self,
        forward: Any,
        calls: tuple[int, ...] = (),
        poison: int | None = None,
        when: Any = None,
    ):
        self.forward = forward
        self.calls = calls
        self.poison = poison
        self.when = when
        self.n = 0
        self.failed: list[list[int]] = []  # the token starts of the segments of failed calls

    def __call__(self, segments: list, kv: Any, taps: tuple[int, ...] = ()) -> list:
        self.n += 1
        if (
            self.n in self.calls
            or any(self.poison in s.tokens for s in segments)
            or (self.when is not None and self.when(segments))
        ):
            self.failed.append([s.start for s in segments])
            raise RuntimeError(f"injected failure on forward {self.n}")
        return self.forward(segments, kv, taps)


def cancel_at(e: Engine, plan: dict[int, str]) -> None:
    """Cancel request ids after the given event numbers (between steps, as a client would)."""

    def hook(engine: Engine, event: Event) -> None:
        rid = plan.get(len(engine.events))
        if rid is not None:
            engine.cancel(rid)

    e.on_event = hook
