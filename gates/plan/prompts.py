"""Prompt sets: JSONL files of engine requests, and the request lists an arm sends.

A prompt set line is a request line of the engine contract (docs/contract.md), plus
harness-only keys that are stripped before the engine sees it:

* ``note``: a description shown in receipts;
* ``resume_from``: for a ``prompt_ids`` request, the length of its first turn, so the
  ``resumed`` rule can send ``prompt_ids[:resume_from]`` first. A ``messages`` request
  whose history holds an assistant turn is resumable without it: its first turn is the
  history before the last assistant message.

``load`` checks each line once and makes it a ``PromptRequest`` (gates/plan/request.py);
from there on the harness reads typed fields, and the JSON is written out only in the
engine's request file (``encode``) and the manifest.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from gates import BadInput
from gates.plan.request import HARNESS_KEYS, PromptRequest

TURN1_SUFFIX = "/turn1"


def resolve_path(root: Path, name: str) -> Path:
    """A prompt set name (``quick``) or a path relative to the repository root."""
    p = Path(name)
    if p.suffix != ".jsonl" and "/" not in name:
        p = Path("fixtures/prompts") / f"{name}.jsonl"
    return p if p.is_absolute() else root / p


def load(path: Path) -> list[PromptRequest]:
    """Read a prompt set; raise BadInput with FILE:LINE on a bad line."""
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise BadInput(f"{path}: cannot read prompt set: {e.strerror or e}") from None
    out: list[PromptRequest] = []
    seen: set[str] = set()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise BadInput(f"{where}: not JSON: {e.msg}") from None
        req = PromptRequest.from_json(obj, where)
        if req.id in seen:
            raise BadInput(f"{where}: id: {req.id!r} is used twice")
        seen.add(req.id)
        out.append(req)
    if not out:
        raise BadInput(f"{path}: the prompt set is empty")
    return out


def turn1(req: PromptRequest) -> PromptRequest | None:
    """The first turn of a two-turn request, or None if it is not resumable."""
    first_id = req.id + TURN1_SUFFIX
    if req.resume_from is not None and req.prompt_ids is not None:
        ids = list(req.prompt_ids[: req.resume_from])
        return req.edited(HARNESS_KEYS, prompt_ids=ids, id=first_id)
    if not req.is_chat:
        return None
    msgs = req.to_json()["messages"]
    last = max((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), default=-1)
    if last <= 0:
        return None
    return req.edited(HARNESS_KEYS, messages=msgs[:last], id=first_id)


def resumable_ids(prompt_set: list[PromptRequest]) -> list[str]:
    return [r.id for r in prompt_set if turn1(r) is not None]


def requests_for(
    prompt_set: list[PromptRequest], max_tokens: int, resumed: bool = False
) -> list[PromptRequest]:
    """The request lines of an arm. A resumed arm sends every first turn, then the set."""

    def engine_line(r: PromptRequest) -> PromptRequest:
        given = r.max_tokens is not None
        return r.edited(HARNESS_KEYS) if given else r.edited(HARNESS_KEYS, max_tokens=max_tokens)

    body = [engine_line(r) for r in prompt_set]
    if not resumed:
        return body
    firsts = [engine_line(t) for r in prompt_set if (t := turn1(r)) is not None]
    return firsts + body


def encode(requests: list[PromptRequest]) -> bytes:
    """The engine's request file: one line per request, keys sorted (hashed into keys)."""
    return b"".join(json.dumps(r.to_json(), sort_keys=True).encode() + b"\n" for r in requests)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def describe(req: PromptRequest, limit: int = 80) -> str:
    """A short human description of a request's prompt."""
    if req.prompt is not None:
        text = req.prompt
    elif req.is_chat:
        msgs = req.to_json()["messages"]
        text = " | ".join(f"{m.get('role')}: {m.get('content')}" for m in msgs)
    else:
        ids = req.prompt_ids or ()
        head = ", ".join(map(str, ids[:8]))
        text = f"prompt_ids [{head}{', …' if len(ids) > 8 else ''}] ({len(ids)} ids)"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
