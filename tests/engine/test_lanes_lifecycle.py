"""Lanes and the memory plan over a stream's whole life: admission, prompt steps, rounds,
finish, cancel and failure. After any workload the engine is idle with no page in use and no
unplanned allocation, with paging on and off. Runs on the fake backend (next token = hash of
the whole fed history), so a stream that read another's pages would give other tokens."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from engine.lanes.engine import Engine, Event
from engine.lanes.request import Request
from engine.lanes.stream import Stream
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


# ---- a mixed workload ----------------------------------------------------------------------


def workload(seed: int) -> list[Request]:
    rng = np.random.default_rng(seed)
    reqs = []
    for i in range(28):
        n = int(rng.choice([1, 2, 15, 16, 17, 40, 100]))
        reqs.append(
            req(
                f"r{i}",
                n,
                max_tokens=int(rng.integers(1, 12)),
                salt=seed * 100 + i,
                kind="embed" if i % 9 == 4 else "complete",
                priority="background" if i % 3 == 0 else "foreground",
                arrival=float(rng.uniform(0, 0.6)),
                cancel_after=2 if i % 7 == 3 else None,
                ignore_eos=i % 2 == 0,
            )
        )
    # a second turn extending a first one (prefix reuse with paging on)
    first = reqs[5]
    reqs.append(replace(first, id="turn2", prompt_ids=first.prompt_ids + [7] * 20, arrival=1.0))
    # a request whose every forward fails
    reqs.append(replace(reqs[8], id="poisoned", prompt_ids=[499] + reqs[8].prompt_ids))
    return reqs


@pytest.mark.parametrize("kv_pages", PAGING)
@pytest.mark.parametrize("seed", [1, 2])
def test_a_mixed_workload_with_cancels_and_failures_ends_idle(kv_pages: int, seed: int) -> None:
    reqs = workload(seed)
    e = engine(kv_pages)
    failing = Failing(e.model.forward, calls=(12, 30), poison=499)
    e.model.forward = failing
    cancel_at(e, {6: "r1", 20: "r10", 25: "r17", 33: "r22"})
    streams = {r.id: e.submit(r) for r in reqs}
    e.run()
    assert_idle_clean(e)
    assert {s.req.id for s in e.finished} == set(streams)
    assert streams["poisoned"].finish_reason == "error"
    assert "injected failure" in streams["poisoned"].error
    reasons = [s.finish_reason for s in streams.values()]
    assert reasons.count("error") >= 2 and "cancelled" in reasons
    for rid, s in streams.items():
        assert s.finish_reason in ("stop", "length", "cancelled", "error"), rid
        if (
            s.req.cancel_after is not None
            and s.finish_reason == "cancelled"
            and not (s.cancel_requested)
        ):
            assert len(s.generated) == s.req.cancel_after
        if s.req.kind == "embed" and s.finish_reason == "stop":
            assert s.embedding is not None and s.generated == []
        if s.finish_reason in ("stop", "length") and s.req.kind == "complete":
            assert (s.generated, s.finish_reason) == solo_tokens(s.req), rid
        elif s.finish_reason in ("cancelled", "error"):  # a prefix of what it would have said
            full, _ = solo_tokens(s.req)
            assert s.generated == full[: len(s.generated)], rid
    if kv_pages:
        assert streams["turn2"].finish_reason in ("stop", "length")


@pytest.mark.parametrize("kv_pages", PAGING)
def test_lanes_and_pages_are_reused_under_pressure(kv_pages: int) -> None:
    """More requests than lanes (and, paged, than pages): they wait, then all finish."""
    e = engine(kv_pages, parallel=3)
    reqs = [req(f"q{i}", 10 + 9 * i, max_tokens=5 + i % 4, salt=i) for i in range(12)]
    streams = [e.submit(r) for r in reqs]
    peak = 0

    def watch(engine: Engine, event: Event) -> None:
        nonlocal peak
        peak = max(peak, engine.plan.pages_in_use)
        assert len(engine.plan.free_lanes) + sum(s.run is not None for s in engine.live) == 3

    e.on_event = watch
    e.run()
    assert_idle_clean(e)
    for s in streams:
        assert (s.generated, s.finish_reason) == solo_tokens(s.req)
    assert 0 < peak <= e.plan.total_pages


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


# ---- requests --------------------------------------------------------------------------------


def test_refused_requests_end_alone_with_a_reason() -> None:
    e = engine(parallel=2, context=64)
    too_long = e.submit(req("too-long", 60, max_tokens=8))
    bad_id = e.submit(Request("bad-id", [1, 2, 10_000], max_tokens=2))
    ok = e.submit(req("ok", 20, max_tokens=4, salt=1))
    for s in (too_long, bad_id):
        assert s.finish_reason == "error" and s.error and s.run is None
    assert "context" in too_long.error and "vocab" in bad_id.error
    e.run()
    assert ok.finish_reason == "length"
    assert [s.req.id for s in e.finished] == ["too-long", "bad-id", "ok"]
    assert_idle_clean(e)


def test_refused_when_the_pool_cannot_hold_it() -> None:
    e = engine(kv_pages=4, context=256)  # 4 pages of 16 rows
    big = e.submit(req("big", 70, max_tokens=8))
    small = e.submit(req("small", 40, max_tokens=8, salt=1))
    assert big.finish_reason == "error" and "pages" in big.error
    e.run()
    assert small.finish_reason == "length"
    assert_idle_clean(e)


def test_max_tokens_and_stop_ids() -> None:
    base = req("s", 9, max_tokens=12, salt=4)
    full, reason = solo_tokens(base)
    assert reason == "length" and len(full) == 12
    stop_at = 4
    stop_id = full[stop_at]
    first = full.index(stop_id)
    e = engine()
    stopped = e.submit(replace(base, id="stopped", stop_ids=[stop_id]))
    one = e.submit(replace(base, id="one", max_tokens=1))
    e.run()
    assert stopped.finish_reason == "stop" and stopped.generated == full[: first + 1]
    assert one.finish_reason == "length" and one.generated == full[:1]
    assert_idle_clean(e)


def test_eos_stops_unless_ignored() -> None:
    e = engine()
    cfg = e.model.config
    eos = cfg.eos_token_ids[0]
    # a prompt whose first generated token is eos on the fake backend
    prompt = next(
        [i, j]
        for i in range(cfg.vocab_size - 1)
        for j in range(cfg.vocab_size - 1)
        if int(np.argmax(e.model.logits_for(np.array([i, j])))) == eos
    )
    stops = e.submit(Request("stops", prompt, max_tokens=5))
    goes_on = e.submit(Request("goes-on", prompt, max_tokens=5, ignore_eos=True))
    e.run()
    assert stops.finish_reason == "stop" and stops.generated == [eos]
    assert goes_on.finish_reason == "length" and len(goes_on.generated) == 5
    assert_idle_clean(e)


@pytest.mark.parametrize("kv_pages", PAGING)
def test_embed_requests(kv_pages: int) -> None:
    e = engine(kv_pages)
    emb = e.submit(req("emb", 40, kind="embed", salt=1))
    comp = e.submit(req("comp", 40, salt=1))
    e.run()
    assert emb.finish_reason == "stop" and emb.generated == [] and emb.embedding is not None
    assert emb.margins == []
    assert comp.finish_reason == "length" and len(comp.generated) == 8
    assert_idle_clean(e)


def test_priority_is_a_hint_not_a_result() -> None:
    fg = [req(f"f{i}", 5 + i, salt=i) for i in range(4)]
    bg = [replace(r, id="b" + r.id, priority="background") for r in fg]
    e = engine(parallel=2)
    streams: list[Stream] = [e.submit(r) for r in bg + fg]
    e.run()
    firsts = {
        s.req.id: min(i for i, ev in enumerate(e.events) if s.sid in ev.streams) for s in streams
    }
    assert max(firsts[r.id] for r in fg) < min(firsts[r.id] for r in bg)
    by_id = {s.req.id: s.generated for s in streams}
    for r in fg:
        assert by_id[r.id] == by_id["b" + r.id]
    assert_idle_clean(e)


def test_second_turn_reuses_the_first_turns_pages() -> None:
    e = engine(kv_pages=40)
    t1 = e.submit(req("t1", 37, max_tokens=10, salt=3))
    e.run()
    prompt2 = t1.req.prompt_ids + t1.generated + ids(9, 77, vocab=500)
    before = e.stats["prefill_tokens"]
    opened = []
    plan_open = e.plan.open
    e.plan.open = lambda *args: opened.append(plan_open(*args)) or opened[-1]
    t2 = e.submit(Request("t2", prompt2, max_tokens=8, ignore_eos=True))
    e.run()
    assert opened[0].reused_rows == 32  # the full pages of turn 1's 46 written rows
    assert e.stats["prefill_tokens"] - before == len(prompt2) - 32
    cold = engine(kv_pages=40)
    t2_cold = cold.submit(Request("t2", prompt2, max_tokens=8, ignore_eos=True))
    cold.run()
    assert cold.stats["prefill_tokens"] == len(prompt2)
    assert t2.generated == t2_cold.generated
    assert_idle_clean(e)


@pytest.mark.parametrize("kv_pages", [0, 4])
def test_an_embed_needs_no_rows_for_tokens_it_never_generates(kv_pages: int) -> None:
    """An embedding of a prompt as long as the context fits: max_tokens does not apply."""
    e = engine(kv_pages, parallel=1, context=64)  # 4 pages of 16 rows when paged
    full = e.submit(req("full", 64, kind="embed", max_tokens=16))
    over = e.submit(req("over", 65, kind="embed", salt=1))
    e.run()
    assert full.finish_reason == "stop" and full.embedding is not None
    assert over.finish_reason == "error" and "context" in over.error
    assert_idle_clean(e)
