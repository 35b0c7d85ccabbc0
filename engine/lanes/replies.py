"""A finished stream as the reply object of the command-line contract (`engine run` and
`engine generate`), and the fields that `engine serve` writes the same way."""

from __future__ import annotations

import hashlib
from typing import Any

from engine.lanes.stream import Stream

# every reply key; `embedding` comes with the embed kind only, `error` with errors only
REPLY_KEYS = (
    "id", "ids", "text", "token_sha", "finish_reason", "prompt_tokens", "margins", "min_margin",
    "logit_hashes", "drafted", "accepted", "embedding", "error",
)  # fmt: skip


def token_sha(ids: list[int]) -> str:
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:12]


def rounded(margins: list[float]) -> list[float]:
    """Margins as every reply writes them (``engine run`` and ``engine serve`` alike)."""
    return [round(m, 6) for m in margins]


def reply(s: Stream, tokenizer: Any) -> dict[str, Any]:
    ids = s.generated
    out: dict[str, Any] = {
        "id": s.req.id,
        "ids": ids,
        "text": tokenizer.decode(ids) if tokenizer else "",
        "token_sha": token_sha(ids),
        "finish_reason": s.finish_reason,
        "prompt_tokens": s.prompt_len,
        "margins": rounded(s.margins),
        "min_margin": round(min(s.margins), 6) if s.margins else None,
        "logit_hashes": list(s.logit_hashes),
        "drafted": s.drafted,
        "accepted": s.accepted,
    }
    if s.embedding is not None:
        out["embedding"] = [float(x) for x in s.embedding]
    if s.error:
        out["error"] = s.error
    return out
