"""The engine on its step edges (fake backend, fake clock): a prompt of exactly step_rows
rows, a cancel exactly at a step boundary, a token cap of 0 and 1."""

from __future__ import annotations

import pytest

from engine.lanes.request import Request
from tests.engine.conftest import fake_engine, ids

STEP = 16


def req(rid: str, n: int, **kw) -> Request:
    return Request(rid, ids(n, 1, vocab=500), ignore_eos=True, **kw)


def steps_of(e, s) -> list[tuple[str, int]]:
    return [
        (ev.kind, ev.rows)
        for ev in e.events
        if ev.kind in ("short", "long") and s.sid in ev.streams
    ]


@pytest.mark.parametrize("n,want", [
    (STEP - 1, [("short", STEP - 1)]),
    (STEP, [("short", STEP)]),
    (STEP + 1, [("long", STEP), ("long", 1)]),
    (2 * STEP, [("long", STEP), ("long", STEP)]),
])  # fmt: skip
def test_a_prompt_of_exactly_step_rows_is_one_short_step(n: int, want: list) -> None:
    e = fake_engine(parallel=1, step_rows=STEP)
    s = e.submit(req("p", n, max_tokens=2))
    e.run()
    assert steps_of(e, s) == want and s.finish_reason == "length" and len(s.generated) == 2


@pytest.mark.parametrize("rows,fed", [(STEP, STEP), (STEP + 1, 2 * STEP), (2 * STEP, 2 * STEP)])
def test_a_cancel_after_rows_on_a_step_boundary_ends_after_that_step(rows: int, fed: int) -> None:
    e = fake_engine(parallel=1, step_rows=STEP)
    s = e.submit(req("c", 3 * STEP + 5, max_tokens=4, cancel_after_rows=rows))
    e.run()
    assert s.finish_reason == "cancelled" and s.generated == []
    assert sum(n for _, n in steps_of(e, s)) == fed
    assert e.plan.pages_in_use == 0


def test_a_token_cap_of_zero_and_one() -> None:
    e = fake_engine(parallel=2, step_rows=STEP)
    zero = e.submit(req("z", 5, max_tokens=4, cancel_after=0))
    one = e.submit(req("o", 5, max_tokens=4, cancel_after=1))
    e.run()
    assert zero.finish_reason == "cancelled" and len(zero.generated) <= 1
    assert one.finish_reason == "cancelled" and len(one.generated) == 1
