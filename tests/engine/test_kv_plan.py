"""The page plan's edges and its eviction order against a small model (hypothesis).

The model keeps, per cached prefix key, the tick it was last cached or reused; a fresh page
taken from a full pool must come from the cached, unreferenced key with the oldest tick."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.kv.plan import PagePlan

ROWS = 2


def test_pages_for_and_fits_on_their_edges() -> None:
    plan = PagePlan(lanes=2, context=8, page_rows=4, pool_pages=3)
    assert [plan.pages_for(r) for r in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]
    assert plan.fits(8) and not plan.fits(9)
    small = PagePlan(lanes=1, context=64, page_rows=4, pool_pages=3)
    assert small.fits(12) and not small.fits(13)  # the pool, not the context, is the bound
    off = PagePlan(lanes=2, context=9, page_rows=4, pool_pages=0)
    assert off.per_lane == 3 and off.total_pages == 6 and off.fits(9) and not off.fits(10)


def test_can_open_counts_free_and_cached_pages_exactly() -> None:
    plan = PagePlan(lanes=1, context=64, page_rows=ROWS, pool_pages=4)
    a = [1, 2, 3, 4]
    plan.release(plan.open(4, a), a)  # 2 pages cached, 2 free
    assert plan.cached_pages == 2 and len(plan.free_pages) == 2
    assert plan.can_open(8) and not plan.can_open(9)
    run = plan.open(2, [9])
    assert not plan.can_open(1)  # no lane left
    plan.release(run, [9])
    assert plan.free_lanes == [0]


def test_lanes_are_taken_lowest_first_and_given_back_sorted() -> None:
    plan = PagePlan(lanes=3, context=8, page_rows=ROWS, pool_pages=0)
    runs = [plan.open(2, [i]) for i in range(3)]
    assert [r.lane for r in runs] == [0, 1, 2]
    assert [r.pages for r in runs] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    plan.release(runs[2], [])
    plan.release(runs[0], [])
    assert plan.free_lanes == [0, 2] and runs[0].lane == -1 and runs[0].pages == []
    plan.release(runs[0], [])  # a second release is a no-op
    assert plan.free_lanes == [0, 2] and plan.pages_in_use == 4


def test_a_prompt_of_exactly_whole_pages_keeps_its_last_page_to_feed() -> None:
    plan = PagePlan(lanes=1, context=64, page_rows=ROWS, pool_pages=8)
    p = [1, 2, 3, 4, 5, 6]
    plan.release(plan.open(6, p), p)
    assert plan.reusable_rows(p) == 4  # 3 cached pages, the last one fed again
    assert plan.reusable_rows(p + [7]) == 6
    assert plan.reusable_rows(p[:1]) == 0 and plan.reusable_rows([]) == 0


def test_a_page_still_referenced_is_never_evicted() -> None:
    plan = PagePlan(lanes=2, context=64, page_rows=ROWS, pool_pages=3)
    a = [1, 2, 3, 4]
    plan.release(plan.open(4, a), a)
    keep = plan.open(5, a + [5])  # reuses both cached pages, takes the free one
    assert keep.reused_rows == 4 and plan.pages_in_use == 3
    assert not plan.can_open(1)


prompts = st.lists(st.integers(1, 3), min_size=1, max_size=9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(prompts, st.integers(0, 3)), min_size=1, max_size=25))
def test_eviction_takes_the_least_recently_used_unreferenced_page(ops) -> None:
    """Model: a stamp per cached key, renewed when the key is cached or reused (in chain
    order); a page taken from a full pool is the cached, unreferenced key of oldest stamp."""
    plan = PagePlan(lanes=1, context=64, page_rows=ROWS, pool_pages=6)
    clock, stamp = 0, {}  # chain key -> when it was last cached or reused
    for prompt, extra in ops:
        rows = len(prompt) + extra
        if not plan.fits(rows) or not plan.can_open(rows):
            continue
        before = list(plan.cache)
        prefix = [k for k, _ in plan._cached_prefix(prompt)]
        run = plan.open(rows, prompt)
        assert run.reused_rows == len(prefix) * ROWS
        evicted = [k for k in before if k not in plan.cache]
        kept = [k for k in plan.cache if k not in prefix]
        assert not set(evicted) & set(prefix)
        for k in evicted:  # every evicted key is older than every unreferenced key kept
            assert all(stamp[k] < stamp[j] for j in kept), (stamp[k], [stamp[j] for j in kept])
        for k in prefix:
            clock, stamp[k] = clock + 1, clock + 1
        opened = set(plan.cache)
        plan.release(run, (prompt + [9] * extra)[:rows])
        for k in plan.cache:
            if k not in opened:  # cached by this release (perhaps again, after an eviction)
                clock, stamp[k] = clock + 1, clock + 1
        assert plan.pages_in_use == 0
        assert len(plan.free_pages) + plan.cached_pages == plan.total_pages


def test_opening_past_can_open_is_an_error_by_name() -> None:
    plan = PagePlan(lanes=2, context=64, page_rows=ROWS, pool_pages=2)
    plan.open(4, [1, 2, 3])
    assert not plan.can_open(1)
    with pytest.raises(RuntimeError, match="^page pool exhausted$"):
        plan.open(1, [5])


def test_a_pool_of_one_page_is_paging() -> None:
    plan = PagePlan(lanes=3, context=8, page_rows=4, pool_pages=1)
    assert plan.lanes == 3 and plan.paging and plan.total_pages == 1
    assert plan.fits(4) and not plan.fits(5)


def test_a_shared_page_stays_held_until_its_last_holder_releases_it() -> None:
    plan = PagePlan(lanes=2, context=64, page_rows=ROWS, pool_pages=6)
    a = [1, 2, 3, 4, 5]
    plan.release(plan.open(5, a), a)
    x, y = plan.open(6, a + [6]), plan.open(6, a + [7])
    shared = x.pages[:2]
    assert y.pages[:2] == shared and all(plan.refs[p] == 2 for p in shared)
    plan.release(x, a + [6])
    assert all(plan.refs[p] == 1 for p in shared)
    assert not set(shared) & set(plan.free_pages) and plan.cached_pages == 1  # x's own page
    plan.release(y, a + [7])
    assert plan.pages_in_use == 0 and plan.cached_pages + len(plan.free_pages) == 6
