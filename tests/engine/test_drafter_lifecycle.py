"""Drafter lifecycle on the fake backend: open after the target's first step and before
that step's rows are absorbed, inside the stream's lane; failures release the right
things; a second open is refused; a second release is a no-op."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.draft.lifecycle import DrafterStateError
from engine.draft.oracle import OracleDrafter
from engine.lanes.engine import Engine
from engine.lanes.request import Request
from engine.model.fake import FakeModel
from tests.engine.randmodel import random_config


class Recording(OracleDrafter):
    def __init__(self, model: FakeModel, fail_open: bool = False) -> None:
        super().__init__(model=model)
        self.log: list[tuple] = []
        self.fail_open = fail_open

    def open(self, stream) -> None:
        self.log.append(("open", stream.sid, stream.run is not None, self.model.forwards))
        if self.fail_open:
            raise RuntimeError("open failed")
        super().open(stream)

    def absorb_prompt(self, stream, segment, out) -> None:
        self.log.append(("absorb_prompt", stream.sid, segment.start))

    def release(self, stream) -> None:
        self.log.append(("release", stream.sid, stream.sid in self.states))
        super().release(stream)


def make(parallel: int = 2, paging: int = 0, **drafter_kw):
    model = FakeModel(random_config())
    drafter = Recording(model, **drafter_kw)
    cfg = EngineConfig(parallel=parallel, kv_pages=paging, step_rows=8, draft_tokens=3)
    return model, drafter, Engine(model, cfg, drafter=drafter)


@pytest.mark.parametrize("paging", [0, 64])
def test_stepped_prompt_opens_after_first_step_inside_its_lane(paging):
    model, drafter, engine = make(paging=paging)
    # prompts with no common prefix: with paging, a stream that opens after another one
    # finished would reuse its cached pages and take its first step past row 0, and which
    # opens first depends on the wall-clock decode debt (flaky under load before)
    for i, n in enumerate([30, 5, 17]):
        prompt = list(range(100 * i + 1, 100 * i + n + 1))
        engine.submit(Request(id=str(i), prompt_ids=prompt, max_tokens=6))
    engine.run()
    assert engine.plan.unplanned_allocations == 0
    assert engine.plan.pages_in_use == 0
    for sid in range(3):
        events = [e for e in drafter.log if e[1] == sid]
        assert events[0][0] == "open", events
        _, _, had_lane, forwards = events[0]
        assert had_lane and forwards >= 1
        assert events[1] == ("absorb_prompt", sid, 0)
        assert sum(e[0] == "open" for e in events) == 1
    assert drafter.opens_without_lane == 0
    assert not drafter.states


def test_failed_first_step_releases_only_the_target():
    model, drafter, engine = make()
    real = model.forward

    def failing(segments, kv, taps=()):
        if any(s.start == 0 for s in segments):
            raise RuntimeError("step failed")
        return real(segments, kv, taps)

    model.forward = failing
    engine.submit(Request(id="a", prompt_ids=list(range(1, 20)), max_tokens=4))
    (s,) = engine.run()
    assert s.finish_reason == "error" and "step failed" in s.error
    assert not [e for e in drafter.log if e[0] == "open"]
    assert [e for e in drafter.log if e[0] == "release"] == [("release", 0, False)]
    assert engine.plan.pages_in_use == 0 and engine.plan.free_lanes == [0, 1]


def test_failed_open_releases_both():
    model, drafter, engine = make(fail_open=True)
    engine.submit(Request(id="a", prompt_ids=list(range(1, 20)), max_tokens=4))
    engine.submit(Request(id="b", prompt_ids=[3, 4], max_tokens=4, draft=False))
    done = {s.req.id: s for s in engine.run()}
    assert done["a"].finish_reason == "error" and "open failed" in done["a"].error
    assert done["b"].finish_reason in ("length", "stop")
    assert not drafter.states
    assert engine.plan.pages_in_use == 0 and engine.plan.unplanned_allocations == 0


def test_second_open_is_refused_and_release_twice_is_a_no_op():
    model, drafter, engine = make()
    engine.submit(Request(id="a", prompt_ids=[1, 2, 3], max_tokens=8))
    while not drafter.states:
        engine.step()
    (stream,) = engine.live
    with pytest.raises(DrafterStateError):
        drafter.open(stream)
    drafter.release(stream)
    drafter.release(stream)
    assert not drafter.states
    engine.run()
    assert engine.plan.pages_in_use == 0
