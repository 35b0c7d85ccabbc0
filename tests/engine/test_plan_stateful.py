"""The page plan under random opens and releases (hypothesis, stateful).

Invariants after every step: no refcount below zero; every page is exactly one of free,
in use, or cached (free + in use + cached == total); a free page is neither referenced
nor cached. And the property the prefix cache exists for: a page handed out as a reused
prefix holds exactly the rows of that prefix — the tokens written there, with the same
tokens before them — so a stale page (evicted, then written by another stream) or a hash
that does not chain is caught the moment it is reused.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from engine.kv.plan import LaneRun, PagePlan

ROWS = 4  # rows per page
PAGES = 14
LANES = 3
CONTEXT = 40

tokens = st.lists(st.integers(1, 2), min_size=1, max_size=24)  # few symbols: many shared runs


class PlanMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.plan = PagePlan(LANES, CONTEXT, ROWS, PAGES)
        self.open_runs: list[tuple[LaneRun, list[int], int]] = []  # run, prompt, rows
        self.content: dict[int, tuple[int, ...]] = {}  # page -> the tokens up to its end

    @precondition(lambda self: len(self.open_runs) < LANES)
    @rule(prompt=tokens, extra=st.integers(0, 12))
    def open(self, prompt: list[int], extra: int) -> None:
        rows = len(prompt) + extra
        if not self.plan.can_open(rows):
            return
        run = self.plan.open(rows, prompt)
        for i in range(run.reused_rows // ROWS):  # reused pages hold this very prefix
            assert self.content.get(run.pages[i]) == tuple(prompt[: (i + 1) * ROWS])
        assert run.reused_rows < len(prompt)  # at least one token is left to feed
        for page in run.pages[run.reused_rows // ROWS :]:
            self.content.pop(page, None)  # the stream writes its own rows here now
        self.open_runs.append((run, prompt, rows))

    @precondition(lambda self: self.open_runs)
    @rule(which=st.integers(0, LANES - 1), generated=tokens, keep=st.integers(0, 40))
    def release(self, which: int, generated: list[int], keep: int) -> None:
        run, prompt, rows = self.open_runs.pop(which % len(self.open_runs))
        written = (prompt + generated)[: max(run.reused_rows, min(rows, keep))]
        for i, page in enumerate(run.pages):  # what the stream's rows put in its pages
            if (i + 1) * ROWS <= len(written) and i * ROWS >= run.reused_rows:
                self.content[page] = tuple(written[: (i + 1) * ROWS])
        self.plan.release(run, written)

    @invariant()
    def counts_add_up(self) -> None:
        p = self.plan
        assert min(p.refs) >= 0
        assert len(p.free_pages) == len(set(p.free_pages))
        assert len(p.free_pages) + p.pages_in_use + p.cached_pages == p.total_pages
        for page in p.free_pages:
            assert p.refs[page] == 0 and page not in p.page_key

    def teardown(self) -> None:
        for run, _, _ in self.open_runs:
            self.plan.release(run, [])
        assert self.plan.pages_in_use == 0


PlanMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestPlan = PlanMachine.TestCase
