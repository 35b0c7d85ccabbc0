"""The scheduler policy (`engine/lanes/policy.py`): unit tests of choose / account, and
the scenarios of the project's design notes on the fake backend with a fake clock.

Each engine-level scenario below fails if its rule is taken out of engine/lanes/policy.py
(checked by hand once; see the commit message for the mutations)."""

from __future__ import annotations

from engine.lanes.engine import Engine, Event
from engine.lanes.policy import AGED_AFTER, Action, PolicyState, StreamView, account, choose
from engine.lanes.request import Request
from engine.lanes.stream import Stream
from tests.engine.conftest import fake_engine, ids

# ---- helpers ------------------------------------------------------------------------------


def req(rid: str, n: int, max_tokens: int = 1, salt: int = 0, **kw) -> Request:
    return Request(rid, ids(n, salt, vocab=500), max_tokens=max_tokens, ignore_eos=True, **kw)


def prompt_events(engine: Engine, s: Stream) -> list[int]:
    """Indices of the prompt steps (short or long) of stream s."""
    return [
        i
        for i, ev in enumerate(engine.events)
        if ev.kind in ("short", "long") and s.sid in ev.streams
    ]


def round_events(engine: Engine, s: Stream) -> list[int]:
    return [i for i, ev in enumerate(engine.events) if ev.kind == "round" and s.sid in ev.streams]


def rounds_between(events: list[Event], t0: float, t1: float) -> int:
    """Rounds that began at or after t0 and before t1."""
    return sum(1 for ev in events if ev.kind == "round" and t0 <= ev.start < t1)


def longest_short_run(events: list[Event]) -> int:
    worst = run = 0
    for ev in events:
        run = run + 1 if ev.kind == "short" else 0
        worst = max(worst, run)
    return worst


def assert_idle_clean(engine: Engine) -> None:
    assert engine.idle
    assert engine.plan.pages_in_use == 0 and engine.plan.unplanned_allocations == 0
    assert sorted(engine.plan.free_lanes) == list(range(engine.plan.lanes))


# ---- policy.choose / policy.account as pure functions ----------------------------------------


def V(sid: int, phase: str, rows: int = 1, **kw) -> StreamView:  # noqa: N802
    return StreamView(id=sid, phase=phase, rows_left=rows, **kw)


def test_nothing_to_do_is_idle() -> None:
    assert choose([], 2, PolicyState()) == Action("idle")
    blocked = V(1, "short", can_open=False)
    assert choose([blocked], 2, PolicyState()) == Action("idle")


def test_aged_long_prompt_goes_first_among_longs() -> None:
    young = V(1, "long", 100)
    aged = V(2, "long", 900, passed_over=AGED_AFTER)
    assert choose([young, aged], 2, PolicyState()) == Action("long", 2)
    not_yet = V(2, "long", 900, passed_over=AGED_AFTER - 1)
    assert choose([young, not_yet], 2, PolicyState()) == Action("long", 1)


def test_shorts_are_picked_aged_then_foreground_then_least_left() -> None:
    fg_big = V(1, "short", 40)
    fg_small = V(2, "short", 3)
    bg_tiny = V(3, "short", 1, foreground=False)
    assert choose([fg_big, fg_small], 2, PolicyState()) == Action("short", 2)  # least left
    assert choose([bg_tiny, fg_big], 2, PolicyState()) == Action("short", 1)  # foreground
    aged_bg = V(3, "short", 1, foreground=False, passed_over=AGED_AFTER)
    assert choose([fg_small, aged_bg], 2, PolicyState()) == Action("short", 3)  # aged
    tie_a, tie_b = V(7, "short", 5), V(4, "short", 5)
    assert choose([tie_a, tie_b], 2, PolicyState()) == Action("short", 4)  # then id


def test_foreground_before_background_among_longs() -> None:
    bg = V(1, "long", 100, foreground=False)
    fg = V(2, "long", 500)
    assert choose([bg, fg], 2, PolicyState()) == Action("long", 2)


def test_shorts_never_wait_for_debt_and_are_picked_among_themselves() -> None:
    state = PolicyState(debt=100.0)
    aged_long = V(1, "long", 900, passed_over=AGED_AFTER + 5)
    shorts = [V(2, "short", 1), V(3, "short", 2)]
    decoder = V(4, "decoding")
    assert choose([aged_long, decoder, *shorts], 2, state) == Action("short", 2)
    assert state.debt == 100.0


def test_short_loop_gives_way_after_a_lane_count() -> None:
    streams = [V(1, "short"), V(2, "decoding"), V(3, "long", 500)]
    state = PolicyState()
    for _ in range(3):
        a = choose(streams, 3, state)
        assert a == Action("short", 1)
        account(state, a, 0.01, 1.0)
    assert state.shorts_in_loop == 3
    assert choose(streams, 3, state) == Action("round")  # a decoder goes first
    no_decoder = [V(1, "short"), V(3, "long", 500)]
    assert choose(no_decoder, 3, state) == Action("long", 3)  # else a waiting long prompt
    alone = [V(1, "short")]
    assert choose(alone, 3, state) == Action("short", 1)  # else the loop starts over
    assert state.shorts_in_loop == 0
    account(state, Action("round"), 0.01, 1.0)
    assert state.shorts_in_loop == 0


def test_debt_accounting() -> None:
    state = PolicyState()
    streams = [V(1, "long", 500, has_lane=True), V(2, "decoding")]
    assert choose(streams, 2, state) == Action("long", 1)
    account(state, Action("long", 1), 0.5, 0.25)  # 0.5 s at share 1/4 owes 2 s of decode
    assert state.debt == 2.0
    assert choose(streams, 2, state) == Action("round")
    account(state, Action("round"), 1.5, 0.25)
    assert state.debt == 0.5
    assert choose(streams, 2, state) == Action("round")
    account(state, Action("round"), 1.0, 0.25)
    assert state.debt == 0.0  # never negative: decode time is not banked
    assert choose(streams, 2, state) == Action("long", 1)
    account(state, Action("short", 9), 3.0, 0.25)  # short prompts owe nothing
    assert state.debt == 0.0


def test_debt_is_cleared_when_no_decoder_is_left() -> None:
    state = PolicyState(debt=5.0)
    assert choose([V(1, "long", 500, has_lane=True)], 2, state) == Action("long", 1)
    assert state.debt == 0.0
    state = PolicyState(debt=5.0)
    assert choose([], 2, state) == Action("idle")
    assert state.debt == 0.0
    state = PolicyState(debt=5.0)  # a decoder still there: the debt stands
    assert choose([V(1, "long", 500), V(2, "decoding")], 2, state) == Action("round")
    assert state.debt == 5.0


def test_streams_that_cannot_open_wait_but_lane_holders_run() -> None:
    waiting = V(1, "short", 1, can_open=False)
    holder = V(2, "long", 500, has_lane=True, can_open=False)
    assert choose([waiting, holder], 2, PolicyState()) == Action("long", 2)
    assert choose([waiting, V(3, "decoding")], 2, PolicyState()) == Action("round")


# ---- the seed document's scenarios on the fake backend ---------------------------------------


def test_one_token_burst_cannot_pause_a_decoder() -> None:
    """Seed bug 1: 40 one-token requests beside a decoder on 2 lanes; each ends with its
    prompt and frees its lane inside the short loop. At most 2 prompts begin in a row."""
    e = fake_engine(parallel=2)
    d = e.submit(req("d", 5, max_tokens=100))
    shorts = [e.submit(req(f"s{i}", 1, salt=i + 1, arrival=0.05)) for i in range(40)]
    e.run()
    assert all(s.finish_reason == "length" for s in shorts)
    d_rounds = round_events(e, d)
    last_short = max(prompt_events(e, s)[0] for s in shorts)
    assert last_short < d_rounds[-1]  # the burst came while d was decoding
    during = e.events[d_rounds[0] : d_rounds[-1]]
    assert longest_short_run(during) <= 2
    assert all(ev.kind == "short" or d.sid in ev.streams for ev in during)
    assert_idle_clean(e)


def test_short_prompts_do_not_wait_behind_an_aged_long_prompt() -> None:
    """Seed bug 2: share 0.01, a decoder, a 1000-row prompt and 30 one-token requests that
    trickle in while the long prompt is stepped: none waits more than 1 decoder round."""
    e = fake_engine(parallel=4, share=0.01)
    d = e.submit(req("d", 5, max_tokens=600))
    long = e.submit(req("long", 1000, salt=7))
    shorts = [e.submit(req(f"s{i}", 1, salt=100 + i, arrival=0.1 + 0.13 * i)) for i in range(30)]
    e.run()
    long_steps = [e.events[i] for i in prompt_events(e, long)]
    assert len(long_steps) == 16
    assert long_steps[0].start < shorts[0].req.arrival
    assert long_steps[-1].start > shorts[-1].req.arrival  # they came while it was stepped
    assert round_events(e, d)[-1] > max(prompt_events(e, s)[0] for s in shorts)
    waits = []
    for s in shorts:
        (step,) = prompt_events(e, s)
        waits.append(rounds_between(e.events, s.req.arrival, e.events[step].start))
    assert max(waits) <= 1, waits
    assert_idle_clean(e)


def test_long_prompt_goes_in_among_one_token_arrivals_without_a_decoder() -> None:
    """Seed bug 2, second test: no decoder, a long prompt beside 40 one-token arrivals
    (coming faster than they are served) still goes in before the last of them."""
    e = fake_engine(parallel=2)
    long = e.submit(req("long", 300, salt=3))
    shorts = [e.submit(req(f"s{i}", 1, salt=i + 1, arrival=0.002 * i)) for i in range(40)]
    e.run()
    first_long = prompt_events(e, long)[0]
    last_short = max(prompt_events(e, s)[0] for s in shorts)
    assert first_long < last_short
    assert first_long <= 2  # a lane count of short prompts, then the long step
    assert_idle_clean(e)


def _debt_scenario(d2_arrival: float | None) -> tuple[Engine, Stream, Stream]:
    e = fake_engine(parallel=3, share=0.01)
    d1 = e.submit(req("d1", 5, max_tokens=3))
    long = e.submit(req("long", 300, salt=5))
    if d2_arrival is not None:
        e.submit(req("d2", 5, max_tokens=300, salt=9, arrival=d2_arrival))
    e.run()
    return e, d1, long


def test_debt_does_not_survive_its_decoders() -> None:
    """Seed bug 3: at share 0.01 a 3-token decoder ends after a long prompt's first step;
    a second decoder arrives as it ends. The long prompt's next step comes after at most
    1 round, not after the second decoder has paid the first one's debt."""
    dry, d1, long = _debt_scenario(None)
    last = dry.events[round_events(dry, d1)[-1]]
    assert prompt_events(dry, long)[0] < round_events(dry, d1)[-1]
    arrival = last.start + last.seconds / 2  # during d1's final round
    e, _, long = _debt_scenario(arrival)
    steps = [e.events[i] for i in prompt_events(e, long)]
    assert steps[0].start < arrival < steps[1].start
    assert rounds_between(e.events, arrival, steps[1].start) <= 1
    assert_idle_clean(e)


def test_a_burst_that_fits_the_lanes_goes_in_together() -> None:
    """Default share: short prompts that fit the free lanes all begin before a round."""
    e = fake_engine(parallel=4)
    streams = [e.submit(req(f"s{i}", 3 + i, max_tokens=5, salt=i)) for i in range(4)]
    e.run()
    assert [ev.kind for ev in e.events[:5]] == ["short"] * 4 + ["round"]
    assert sorted(e.events[4].streams) == sorted(s.sid for s in streams)
    assert_idle_clean(e)

    e = fake_engine(parallel=4)
    d = e.submit(req("d", 5, max_tokens=50))
    burst = [
        e.submit(req(f"b{i}", 2 + i, max_tokens=5, salt=20 + i, arrival=0.05)) for i in range(3)
    ]
    e.run()
    first = min(prompt_events(e, s)[0] for s in burst)
    assert [ev.kind for ev in e.events[first : first + 4]] == ["short"] * 3 + ["round"]
    assert sorted(e.events[first + 3].streams) == sorted(s.sid for s in [d, *burst])
    assert_idle_clean(e)


def test_a_passed_over_long_prompt_ages_and_goes_next() -> None:
    """Least-left would run the shorter long prompt to its end; aging bounds the wait."""
    e = fake_engine(parallel=2)
    small = e.submit(req("small", 1000, salt=1))
    big = e.submit(req("big", 2000, salt=2))
    e.run()
    assert prompt_events(e, small)[0] == 0
    assert prompt_events(e, big)[0] <= AGED_AFTER
    assert_idle_clean(e)


def test_a_background_short_prompt_ages_past_foreground_ones() -> None:
    """Short prompts are picked aged first: a background request is not starved by a
    stream of foreground ones."""
    e = fake_engine(parallel=1)
    bg = e.submit(req("bg", 1, salt=1, priority="background"))
    fg = [e.submit(req(f"f{i}", 1, salt=10 + i, arrival=0.001 * i)) for i in range(30)]
    e.run()
    order = [ev.streams[0] for ev in e.events if ev.kind == "short"]
    assert order.index(bg.sid) <= AGED_AFTER
    assert order.index(fg[0].sid) == 0  # foreground first while bg is young
    assert_idle_clean(e)


def test_fake_clock_times_events() -> None:
    """Events carry fake-clock start times and durations from the fake backend's costs."""
    e = fake_engine(parallel=1, per_row=1e-3, per_forward=1e-2)
    e.submit(req("a", 10, max_tokens=3))
    e.run()
    kinds = [(ev.kind, round(ev.start, 6), round(ev.seconds, 6)) for ev in e.events]
    assert kinds == [("short", 0.0, 0.02), ("round", 0.02, 0.011), ("round", 0.031, 0.011)]


def test_a_resumed_prompt_whose_uncached_rest_fits_one_step_is_short():
    """Turn 2 extends turn 1: with turn 1's pages cached, only a few rows are left, so it
    is filled as a short prompt and does not wait for decode debt."""
    engine = fake_engine(parallel=2, share=0.01, step_rows=64, kv_pages=128)
    first = engine.submit(req("t1", 200, max_tokens=4))
    engine.run()
    turn2 = first.tokens + ids(5, salt=9, vocab=500)
    engine.submit(req("decoder", 3, max_tokens=50, salt=3))
    second = engine.submit(Request("t2", turn2, max_tokens=2, ignore_eos=True))
    engine.run()
    assert [engine.events[i].kind for i in prompt_events(engine, second)] == ["short"]
    assert second.run is None and engine.stats["prefill_tokens"] < 200 + 3 + len(turn2)
    assert_idle_clean(engine)
