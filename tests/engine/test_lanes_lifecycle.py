"""Lanes and the memory plan over a stream's whole life: admission, prompt steps, rounds,
finish, cancel and failure. After any workload the engine is idle with no page in use and no
unplanned allocation, with paging on and off. Runs on the fake backend (next token = hash of
the whole fed history), so a stream that read another's pages would give other tokens.
Cancels and failures of single streams: test_lanes_cancel.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from engine.lanes.engine import Engine, Event
from engine.lanes.request import Request
from engine.lanes.stream import Stream
from tests.engine.conftest import ids
from tests.engine.lanes_helpers import (
    PAGING,
    Failing,
    assert_idle_clean,
    cancel_at,
    engine,
    req,
    solo_tokens,
)

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
