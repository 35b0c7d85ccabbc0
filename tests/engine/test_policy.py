"""The scheduler policy on its edges, and as a state machine against a small model.

The model (``Model``) states the rules of engine/lanes/policy.py's docstring once more,
plainly: what kind of action comes next, which stream, and the state (debt, shorts in the
loop) that an action leaves. Hypothesis drives both through random streams and steps."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from engine.lanes.policy import AGED_AFTER, Action, PolicyState, StreamView, account, choose


def V(sid: int, phase: str, rows: int = 1, **kw) -> StreamView:  # noqa: N802
    return StreamView(id=sid, phase=phase, rows_left=rows, **kw)


# ---- edges ------------------------------------------------------------------------------------


def test_the_loop_gives_way_exactly_at_the_lane_count() -> None:
    shorts = [V(1, "short"), V(2, "short")]
    for lanes in (1, 2, 4):
        at = PolicyState(shorts_in_loop=lanes - 1)
        assert choose([*shorts, V(9, "decoding")], lanes, at).kind == "short"
        full = PolicyState(shorts_in_loop=lanes)
        assert choose([*shorts, V(9, "decoding")], lanes, full) == Action("round")


def test_a_full_loop_without_decoders_takes_the_best_long_step() -> None:
    longs = [V(3, "long", 500), V(4, "long", 100), V(5, "long", 900, passed_over=AGED_AFTER)]
    state = PolicyState(shorts_in_loop=2)
    assert choose([V(1, "short"), *longs], 2, state) == Action("long", 5)  # aged first
    assert choose([V(1, "short"), *longs[:2]], 2, state) == Action("long", 4)  # least left
    assert state.shorts_in_loop == 2  # the loop is not reset by a long step's choice


def test_a_full_loop_with_nothing_else_starts_a_new_loop() -> None:
    state = PolicyState(shorts_in_loop=3)
    assert choose([V(1, "short"), V(2, "short", 5)], 3, state) == Action("short", 1)
    assert state.shorts_in_loop == 0


def test_aged_is_exactly_at_aged_after() -> None:
    young = V(1, "long", 1, passed_over=AGED_AFTER - 1)
    aged = V(2, "long", 900, passed_over=AGED_AFTER)
    assert choose([young, aged], 1, PolicyState()) == Action("long", 2)
    older = V(2, "long", 900, passed_over=AGED_AFTER - 1)
    assert choose([young, older], 1, PolicyState()) == Action("long", 1)


def test_debt_exactly_zero_lets_a_long_step_go() -> None:
    views = [V(1, "long", 100), V(2, "decoding")]
    assert choose(views, 2, PolicyState(debt=0.0)) == Action("long", 1)
    assert choose(views, 2, PolicyState(debt=1e-12)) == Action("round")


def test_long_steps_add_up_their_debt_and_rounds_pay_it_to_zero() -> None:
    state = PolicyState(shorts_in_loop=2)
    account(state, Action("long", 1), 0.3, 0.5)
    assert state.debt == 0.6 and state.shorts_in_loop == 0
    account(state, Action("long", 1), 0.1, 0.5)
    assert math.isclose(state.debt, 0.8)
    account(state, Action("round"), 0.5, 0.5)
    assert math.isclose(state.debt, 0.3)
    account(state, Action("round"), 0.5, 0.5)
    assert state.debt == 0.0
    account(state, Action("idle"), 1.0, 0.5)
    assert state == PolicyState()


def test_streams_that_cannot_open_are_never_chosen() -> None:
    closed = [V(1, "short", can_open=False), V(2, "long", 9, can_open=False)]
    assert choose(closed, 2, PolicyState()) == Action("idle")
    assert choose([*closed, V(3, "decoding")], 2, PolicyState()) == Action("round")
    held = [V(1, "short", can_open=False, has_lane=True)]
    assert choose(held, 2, PolicyState()) == Action("short", 1)


# ---- the state machine against a model --------------------------------------------------------


def rank(s: StreamView) -> tuple:
    return (s.passed_over < AGED_AFTER, not s.foreground, s.rows_left, s.id)


class Model:
    """The policy's rules, stated once more: the next action and the state it leaves."""

    def __init__(self) -> None:
        self.debt = 0.0
        self.loop = 0

    def choose(self, views: list[StreamView], lanes: int) -> Action:
        ready = [s for s in views if s.has_lane or s.can_open]
        shorts = sorted((s for s in ready if s.phase == "short"), key=rank)
        longs = sorted((s for s in ready if s.phase == "long"), key=rank)
        decoding = any(s.phase == "decoding" for s in views)
        if not decoding:
            self.debt = 0.0
        if shorts and (self.loop < lanes or not (decoding or longs)):
            if self.loop >= lanes:
                self.loop = 0
            return Action("short", shorts[0].id)
        if shorts and decoding:
            return Action("round")
        if longs and (shorts or self.debt <= 0 or not decoding):
            return Action("long", longs[0].id)
        return Action("round") if decoding else Action("idle")

    def account(self, action: Action, seconds: float, share: float) -> None:
        self.loop = self.loop + 1 if action.kind == "short" else 0
        if action.kind == "long":
            self.debt += seconds / share
        elif action.kind == "round":
            self.debt = max(0.0, self.debt - seconds)


VIEW = st.builds(
    StreamView,
    id=st.integers(0, 6),
    phase=st.sampled_from(["short", "long", "decoding"]),
    rows_left=st.integers(1, 300),
    foreground=st.booleans(),
    passed_over=st.integers(AGED_AFTER - 2, AGED_AFTER + 1),
    has_lane=st.booleans(),
    can_open=st.booleans(),
)


class PolicyMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = PolicyState()
        self.model = Model()
        self.lanes = 1

    @initialize(lanes=st.integers(1, 4))
    def engine_lanes(self, lanes: int) -> None:
        self.lanes = lanes

    @rule(
        views=st.lists(VIEW, max_size=6, unique_by=lambda v: v.id),
        seconds=st.floats(0.0, 2.0),
        share=st.sampled_from([0.25, 0.5, 1.0, 3.0]),
    )
    def step(self, views: list[StreamView], seconds: float, share: float) -> None:
        got = choose(views, self.lanes, self.state)
        assert got == self.model.choose(views, self.lanes)
        chosen = {s.id: s for s in views}.get(got.stream) if got.stream is not None else None
        if got.kind in ("short", "long"):
            assert chosen is not None and chosen.phase == got.kind
            assert chosen.has_lane or chosen.can_open
        account(self.state, got, seconds, share)
        self.model.account(got, seconds, share)
        assert self.state.shorts_in_loop <= self.lanes  # a lane count of shorts, then a break

    @invariant()
    def same_state(self) -> None:
        assert self.state.shorts_in_loop == self.model.loop
        assert self.state.debt == self.model.debt and self.state.debt >= 0


PolicyMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)  # fmt: skip
test_policy_against_its_model = PolicyMachine.TestCase
