"""The memory plan: which KV pages each lane's stream holds, made once at start.

Paging off: lane i owns a fixed run of ceil(context / page_rows) pages.
Paging on: one shared pool; a stream reserves its worst case at admission, and full pages
of a finished stream stay cached by a hash chain of their tokens, so a later prompt that
extends it (a second chat turn) reuses those pages instead of recomputing them.
"""

from __future__ import annotations

import functools
import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field


@dataclass
class LaneRun:
    lane: int
    pages: list[int] = field(default_factory=list)
    reused_rows: int = 0


class PagePlan:
    def __init__(self, lanes: int, context: int, page_rows: int, pool_pages: int) -> None:
        self.lanes = lanes
        self.context = context
        self.page_rows = page_rows
        self.per_lane = -(-context // page_rows)
        self.paging = pool_pages > 0
        self.total_pages = pool_pages if self.paging else lanes * self.per_lane
        self.free_lanes = list(range(lanes))
        self.free_pages = list(range(self.total_pages))
        self.refs = [0] * self.total_pages
        self.cache: OrderedDict[bytes, int] = OrderedDict()  # chain hash -> page (LRU order)
        self.page_key: dict[int, bytes] = {}
        self.unplanned_allocations = 0

    @property
    def pages_in_use(self) -> int:
        return sum(1 for r in self.refs if r > 0)

    @property
    def cached_pages(self) -> int:
        return sum(1 for p in self.cache.values() if self.refs[p] == 0)

    def pages_for(self, rows: int) -> int:
        return -(-rows // self.page_rows)

    def can_open(self, rows: int) -> bool:
        if not self.free_lanes:
            return False
        if not self.paging:
            return True
        return len(self.free_pages) + self.cached_pages >= self.pages_for(rows)

    def fits(self, rows: int) -> bool:
        if rows > self.context:
            return False
        return not self.paging or self.pages_for(rows) <= self.total_pages

    def _chain(self, tokens: list[int]) -> list[bytes]:
        return list(_chain_keys(tuple(tokens), self.page_rows))

    def _take_page(self) -> int:
        if self.free_pages:
            return self.free_pages.pop()
        for key, page in self.cache.items():  # least recently used first
            if self.refs[page] == 0:
                del self.cache[key]
                del self.page_key[page]
                return page
        raise RuntimeError("page pool exhausted")  # can_open() guards this

    def prefix_keys(self, prompt: list[int]) -> tuple[bytes, ...]:
        """The chain keys a prompt's cached prefix may match: its full pages, keeping at
        least one token to feed (so the first step yields logits). A caller that asks for
        the same prompt at every step keeps these (the LRU below holds only 1024 prompts)."""
        return _chain_keys(tuple(prompt[: len(prompt) - 1]), self.page_rows) if self.paging else ()

    def _cached_prefix(
        self, prompt: list[int], keys: tuple[bytes, ...] | None = None
    ) -> list[tuple[bytes, int]]:
        found = []
        for key in self.prefix_keys(prompt) if keys is None else keys:
            page = self.cache.get(key)
            if page is None:
                break
            found.append((key, page))
        return found

    def reusable_rows(self, prompt: list[int], keys: tuple[bytes, ...] | None = None) -> int:
        return len(self._cached_prefix(prompt, keys)) * self.page_rows

    def open(self, rows: int, prompt: list[int], keys: tuple[bytes, ...] | None = None) -> LaneRun:
        """Take a lane and pages for `rows` rows, reusing cached pages of the prompt's prefix
        (`keys`: its prefix_keys, where the caller kept them)."""
        run = LaneRun(lane=self.free_lanes.pop(0))
        if not self.paging:
            base = run.lane * self.per_lane
            run.pages = list(range(base, base + self.per_lane))
        else:
            for key, page in self._cached_prefix(prompt, keys):
                self.cache.move_to_end(key)
                run.pages.append(page)
            run.reused_rows = len(run.pages) * self.page_rows
            for page in run.pages:
                self.refs[page] += 1
            while len(run.pages) < self.pages_for(rows):
                page = self._take_page()
                self.refs[page] += 1
                run.pages.append(page)
        if not self.paging:
            for page in run.pages:
                self.refs[page] += 1
        return run

    def release(self, run: LaneRun, written: list[int]) -> None:
        """Give back a lane; `written` are the tokens whose KV rows the stream wrote."""
        if run.lane < 0:
            return
        keys = self._chain(written) if self.paging else []
        for i, page in enumerate(run.pages):
            self.refs[page] -= 1
            if not self.paging or self.refs[page] > 0:
                continue
            if i < len(keys) and page not in self.page_key and keys[i] not in self.cache:
                self.cache[keys[i]] = page
                self.page_key[page] = keys[i]
            elif page not in self.page_key:
                self.free_pages.append(page)
        self.free_lanes.append(run.lane)
        self.free_lanes.sort()
        run.lane = -1
        run.pages = []


@functools.lru_cache(maxsize=1024)
def _chain_keys(tokens: tuple[int, ...], page_rows: int) -> tuple[bytes, ...]:
    """A hash chain over the full pages of `tokens`: key i covers pages 0..i. Cached, since
    the round loop asks again for every waiting prompt at every step."""
    keys, h = [], b""
    for i in range(len(tokens) // page_rows):
        h = hashlib.sha256(
            h + str(list(tokens[i * page_rows : (i + 1) * page_rows])).encode()
        ).digest()
        keys.append(h)
    return tuple(keys)
