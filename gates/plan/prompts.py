"""Prompt sets: JSONL files of engine requests, and the request lists an arm sends.

A prompt set line is a request line of the engine contract (docs/contract.md), plus
harness-only keys that are stripped before the engine sees it:

* ``note``: a description shown in receipts;
* ``resume_from``: for a ``prompt_ids`` request, the length of its first turn, so the
  ``resumed`` rule can send ``prompt_ids[:resume_from]`` first. A ``messages`` request
  whose history holds an assistant turn is resumable without it: its first turn is the
  history before the last assistant message.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from gates import BadInput

HARNESS_KEYS = ("note", "resume_from")
PROMPT_KEYS = ("prompt", "prompt_ids", "messages")
TURN1_SUFFIX = "/turn1"


def resolve_path(root: Path, name: str) -> Path:
    """A prompt set name (``quick``) or a path relative to the repository root."""
    p = Path(name)
    if p.suffix != ".jsonl" and "/" not in name:
        p = Path("fixtures/prompts") / f"{name}.jsonl"
    return p if p.is_absolute() else root / p


def load(path: Path) -> list[dict[str, Any]]:
    """Read a prompt set; raise BadInput with FILE:LINE on a bad line."""
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise BadInput(f"{path}: cannot read prompt set: {e.strerror or e}") from None
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise BadInput(f"{where}: not JSON: {e.msg}") from None
        if not isinstance(obj, dict):
            raise BadInput(f"{where}: expected a JSON object")
        rid = obj.get("id")
        if not isinstance(rid, str) or not rid:
            raise BadInput(f"{where}: id: expected a non-empty string, got {rid!r}")
        if rid in seen:
            raise BadInput(f"{where}: id: {rid!r} is used twice")
        seen.add(rid)
        given = [k for k in PROMPT_KEYS if k in obj]
        if len(given) != 1:
            raise BadInput(f"{where}: expected exactly one of prompt, prompt_ids, messages")
        ids = obj.get("prompt_ids")
        if ids is not None and (
            not isinstance(ids, list)
            or not ids
            or not all(isinstance(i, int) and i >= 0 for i in ids)
        ):
            raise BadInput(f"{where}: prompt_ids: expected a non-empty list of token ids")
        rf = obj.get("resume_from")
        if rf is not None and (ids is None or not isinstance(rf, int) or not 0 < rf < len(ids)):
            raise BadInput(f"{where}: resume_from: expected an int inside prompt_ids")
        out.append(obj)
    if not out:
        raise BadInput(f"{path}: the prompt set is empty")
    return out


def turn1(req: dict[str, Any]) -> dict[str, Any] | None:
    """The first turn of a two-turn request, or None if it is not resumable."""
    if "resume_from" in req:
        first = {k: v for k, v in req.items() if k not in HARNESS_KEYS}
        first["prompt_ids"] = req["prompt_ids"][: req["resume_from"]]
    elif "messages" in req:
        msgs = req["messages"]
        last = max(
            (i for i, m in enumerate(msgs) if isinstance(m, dict) and m.get("role") == "assistant"),
            default=-1,
        )
        if last <= 0:
            return None
        first = {k: v for k, v in req.items() if k not in HARNESS_KEYS}
        first["messages"] = msgs[:last]
    else:
        return None
    first["id"] = req["id"] + TURN1_SUFFIX
    return first


def resumable_ids(prompt_set: list[dict[str, Any]]) -> list[str]:
    return [r["id"] for r in prompt_set if turn1(r) is not None]


def requests_for(
    prompt_set: list[dict[str, Any]], max_tokens: int, resumed: bool = False
) -> list[dict[str, Any]]:
    """The request lines of an arm. A resumed arm sends every first turn, then the set."""

    def engine_line(r: dict[str, Any]) -> dict[str, Any]:
        line = {k: v for k, v in r.items() if k not in HARNESS_KEYS}
        line.setdefault("max_tokens", max_tokens)
        return line

    body = [engine_line(r) for r in prompt_set]
    if not resumed:
        return body
    firsts = [engine_line(t) for r in prompt_set if (t := turn1(r)) is not None]
    return firsts + body


def encode(requests: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(r, sort_keys=True).encode() + b"\n" for r in requests)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def describe(req: dict[str, Any], limit: int = 80) -> str:
    """A short human description of a request's prompt."""
    if "prompt" in req:
        text = str(req["prompt"])
    elif "messages" in req:
        text = " | ".join(f"{m.get('role')}: {m.get('content')}" for m in req["messages"])
    else:
        ids = req["prompt_ids"]
        head = ", ".join(map(str, ids[:8]))
        text = f"prompt_ids [{head}{', …' if len(ids) > 8 else ''}] ({len(ids)} ids)"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
