"""The round loop: admits requests into lanes, runs prompt steps beside decoding rounds as
the policy chooses, verifies drafts, and gives lanes and pages back on every exit path."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from engine.config import EngineConfig
from engine.draft.base import Drafter, NoDrafter
from engine.errors import InputError
from engine.kv import budget
from engine.kv.plan import PagePlan
from engine.lanes import calibrate, policy
from engine.lanes.clock import Clock, RealClock
from engine.lanes.request import Request
from engine.lanes.sampling import device_greedy, logit_hashes, margin, row_hashes, sample
from engine.lanes.stream import Stream
from engine.model.qwen3 import Segment


@dataclass
class Event:
    """One action, with what the policy saw when it chose it (for traces and tests)."""

    kind: str  # short | long | round
    streams: list[int]
    start: float
    seconds: float
    rows: int = 0  # prompt rows fed, or rows in the round (draft rows included)
    views: list[policy.StreamView] = field(default_factory=list)  # at decision time
    debt: float = 0.0  # the policy's debt after `choose`
    arrived: list[int] = field(default_factory=list)  # sids live since the previous event
    first_token: list[int] = field(default_factory=list)  # sids whose first token came now
    finished: list[int] = field(default_factory=list)  # sids finished since the previous one


class Engine:
    def __init__(
        self,
        model: Any,
        cfg: EngineConfig,
        clock: Clock | None = None,
        drafter: Drafter | None = None,
        kv: Any = None,
    ) -> None:
        """kv: the KV memory of an earlier, idle engine of this model and config, to reuse
        (its captured steps with it); None: a new one."""
        self.model = model
        self.cfg = cfg.validate()
        self.clock = clock or RealClock()
        self.drafter = drafter or NoDrafter()
        extra = self.drafter.max_tokens(cfg.draft_tokens)
        if kv is None:  # a reused memory is allocated already: free memory no longer holds it
            self._check_memory(model, cfg, cfg.context + extra)
        self.plan = PagePlan(cfg.lanes, cfg.context + extra, cfg.page_rows, cfg.kv_pages)
        self.kv = kv if kv is not None else self._new_kv(model, cfg)
        self.drafter.plan(self.plan, model)
        self.state = policy.PolicyState()
        self.waiting: list[Stream] = []  # submitted, not yet arrived
        self.live: list[Stream] = []
        self.finished: list[Stream] = []
        self.events: list[Event] = []
        self.on_event: Callable[[Engine, Event], None] | None = None
        self.t0 = self.clock.now()
        self._next_sid = 0
        self._rows = 0  # rows of the current action, set by _prompt_step / _round
        self._arrived: list[int] = []  # sids gone live since the last event
        self._ended: list[int] = []  # sids finished since the last event
        self.stats = {"prefill_tokens": 0, "decode_tokens": 0, "rounds": 0, "steps": 0}
        self._slowdown = calibrate.slowdown()  # ENGINE_CALIBRATE_SLOWDOWN; 0 = off
        self._hashes = self._logit_hashes_on(cfg.flags)

    @staticmethod
    def _logit_hashes_on(flags: dict[str, str]) -> bool:
        """ENGINE_LOGIT_HASHES=0: streams carry no logit hashes (a bench needs none, and a
        hash needs the whole logits row on the host); unset or 1: every token has one."""
        value = flags.get("ENGINE_LOGIT_HASHES", "1")
        if value not in ("0", "1"):
            raise InputError(f"ENGINE_LOGIT_HASHES: expected 0 or 1, got '{value}'")
        return value == "1"

    def _check_memory(self, model: Any, cfg: EngineConfig, rows: int) -> None:
        """Refuse a plan whose KV memory cannot fit, before anything is allocated."""
        if not hasattr(model, "config"):
            return
        lane_pages = -(-rows // cfg.page_rows)
        pages = cfg.kv_pages if cfg.kv_pages > 0 else cfg.lanes * lane_pages
        lane_rows = lane_pages * cfg.page_rows
        self._need = budget.kv_bytes(
            model.config, pages, cfg.page_rows, cfg.kv, cfg.lanes, lane_rows
        )
        free = getattr(getattr(model, "ops", None), "memory_available", budget.host_available)
        budget.check(self._need, free(), self._what(cfg))

    @staticmethod
    def _what(cfg: EngineConfig) -> str:
        what = f"--context {cfg.context} --parallel {cfg.lanes} --kv {cfg.kv}"
        return what + (f" --kv-pages {cfg.kv_pages}" if cfg.kv_pages else "")

    def _new_kv(self, model: Any, cfg: EngineConfig) -> Any:
        pages, lane_rows = self.plan.total_pages, self.plan.per_lane * cfg.page_rows
        try:
            return model.new_kv(pages, cfg.page_rows, cfg.kv, lanes=cfg.lanes, lane_rows=lane_rows)
        except MemoryError:  # the allocator disagreed with the estimate: still one line
            raise budget.failed(getattr(self, "_need", None), self._what(cfg)) from None

    # ---- requests -------------------------------------------------------------------
    def submit(self, req: Request) -> Stream:
        s = Stream(self._next_sid, req, long=len(req.prompt_ids) > self.cfg.step_rows)
        self._next_sid += 1
        s.tokens = list(req.prompt_ids)
        rows = self._rows_needed(s)
        vocab = self.model.config.vocab_size
        gen = self._generated_rows(req)
        if len(req.prompt_ids) + gen > self.cfg.context:
            self._finish(
                s,
                "error",
                f"prompt ({len(req.prompt_ids)}) + max_tokens "
                f"({gen}) exceeds the context ({self.cfg.context})",
            )
            s.error_code = "context_length_exceeded"
        elif len(req.prompt_ids) + gen > self.model.config.max_position_embeddings:
            self._finish(
                s,
                "error",
                f"prompt + max_tokens exceeds max_position_embeddings "
                f"({self.model.config.max_position_embeddings})",
            )
            s.error_code = "context_length_exceeded"
        elif not self.plan.fits(rows):
            self._finish(
                s,
                "error",
                f"needs {self.plan.pages_for(rows)} KV pages, the pool has {self.plan.total_pages}",
            )
        elif max(req.prompt_ids) >= vocab:
            self._finish(s, "error", f"prompt id {max(req.prompt_ids)} >= vocab_size {vocab}")
        else:
            self.waiting.append(s)
            self.waiting.sort(key=lambda w: (w.req.arrival, w.sid))
        return s

    def cancel(self, req_id: str) -> None:
        for s in self.waiting + self.live:
            if s.req.id == req_id:
                s.cancel_requested = True

    @staticmethod
    def _generated_rows(req: Request) -> int:
        return req.max_tokens if req.kind == "complete" else 0  # an embed generates none

    def _rows_needed(self, s: Stream) -> int:
        drafted = s.req.draft and s.req.kind == "complete"
        extra = self.drafter.max_tokens(self.cfg.draft_tokens) if drafted else 0
        return s.prompt_len + self._generated_rows(s.req) + extra

    # ---- loop -----------------------------------------------------------------------
    @property
    def idle(self) -> bool:
        return not self.waiting and not self.live

    def run(self) -> list[Stream]:
        while self.step():
            pass
        return self.finished

    def step(self) -> bool:
        """Do one action (a prompt step or a round). False once nothing is left."""
        now = self.clock.now() - self.t0
        while self.waiting and self.waiting[0].req.arrival <= now:
            self.live.append(self.waiting.pop(0))
            self._arrived.append(self.live[-1].sid)
        self._act_on_cancels()
        if not self.live:
            if not self.waiting:
                return False
            self.clock.sleep_until(self.t0 + self.waiting[0].req.arrival)
            return True
        views = [self._view(s) for s in self.live]
        action = policy.choose(views, self.plan.lanes, self.state)
        if action.kind == "idle":
            if not self.waiting:
                raise RuntimeError("scheduler idle with live streams that cannot run")
            self.clock.sleep_until(self.t0 + self.waiting[0].req.arrival)
            return True
        for s, v in zip(self.live, views, strict=True):
            if v.phase != "decoding" and v.id != action.stream:  # prompts age
                s.passed_over += 1
        debt = self.state.debt
        start = self.clock.now()
        self._rows = 0
        if action.kind == "round":
            streams = [s for s in self.live if not s.prefilling and not s.done]
            work = partial(self._round, streams)
        else:
            streams = [self._by_sid(action.stream)]
            streams[0].passed_over = 0
            work = partial(self._prompt_step, streams[0])
        fresh = [s for s in streams if len(s.tokens) == s.prompt_len]
        cpu0 = time.process_time() if self._slowdown else 0.0
        self._guarded(streams, work)
        if self._slowdown:
            calibrate.burn(self._slowdown * (time.process_time() - cpu0))
        self.clock.charge(action.kind, self._rows)
        seconds = self.clock.now() - start
        policy.account(self.state, action, seconds, self.cfg.share)
        first = [s.sid for s in fresh if len(s.tokens) > s.prompt_len]
        event = Event(
            action.kind,
            [s.sid for s in streams],
            start - self.t0,
            seconds,
            rows=self._rows,
            views=views,
            debt=debt,
            arrived=self._arrived,
            first_token=first,
            finished=self._ended,
        )
        self._arrived, self._ended = [], []
        self.events.append(event)
        if self.on_event:
            self.on_event(self, event)
        self.live = [s for s in self.live if not s.done]
        return True

    def _view(self, s: Stream) -> policy.StreamView:
        if s.run is None:  # a resumed prompt whose uncached rest fits one step is short
            if s.prefix_keys is None:
                s.prefix_keys = self.plan.prefix_keys(s.req.prompt_ids)
            rest = s.prompt_len - self.plan.reusable_rows(s.req.prompt_ids, s.prefix_keys)
            s.long = rest > self.cfg.step_rows
        phase = ("long" if s.long else "short") if s.prefilling else "decoding"
        return policy.StreamView(
            id=s.sid,
            phase=phase,
            rows_left=s.rows_left,
            foreground=s.req.priority == "foreground",
            passed_over=s.passed_over,
            has_lane=s.run is not None,
            can_open=s.run is not None
            or (bool(self.plan.free_lanes) and self.plan.can_open(self._rows_needed(s))),
        )

    def _by_sid(self, sid: int) -> Stream:
        return next(s for s in self.live if s.sid == sid)

    def _guarded(self, streams: list[Stream], work: Callable[[], None]) -> None:
        try:
            work()
        except Exception as exc:  # a failed step ends its streams, never the engine
            for s in streams:
                if not s.done:
                    self._finish(s, "error", f"{type(exc).__name__}: {exc}")

    def _act_on_cancels(self) -> None:
        for s in list(self.waiting):
            if s.cancel_requested:
                self.waiting.remove(s)
                self._finish(s, "cancelled")
        for s in self.live:
            cap, rows = s.req.cancel_after, s.req.cancel_after_rows
            if (
                s.cancel_requested
                or (cap is not None and s.generated_count >= cap)
                or (rows is not None and s.run is not None and s.prefilling and s.fed >= rows)
            ):
                self._finish(s, "cancelled")
        self.live = [s for s in self.live if not s.done]

    # ---- actions --------------------------------------------------------------------
    def _prompt_step(self, s: Stream) -> None:
        if s.run is None:
            s.run = self.plan.open(self._rows_needed(s), s.req.prompt_ids, s.prefix_keys)
            s.fed = s.run.reused_rows
            self.kv.open_lane(s.run.lane, s.run.pages, s.run.reused_rows)
        n = min(self.cfg.step_rows, s.rows_left)
        self._rows = n
        last = s.fed + n == s.prompt_len
        seg = Segment(
            np.asarray(s.tokens[s.fed : s.fed + n], dtype=np.int64),
            s.fed,
            s.run.pages,
            np.asarray([n - 1] if last else [], dtype=np.int64),
            lane=s.run.lane,
        )
        first_step = s.fed == s.run.reused_rows
        (out,) = self.model.forward([seg], self.kv, self.drafter.taps)
        self.stats["steps"] += 1
        self.stats["prefill_tokens"] += n
        if first_step and s.req.draft and s.req.kind == "complete":
            self.drafter.open(s)  # after the target's first step, before its rows are absorbed
        if s.req.draft and s.req.kind == "complete":
            self.drafter.absorb_prompt(s, seg, out)
        s.fed += n
        if not last:
            return
        if s.req.kind == "embed":
            s.embedding = out.hidden[-1].copy()
            self._finish(s, "stop")
            return
        self._emit(s, out.logits[:1], [], out)

    def _round(self, streams: list[Stream]) -> None:
        segs, drafts = [], []
        drafting = [s for s in streams if s.req.draft]
        proposed = self.drafter.propose_many(drafting, self.cfg.draft_tokens) if drafting else []
        proposals = {s.sid: d for s, d in zip(drafting, proposed, strict=True)}
        for s in streams:
            d = proposals.get(s.sid, [])
            d = d[: max(0, s.req.max_tokens - s.generated_count - 1)]
            drafts.append(d)
            toks = np.asarray([s.tokens[s.fed], *d], dtype=np.int64)
            segs.append(Segment(toks, s.fed, s.run.pages, np.arange(len(toks)), s.run.lane))
        self._rows = sum(len(seg.tokens) for seg in segs)
        outs = self.model.forward(segs, self.kv, self.drafter.taps)
        self.stats["rounds"] += 1
        absorbs: list[tuple[Stream, Any, int, list[int]]] = []
        firsts: list[str | None] = [None] * len(outs)
        if self._hashes:  # every stream emits row 0
            firsts = list(logit_hashes([out.logits[0] for out in outs]))
        for s, seg, out, d, h in zip(streams, segs, outs, drafts, firsts, strict=True):
            s.rounds += 1
            self.stats["decode_tokens"] += len(seg.tokens)
            self._emit(s, out.logits, d, out, absorbs, h)
        if absorbs:  # the drafter takes the round's verified rows in one batch
            self.drafter.absorb_many(absorbs)

    def _emit(
        self,
        s: Stream,
        logits: Any,
        drafts: list[int],
        out: Any,
        absorbs: list[tuple[Stream, Any, int, list[int]]] | None = None,
        first_hash: str | None = None,
    ) -> None:
        """Sample from each row of logits [k, V] in order; keep drafts while they equal the
        sample. Greedy rows left on the device are picked there (`device_greedy`).

        The token sampled from row i sits at absolute position len(tokens) + i, which keys
        its sampling, so drafted and plain decoding draw the same token.
        """
        eos = () if s.req.ignore_eos else self.model.config.eos_token_ids
        stops = set(eos) | set(s.req.stop_ids)
        # a cancel after N tokens lands after token N even when a round accepts drafts
        # past it, so a drafted reply holds the tokens of the plain one
        limit = min(s.req.max_tokens, s.req.cancel_after or s.req.max_tokens)
        emitted: list[int] = []
        picks = device_greedy(logits) if s.req.temperature <= 0 else None
        for i in range(len(logits)):
            if picks is None:
                row = np.asarray(logits[i])
                tok = sample(row, s.req.temperature, s.req.seed, len(s.tokens) + i)
                s.margins.append(margin(row))
            else:
                tok = picks[0][i]
                s.margins.append(picks[1][i])
            emitted.append(tok)
            if tok in stops or s.generated_count + len(emitted) >= limit:
                break
            if i >= len(drafts) or tok != drafts[i]:
                break
        if self._hashes:  # the emitted rows' hashes in one pass
            hashes = row_hashes(logits, len(emitted))
            if first_hash and hashes:
                hashes[0] = first_hash
            s.logit_hashes.extend(hashes)
        if not s.prefilling and s.generated_count:  # a round: the pending row and accepted drafts
            s.fed += len(emitted)
        if drafts:
            s.drafted += len(drafts)
            s.accepted += len(emitted) - 1
        s.tokens.extend(emitted)
        if absorbs is None:
            self.drafter.absorb(s, out, len(emitted) - 1, emitted)
        else:
            absorbs.append((s, out, len(emitted) - 1, emitted))
        if emitted[-1] in stops:
            self._finish(s, "stop")
        elif s.generated_count >= s.req.max_tokens:
            self._finish(s, "length")

    def _finish(self, s: Stream, reason: str, error: str | None = None) -> None:
        s.finish_reason = reason
        s.error = error
        if s.run is not None:
            self.drafter.release(s)
            self.plan.release(s.run, s.tokens[: s.fed])
            s.run = None
        self.finished.append(s)
        self._ended.append(s.sid)
