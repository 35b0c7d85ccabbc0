"""The receipt's failing gates: per gate its first failing entry in full (one line per
differing request: where the tokens, the bits or what a client reads part), the others one
line each."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gates.judge.checks import client
from gates.judge.checks.equality import describe_margin
from gates.judge.results import Comparison, gates_of
from gates.plan import prompts as prompts_mod
from gates.plan.request import PromptRequest
from gates.run.results import Status

DIFFS_SHOWN = 3  # differing requests shown in full per failing gate; the manifest has more


def _fmt_ids(ids: list[int] | None) -> str:
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


def failure_lines(man: dict[str, Any]) -> list[Failure]:
    """Per failing gate: its first failing comparison in full, the others in one line each."""
    out = []
    for g in gates_of(man):
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
    d = (o.diffs or [{}])[0]
    what = "same tokens, other bits at token" if d.get("kind") == "bits" else "from index"
    if d.get("kind") == "fields":
        what = f"same tokens and bits, other {d.get('field')}"
    at = f" {d.get('index')}" if d.get("kind") != "fields" else ""
    return (
        f"`{o.where}` ({o.a_name} vs {o.b_name}) {o.matched}/{o.total}; "
        f"first: `{d.get('id')}` {what}{at}"
    )


def _diff_line(d: dict[str, Any], an: str, bn: str) -> str:
    req = d.get("request")
    prompt = prompts_mod.describe(PromptRequest.from_json(req)) if req else "?"
    n = d.get("prompt_tokens")
    rows = f"{n} row{'s' * (n != 1)}, " if n is not None else ""
    head = f"prompt `{d['id']}` ({rows}{prompt})"
    if d.get("missing"):
        return f"{head}: no reply from {bn}"
    if d.get("kind") == "bits":
        return f"{head}: {bits_line(d, an, bn)}"
    if d.get("kind") == "fields":
        return f"{head}: {client.line(d, an, bn)}"
    if d.get("error"):
        err = d["error"]
        return f"{head}: error on one side only — {an}: {err.get('a')!r}; {bn}: {err.get('b')!r}"
    i = d.get("index")

    def txt(key: str) -> str:
        t = d.get(key)
        return json.dumps(t, ensure_ascii=False) if t is not None else "(no text)"

    whole = " (whole replies)" if d.get("text_is_whole_reply") else ""
    margin = ""
    if d.get("a_margin") is not None or d.get("b_margin") is not None:

        def m(v: float | None) -> str:
            return "?" if v is None else f"{v:.4g}"

        margin = (
            f"; margin at {i}: {an} {m(d.get('a_margin'))}, {bn} {m(d.get('b_margin'))}"
            f" ({describe_margin(d.get('a_margin'), d.get('b_margin'), d.get('median_margin'))})"
        )
    lens = ""
    if d.get("a_len") != d.get("b_len"):
        lens = (
            f"; lengths {an} {d.get('a_len')} ({d.get('a_finish')}), "
            f"{bn} {d.get('b_len')} ({d.get('b_finish')})"
        )
    return (
        f"{head}: tokens differ from index {i} — {an} {txt('a_text')} "
        f"{_fmt_ids(d.get('a_ids'))}, {bn} {txt('b_text')} {_fmt_ids(d.get('b_ids'))}"
        f"{whole}{margin}{lens}"
    )


def bits_line(d: dict[str, Any], an: str, bn: str) -> str:
    """A "same tokens, other bits" difference, at the first token where the bits part."""
    field_name, i = d.get("bits_of"), d.get("index")
    if field_name == "embedding":
        return f"same tokens, other bits — the embeddings part at element {i}"
    ids = _fmt_ids(d.get("a_ids"))
    text = f" {json.dumps(d['a_text'], ensure_ascii=False)}" if d.get("a_text") else ""
    out = f"same tokens, other bits — {field_name} part at token {i}{text} {ids}"
    if d.get("a_hash") or d.get("b_hash"):
        out += f"; logits hash {an} `{d.get('a_hash')}`, {bn} `{d.get('b_hash')}`"
    am, bm = d.get("a_margin"), d.get("b_margin")
    if am is not None or bm is not None:
        out += f"; margin {an} {am!r}, {bn} {bm!r}"
    return out
