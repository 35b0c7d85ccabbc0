"""What a client reads beyond the ids and bits: served replies against their reference.

A served reply (``gates/run/served.py``) carries what the openai client got: the joined
``text``, the ``finish_reason`` in OpenAI's words, ``token_sha``, the ``usage`` of a plain
reply and the ``stream_problems`` the client saw in the order and shape of a stream's
chunks. Once ids, error state and bits are equal, ``difference`` holds these to the other
side (``engine run`` of the same request, or another served arm): a server that reports a
length cut as a stop, miscounts usage or sends a chunk after the last one fails here.
"""

from __future__ import annotations

from typing import Any

from gates.judge.diffs import FieldsDiff
from gates.run.reply import Reply

# engine run's finish reasons in OpenAI's words (docs/contract.md: a cancel is a stop)
OPENAI_FINISH = {"stop": "stop", "length": "length", "cancelled": "stop", "error": "error"}


def is_served(reply: Reply) -> bool:
    return bool(reply.served)


def _finish(reply: Reply) -> str | None:
    f = reply.finish_reason
    return OPENAI_FINISH.get(f, f) if f is not None else f


def _usage_problem(reply: Reply, other: Reply) -> tuple[str, Any, Any] | None:
    usage = reply.usage
    if usage is None:
        return None
    n = len(reply.ids)
    prompt = other.prompt_tokens
    want = {
        "prompt_tokens": prompt,
        "completion_tokens": n,
        "total_tokens": prompt + n if isinstance(prompt, int) else None,
    }
    for k, v in want.items():
        if v is not None and usage.get(k) != v:
            return f"usage.{k}", v, usage.get(k)
    return None


def difference(a: Reply, b: Reply) -> tuple[str, Any, Any] | None:
    """(field, a's value, b's value) where two replies with equal ids and bits part in
    what a client reads; None when they agree or neither is served."""
    if not (is_served(a) or is_served(b)):
        return None
    for side, name in ((a, "a"), (b, "b")):
        problems = side.stream_problems
        if problems:
            got = (problems[0], None) if name == "a" else (None, problems[0])
            return ("stream", *got)
    if _finish(a) != _finish(b):
        return "finish_reason", a.finish_reason, b.finish_reason
    for key in ("text", "token_sha"):
        x, y = getattr(a, key), getattr(b, key)
        if x is not None and y is not None and x != y:
            return key, x, y
    for served, other, flip in ((b, a, False), (a, b, True)):
        if is_served(served):
            got = _usage_problem(served, other)
            if got is not None:
                return (got[0], got[2], got[1]) if flip else got
    return None


def line(d: FieldsDiff, an: str, bn: str) -> str:
    """The receipt's words for a ``fields`` difference."""
    if d.field == "stream":
        bad = bn if d.b_value else an
        return f"same tokens and bits, but {bad}'s stream: {d.b_value or d.a_value}"
    return f"same tokens and bits, other {d.field} — {an} {d.a_value!r}, {bn} {d.b_value!r}"
