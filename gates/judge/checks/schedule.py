"""Schedule gates: budgets read from an arm's schedule trace, and base against head.

The trace (``engine run --trace``, on the engine's virtual clock) has one row per action
of the round loop: its ``kind`` (short / long prompt step, or a round), the streams that
were ``decoding`` when it was chosen and those ``decoded`` by it, the prompt rows it
``stepped``, the streams that ``arrived`` before it (short or long), the decode
``debt_ms`` at decision time, and the streams that got their ``first_token``. On the
virtual clock the trace is a function of the requests and flags alone, so two runs of
one commit give the same trace and a change of trace between commits is a real change.

Metrics, each the worst case over the arm's streams:

* ``max_decode_gap_rounds``: the most actions in a row that a decoding stream waited
  through without a token (a burst of prompts starving decoders);
* ``short_ttft_rounds``: the most rounds a short prompt waited from its arrival to its
  first token (short prompts stuck behind a long prompt's decode debt);
* ``long_gap_rounds``: the most rounds between two steps of one long prompt;
* ``long_first_step_rounds``: the most rounds a long prompt waited from its arrival to its
  first step (a long prompt never stepped: to the end of the trace) — decode rounds run
  ahead of a due long step make the decode gap *smaller*, and only this shows the cost;
* ``debt_without_decoders``: the largest decode debt (ms) owed while no stream decodes
  (debt that outlived its decoders);
* ``priority_inversions``: prompt steps given to a background prompt while a foreground
  prompt of its class (short or long) waited, before the background one had waited
  AGED_AFTER actions (the engine's aging lets it go first after that);
* ``background_wait_actions``: the most actions a background prompt waited between its
  arrival (or its previous step) and its next step (or the end): aging bounds it, so
  aging that applies later (or never) raises it, and aging that applies sooner shows as
  priority inversions.

Each metric is a worst case over one kind of work, and ``compare`` fails a head that is
worse on *any* of them: a schedule that starves one kind (a long prompt, a background
prompt) cannot pass as better for another (smaller decode gaps, faster short prompts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gates.jsontypes import JsonObject
from gates.judge.results import CheckOutcome
from gates.run.results import ArmRun

AGED_AFTER = 8  # actions a waiting prompt is passed over before it is aged

LABELS = {
    "priority_inversions": "background steps ahead of waiting foreground prompts",
    "max_decode_gap_rounds": "largest decode gap (actions)",
    "short_ttft_rounds": "short prompt's rounds to first token",
    "long_gap_rounds": "rounds between a long prompt's steps",
    "long_first_step_rounds": "long prompt's rounds to its first step",
    "debt_without_decoders": "debt with no decoder (ms)",
    "background_wait_actions": "actions a background prompt waited for a step",
}
ROW_KEYS = ("kind", "decoding", "decoded", "stepped", "waiting")


def _ids(v: Any) -> tuple[str, ...]:
    """Request ids of a list (or the keys of a mapping) the trace wrote; none for null."""
    return tuple(str(x) for x in v) if isinstance(v, (list, dict)) else ()


def _stepped(v: Any) -> dict[str, int]:
    """Rows stepped per prompt, as the trace wrote them (keys request ids); empty for null."""
    return {str(k): int(x) for k, x in v.items()} if isinstance(v, dict) else {}


def _arrived(v: Any) -> dict[str, str]:
    """short | long per arrived prompt, as the trace wrote it; empty for null."""
    return {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else {}


@dataclass(frozen=True)
class TraceRow:
    """One action of the round loop, as ``engine run --trace`` wrote it (module docstring)."""

    kind: str | None = None  # short | long | round
    decoding: tuple[str, ...] = ()
    decoded: tuple[str, ...] = ()
    stepped: dict[str, int] = field(default_factory=dict)  # prompt -> rows stepped
    waiting: tuple[str, ...] = ()
    arrived: dict[str, str] = field(default_factory=dict)  # prompt -> short | long
    debt_ms: float = 0.0
    first_token: tuple[str, ...] = ()
    finished: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, d: JsonObject) -> TraceRow:
        return cls(
            kind=d.get("kind"),
            decoding=_ids(d.get("decoding")),
            decoded=_ids(d.get("decoded")),
            stepped=_stepped(d.get("stepped")),
            waiting=_ids(d.get("waiting")),
            arrived=_arrived(d.get("arrived")),
            debt_ms=float(d.get("debt_ms") or 0.0),
            first_token=_ids(d.get("first_token")),
            finished=_ids(d.get("finished")),
        )


def rows_of(trace: list[Any]) -> list[TraceRow]:
    """A trace as the engine wrote it (a row that is no object is skipped)."""
    return [TraceRow.from_json(r) for r in trace if isinstance(r, dict)]


class _Walk:
    """The metrics, accumulated one trace row at a time."""

    def __init__(self, background: frozenset[str]) -> None:
        self.background = background
        self.cls: dict[str, str] = {}  # prompt -> short | long (as it arrived)
        self.passed: dict[str, int] = {}  # prompt -> actions since it arrived or was stepped
        self.gap: dict[str, int] = {}  # decoder -> actions since its last token
        self.ttft: dict[str, int] = {}  # short prompt -> rounds since it arrived
        self.first: dict[str, int] = {}  # long prompt, not yet stepped -> rounds waited
        self.last_step: dict[str, int] = {}  # long prompt -> rounds since its last step
        self.worst = dict.fromkeys(LABELS, 0.0)

    def _max(self, key: str, value: float) -> None:
        self.worst[key] = max(self.worst[key], value)

    def row(self, row: TraceRow) -> None:
        for rid, kind in row.arrived.items():
            self.cls[rid], self.passed[rid] = kind, 0
            (self.ttft if kind == "short" else self.first)[rid] = 0
        self.worst["priority_inversions"] += self._inversions(row)
        decoding, decoded = row.decoding, set(row.decoded)
        for rid in decoding:
            self.gap[rid] = 0 if rid in decoded else self.gap.get(rid, 0) + 1
            self._max("max_decode_gap_rounds", self.gap[rid])
        if not decoding:
            self._max("debt_without_decoders", round(row.debt_ms, 3))
        for rid in row.first_token:
            if rid in self.ttft:
                self._max("short_ttft_rounds", self.ttft.pop(rid))
        if row.kind == "long":
            for rid in row.stepped:
                self._max("long_first_step_rounds", self.first.pop(rid, 0))
                self._max("long_gap_rounds", self.last_step.get(rid, 0))
                self.last_step[rid] = 0
        for rid in row.finished:
            if rid in self.first:  # ended (cancelled) before its first step
                self._max("long_first_step_rounds", self.first.pop(rid))
            self.ttft.pop(rid, None)
            self.last_step.pop(rid, None)
        if row.kind == "round":
            self._round(decoding, decoded)

    def _round(self, decoding: tuple[str, ...], decoded: set[str]) -> None:
        for pending in (self.ttft, self.first):
            for rid in pending:
                pending[rid] += 1
        for rid in list(self.last_step):
            if rid in decoding or rid in decoded:  # its prompt is done: it decodes now
                del self.last_step[rid]
            else:
                self.last_step[rid] += 1

    def _inversions(self, row: TraceRow) -> int:
        """Background prompts this action stepped while a foreground prompt of their class
        waited, before they were aged; ``passed`` (prompt -> actions waited) moves on."""
        waiting = set(row.waiting)
        n = 0
        for rid in row.stepped:
            if rid in self.background:
                self._max("background_wait_actions", self.passed.get(rid, 0))
                if self.passed.get(rid, 0) < AGED_AFTER:
                    fg = [w for w in waiting if w not in self.background]
                    n += any(self.cls.get(w) == self.cls.get(rid) for w in fg)
            self.passed[rid] = 0
        for rid in waiting:
            self.passed[rid] = self.passed.get(rid, 0) + 1
        return n

    def done(self) -> dict[str, float]:
        for pending, key in (
            (self.ttft, "short_ttft_rounds"),
            (self.first, "long_first_step_rounds"),
        ):
            for waited in pending.values():  # never got there: waited to the end
                self._max(key, waited)
        for rid in self.background & set(self.passed):
            self._max("background_wait_actions", self.passed[rid])
        return {
            k: (round(v, 3) if k == "debt_without_decoders" else int(v))
            for k, v in self.worst.items()
        }


def metrics(trace: list[TraceRow], background: frozenset[str] = frozenset()) -> dict[str, float]:
    """``background``: ids of the background-priority requests."""
    walk = _Walk(background)
    for row in trace:
        walk.row(row)
    return walk.done()


def _trace(result: ArmRun) -> list[TraceRow] | None:
    t = result.trace
    return rows_of(t) if isinstance(t, list) else None


def check(
    result: ArmRun, budgets: dict[str, float], background: frozenset[str] = frozenset()
) -> CheckOutcome:
    """ok None: the engine wrote no trace."""
    trace = _trace(result)
    if trace is None:
        return CheckOutcome(None, {}, ["the engine writes no schedule trace"])
    got = metrics(trace, background)
    values = {k: got[k] for k in budgets}
    problems = [
        f"{LABELS[k]}: {got[k]:g} (budget {limit:g})"
        for k, limit in budgets.items()
        if got[k] > limit
    ]
    return CheckOutcome(not problems, values, problems)


def first_change(a: list[TraceRow], b: list[TraceRow]) -> str | None:
    """Where two traces part, in words (None: the same schedule)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if any(getattr(x, k) != getattr(y, k) for k in ROW_KEYS):
            return f"schedule changed from event {i} (base: {_what(x)}; head: {_what(y)})"
    if len(a) != len(b):
        return f"schedule changed from event {min(len(a), len(b))} ({len(a)} vs {len(b)} events)"
    return None


def _what(row: TraceRow) -> str:
    if row.kind == "round":
        return f"round of {', '.join(row.decoded) or 'none'}"
    stepped = ", ".join(f"{k} {v} rows" for k, v in row.stepped.items())
    return f"{row.kind} step {stepped}"


def compare(
    a: ArmRun,
    b: ArmRun,
    names: tuple[str, ...],
    worse_by: float,
    background: frozenset[str] = frozenset(),
) -> CheckOutcome:
    """Head (b) against base (a): fails when head is worse on a metric by more than
    ``worse_by``; a changed trace is a notice, not a failure."""
    ta, tb = _trace(a), _trace(b)
    if ta is None or tb is None:
        side = "base" if ta is None else "head"
        return CheckOutcome(None, {}, [f"the {side} engine writes no trace"])
    ma, mb = metrics(ta, background), metrics(tb, background)
    values = {k: f"{ma[k]:g} → {mb[k]:g}" for k in names}
    problems = [
        f"{LABELS[k]}: {ma[k]:g} on base, {mb[k]:g} on head (allowed {worse_by:g} worse)"
        for k in names
        if mb[k] > ma[k] + worse_by
    ]
    return CheckOutcome(not problems, values, problems, first_change(ta, tb))
