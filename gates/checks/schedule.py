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
* ``debt_without_decoders``: the largest decode debt (ms) owed while no stream decodes
  (debt that outlived its decoders);
* ``priority_inversions``: prompt steps given to a background prompt while a foreground
  prompt of its class (short or long) waited, before the background one had waited
  AGED_AFTER actions (the engine's aging lets it go first after that).
"""

from __future__ import annotations

from typing import Any

from gates.results import ArmRun, CheckOutcome

AGED_AFTER = 8  # actions a waiting prompt is passed over before it is aged

LABELS = {
    "priority_inversions": "background steps ahead of waiting foreground prompts",
    "max_decode_gap_rounds": "largest decode gap (actions)",
    "short_ttft_rounds": "short prompt's rounds to first token",
    "long_gap_rounds": "rounds between a long prompt's steps",
    "debt_without_decoders": "debt with no decoder (ms)",
}
ROW_KEYS = ("kind", "decoding", "decoded", "stepped", "waiting")


def metrics(
    trace: list[dict[str, Any]], background: frozenset[str] = frozenset()
) -> dict[str, float]:
    """``background``: ids of the background-priority requests."""
    gap: dict[str, int] = {}
    cls: dict[str, str] = {}
    passed: dict[str, int] = {}  # prompt -> actions since it arrived or was last stepped
    inversions = 0
    worst_gap = 0
    arrived_at: dict[str, int] = {}  # short prompt -> rounds seen since it arrived
    worst_ttft = 0
    last_step: dict[str, int] = {}  # long prompt -> rounds since its last step
    worst_long = 0
    debt = 0.0
    for row in trace:
        for rid, kind in (row.get("arrived") or {}).items():
            cls[rid], passed[rid] = kind, 0
            if kind == "short":
                arrived_at[rid] = 0
        inversions += _inversions(row, background, cls, passed)
        decoding, decoded = row.get("decoding") or [], set(row.get("decoded") or [])
        for rid in decoding:
            gap[rid] = 0 if rid in decoded else gap.get(rid, 0) + 1
            worst_gap = max(worst_gap, gap[rid])
        if not decoding:
            debt = max(debt, float(row.get("debt_ms") or 0.0))
        is_round = row.get("kind") == "round"
        for rid in row.get("first_token") or []:
            if rid in arrived_at:
                worst_ttft = max(worst_ttft, arrived_at.pop(rid))
        for rid in row.get("stepped") or {}:
            if row.get("kind") == "long":
                if rid in last_step:
                    worst_long = max(worst_long, last_step[rid])
                last_step[rid] = 0
        for rid in row.get("finished") or {}:
            arrived_at.pop(rid, None)
            last_step.pop(rid, None)
        if is_round:
            for rid in arrived_at:
                arrived_at[rid] += 1
            for rid in list(last_step):
                if rid in decoding or rid in decoded:  # its prompt is done: it decodes now
                    del last_step[rid]
                else:
                    last_step[rid] += 1
    for waited in arrived_at.values():  # never got a token: waited to the end
        worst_ttft = max(worst_ttft, waited)
    return {
        "max_decode_gap_rounds": worst_gap,
        "short_ttft_rounds": worst_ttft,
        "long_gap_rounds": worst_long,
        "debt_without_decoders": round(debt, 3),
        "priority_inversions": inversions,
    }


def _inversions(
    row: dict[str, Any], background: frozenset[str], cls: dict[str, str], passed: dict[str, int]
) -> int:
    """Background prompts this action stepped while a foreground prompt of their class
    waited, before they were aged; ``passed`` (prompt -> actions waited) moves on."""
    waiting = set(row.get("waiting") or [])
    n = 0
    for rid in row.get("stepped") or {}:
        if rid in background and passed.get(rid, 0) < AGED_AFTER:
            ahead = [w for w in waiting if w not in background and cls.get(w) == cls.get(rid)]
            n += bool(ahead)
        passed[rid] = 0
    for rid in waiting:
        passed[rid] = passed.get(rid, 0) + 1
    return n


def _trace(result: ArmRun) -> list[dict[str, Any]] | None:
    t = result.trace
    return t if isinstance(t, list) else None


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


def first_change(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> str | None:
    """Where two traces part, in words (None: the same schedule)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if any(x.get(k) != y.get(k) for k in ROW_KEYS):
            return f"schedule changed from event {i} (base: {_what(x)}; head: {_what(y)})"
    if len(a) != len(b):
        return f"schedule changed from event {min(len(a), len(b))} ({len(a)} vs {len(b)} events)"
    return None


def _what(row: dict[str, Any]) -> str:
    if row.get("kind") == "round":
        return f"round of {', '.join(row.get('decoded') or []) or 'none'}"
    stepped = ", ".join(f"{k} {v} rows" for k, v in (row.get("stepped") or {}).items())
    return f"{row.get('kind')} step {stepped}"


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
