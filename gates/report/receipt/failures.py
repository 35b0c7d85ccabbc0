"""The receipt's failing gates: per gate its first failing entry in full (one line per
differing request: where the tokens, the bits or what a client reads part), the others one
line each."""

from __future__ import annotations

import json
from dataclasses import dataclass

from gates.judge.checks import client
from gates.judge.checks.equality import describe_margin
from gates.judge.diffs import BitsDiff, Diff, FieldsDiff, Missing
from gates.judge.results import Comparison
from gates.plan import prompts as prompts_mod
from gates.report.view import Manifest
from gates.run.results import Status

DIFFS_SHOWN = 3  # differing requests shown in full per failing gate; the manifest has more


def _fmt_ids(ids: tuple[int, ...] | None) -> str:
    return "[" + ", ".join(map(str, ids or [])) + "]"


@dataclass(frozen=True)
class Failure:
    """A failing gate as the receipt shows it: its first failing entry in full (``diffs``:
    one line per differing request, ``more`` not shown), the others one line each."""

    gate: str
    where: str
    a_name: str | None
    b_name: str | None
    count: str  # matched/total of a comparison; empty for a check
    reason: str
    diffs: list[str]
    more: int
    others: list[str]


def failure_lines(man: Manifest) -> list[Failure]:
    """Per failing gate: its first failing comparison in full, the others in one line each."""
    out = []
    for g in man.gates:
        failing = [e for e in g.entries if e.status == Status.FAIL]
        if not failing:
            continue
        e = failing[0]
        shown = e.diffs[:DIFFS_SHOWN]
        out.append(
            Failure(
                gate=g.name,
                where=e.where,
                a_name=e.a_name,
                b_name=e.b_name,
                count=f"{e.matched}/{e.total}" if e.is_pair else "",
                reason=e.reason,
                diffs=[_diff_line(d, e.a_name or "", e.b_name or "") for d in shown],
                more=max(0, e.n_diffs - DIFFS_SHOWN),
                others=[_other_line(o) for o in failing[1:]],
            )
        )
    return out


def _other_line(o: Comparison) -> str:
    if not o.is_pair:
        return f"`{o.where}`: {o.reason}"
    d = o.diffs[0] if o.diffs else None
    kind = d.KIND if d is not None else None
    what = "same tokens, other bits at token" if kind == "bits" else "from index"
    if isinstance(d, FieldsDiff):
        what = f"same tokens and bits, other {d.field}"
    at = f" {d.index if d is not None else None}" if kind != "fields" else ""
    rid = d.id if d is not None else None
    return (
        f"`{o.where}` ({o.a_name} vs {o.b_name}) {o.matched}/{o.total}; first: `{rid}` {what}{at}"
    )


def _diff_line(d: Diff, an: str, bn: str) -> str:
    prompt = prompts_mod.describe(d.request) if d.request is not None else "?"
    n = d.prompt_tokens if not isinstance(d, Missing) else None
    rows = f"{n} row{'s' * (n != 1)}, " if n is not None else ""
    head = f"prompt `{d.id}` ({rows}{prompt})"
    if isinstance(d, Missing):
        return f"{head}: no reply from {bn}"
    if isinstance(d, BitsDiff):
        return f"{head}: {bits_line(d, an, bn)}"
    if isinstance(d, FieldsDiff):
        return f"{head}: {client.line(d, an, bn)}"
    if d.error:
        err_a, err_b = d.error
        return f"{head}: error on one side only — {an}: {err_a!r}; {bn}: {err_b!r}"
    i = d.index

    def txt(t: str | None) -> str:
        return json.dumps(t, ensure_ascii=False) if t is not None else "(no text)"

    whole = " (whole replies)" if d.a_ids is not None and d.common_text is None else ""
    margin = ""
    if d.a_margin is not None or d.b_margin is not None:

        def m(v: float | None) -> str:
            return "?" if v is None else f"{v:.4g}"

        margin = (
            f"; margin at {i}: {an} {m(d.a_margin)}, {bn} {m(d.b_margin)}"
            f" ({describe_margin(d.a_margin, d.b_margin, d.median_margin)})"
        )
    lens = ""
    if d.a_len != d.b_len:
        lens = f"; lengths {an} {d.a_len} ({d.a_finish}), {bn} {d.b_len} ({d.b_finish})"
    return (
        f"{head}: tokens differ from index {i} — {an} {txt(d.a_text)} "
        f"{_fmt_ids(d.a_ids)}, {bn} {txt(d.b_text)} {_fmt_ids(d.b_ids)}"
        f"{whole}{margin}{lens}"
    )


def bits_line(d: BitsDiff, an: str, bn: str) -> str:
    """A "same tokens, other bits" difference, at the first token where the bits part."""
    field_name, i = d.bits_of, d.index
    if field_name == "embedding":
        return f"same tokens, other bits — the embeddings part at element {i}"
    ids = _fmt_ids(d.a_ids)
    text = f" {json.dumps(d.a_text, ensure_ascii=False)}" if d.a_text else ""
    out = f"same tokens, other bits — {field_name} part at token {i}{text} {ids}"
    if d.a_hash or d.b_hash:
        out += f"; logits hash {an} `{d.a_hash}`, {bn} `{d.b_hash}`"
    am, bm = d.a_margin, d.b_margin
    if am is not None or bm is not None:
        out += f"; margin {an} {am!r}, {bn} {bm!r}"
    return out
