"""Cancels and failures of single streams among others: each ends alone, with its reason, and
the others finish with their solo replies; the engine ends idle and clean, paging on and off
(the fake backend, as test_lanes_lifecycle.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.lanes.engine import Engine, Event
from tests.engine.lanes_helpers import (
    PAGING,
    Failing,
    assert_idle_clean,
    engine,
    req,
    solo_tokens,
)

# ---- cancel ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kv_pages", PAGING)
def test_cancel_mid_prompt(kv_pages: int) -> None:
    e = engine(kv_pages)
    other = e.submit(req("other", 20, max_tokens=6, salt=2))
    long = e.submit(req("long", 120, max_tokens=6, salt=1))

    def hook(engine: Engine, event: Event) -> None:
        if event.kind == "long" and long.sid in event.streams and long.fed == 32:
            assert long.run is not None and long.prefilling
            engine.cancel("long")

    e.on_event = hook
    e.run()
    assert long.finish_reason == "cancelled" and long.generated == [] and long.run is None
    steps = [ev for ev in e.events if ev.kind == "long" and long.sid in ev.streams]
    assert len(steps) == 2  # acts between steps: no further step after the cancel
    assert (other.generated, other.finish_reason) == solo_tokens(other.req)
    assert_idle_clean(e)


@pytest.mark.parametrize("kv_pages", PAGING)
def test_cancel_mid_decode(kv_pages: int) -> None:
    e = engine(kv_pages)
    a = e.submit(req("a", 30, max_tokens=50, salt=1))
    b = e.submit(req("b", 3, max_tokens=12, salt=2))

    def hook(engine: Engine, event: Event) -> None:
        if len(a.generated) == 5 and not a.cancel_requested:
            engine.cancel("a")

    e.on_event = hook
    e.run()
    assert a.finish_reason == "cancelled" and len(a.generated) == 5
    full, _ = solo_tokens(a.req)
    assert a.generated == full[:5]
    assert (b.generated, b.finish_reason) == solo_tokens(b.req)
    assert_idle_clean(e)


@pytest.mark.parametrize("kv_pages", PAGING)
def test_cancel_after_field(kv_pages: int) -> None:
    e = engine(kv_pages)
    three = e.submit(req("three", 20, max_tokens=10, cancel_after=3))
    zero = e.submit(req("zero", 20, max_tokens=10, salt=1, cancel_after=0))
    capped = e.submit(req("capped", 20, max_tokens=2, salt=2, cancel_after=3))
    e.run()
    assert three.finish_reason == "cancelled" and len(three.generated) == 3
    assert three.generated == solo_tokens(three.req)[0][:3]
    assert zero.finish_reason == "cancelled" and zero.generated == []
    assert not any(zero.sid in ev.streams for ev in e.events)  # never took a step
    assert capped.finish_reason == "length" and len(capped.generated) == 2
    assert_idle_clean(e)


def test_cancel_before_arrival_and_of_unknown_ids() -> None:
    e = engine()
    late = e.submit(req("late", 5, arrival=5.0))
    now = e.submit(req("now", 5, salt=1))
    e.cancel("late")
    e.cancel("no-such-request")
    e.run()
    assert late.finish_reason == "cancelled" and late.generated == []
    assert not any(late.sid in ev.streams for ev in e.events)
    assert now.finish_reason == "length"
    assert_idle_clean(e)


# ---- failures --------------------------------------------------------------------------------


@pytest.mark.parametrize("kv_pages", PAGING)
def test_a_failed_round_ends_its_streams_and_others_finish(kv_pages: int) -> None:
    e = engine(kv_pages, parallel=2)
    a = e.submit(req("a", 10, max_tokens=8, salt=1))
    b = e.submit(req("b", 12, max_tokens=8, salt=2))
    c = e.submit(req("c", 40, max_tokens=8, salt=3))  # waits for a lane
    failing = Failing(e.model.forward, calls=(4,))  # steps a, b, then rounds
    e.model.forward = failing
    e.run()
    assert failing.failed and len(failing.failed[0]) == 2  # a round of a and b
    for s in (a, b):
        assert s.finish_reason == "error" and "RuntimeError: injected failure" in s.error
        assert s.generated == solo_tokens(s.req)[0][: len(s.generated)]
    assert (c.generated, c.finish_reason) == solo_tokens(c.req)
    assert_idle_clean(e)


@pytest.mark.parametrize("kv_pages", PAGING)
def test_a_failed_prompt_step_ends_its_stream_and_others_finish(kv_pages: int) -> None:
    e = engine(kv_pages, parallel=2)
    long = e.submit(req("long", 100, max_tokens=4, salt=1))
    short = e.submit(req("short", 5, max_tokens=6, salt=2))
    # the long prompt's third step (rows 32..47) fails, after two went through
    failing = Failing(e.model.forward, when=lambda segs: segs[0].start == 32 and len(segs) == 1)
    e.model.forward = failing
    e.run()
    assert failing.failed == [[32]]
    assert long.finish_reason == "error" and long.generated == [] and long.run is None
    assert (short.generated, short.finish_reason) == solo_tokens(short.req)
    assert_idle_clean(e)
    # the engine still serves after a failure, and the failed prompt runs again intact
    e.model.forward = failing.forward
    again = e.submit(replace(long.req, id="again"))
    e.run()
    assert (again.generated, again.finish_reason) == solo_tokens(long.req)
    assert_idle_clean(e)


def test_failure_in_every_forward_ends_every_stream() -> None:
    e = engine(parallel=3)
    streams = [e.submit(req(f"x{i}", 5 + 30 * i, salt=i)) for i in range(5)]
    e.model.forward = Failing(e.model.forward, calls=tuple(range(1, 100)))
    e.run()
    assert all(s.finish_reason == "error" for s in streams)
    assert_idle_clean(e)
