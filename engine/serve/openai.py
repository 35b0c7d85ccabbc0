"""OpenAI-compatible request parsing and response shapes (completions and chat)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from engine.errors import InputError
from engine.lanes.replies import rounded, token_sha
from engine.lanes.request import Request, parse_request
from engine.serve import schema
from engine.serve.worker import Done

FINISH = {"stop": "stop", "length": "length", "cancelled": "stop", "error": "error"}

# What the server reads and writes (capabilities' "serve", docs/contract.md version 5).
REQUEST_KEYS = (
    "model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "seed",
    "stream", "stop", "stop_ids", "priority", "draft", "ignore_eos",
)  # fmt: skip
CHOICE_KEYS = ("token_ids", "margins", "logit_hashes")  # per token, in every choice and chunk
REPLY_KEYS = ("token_sha", "drafted", "accepted")  # a reply's top level and a stream's last chunk


@dataclass
class Parsed:
    request: Request
    stream: bool
    stops: list[str]


def to_request(body: Any, chat: bool, tokenizer: Any, model: str) -> Parsed:
    """An engine Request from an OpenAI body (``schema.Invalid`` for a bad one)."""
    given = schema.validate(body, chat, model)
    fields: dict[str, Any] = {"id": uuid.uuid4().hex[:16]}
    if chat:
        fields["messages"] = given["messages"]
    elif isinstance(given["prompt"], list):
        fields["prompt_ids"] = given["prompt"]
    else:
        fields["prompt"] = given["prompt"]
    for key in ("temperature", "seed", "priority", "draft", "stop_ids", "ignore_eos"):
        if key in given:
            fields[key] = given[key]
    fields["max_tokens"] = given.get("max_completion_tokens", given.get("max_tokens", 16))
    stop = given.get("stop", [])
    stops = [x for x in ([stop] if isinstance(stop, str) else stop) if x]
    if stops and tokenizer is None:
        raise schema.Invalid("field 'stop': stop strings need the model's tokenizer", "stop")
    try:
        request = parse_request(fields, "request body", tokenizer)
    except InputError as exc:
        raise schema.Invalid(str(exc), None) from None
    return Parsed(request, bool(given.get("stream", False)), stops)


def final_text(s: Done, tokenizer: Any) -> str:
    if s.text is not None:
        return s.text
    return tokenizer.decode(s.generated) if tokenizer else ""


def completion(s: Done, tokenizer: Any, chat: bool, model: str) -> dict[str, Any]:
    text = final_text(s, tokenizer)
    choice: dict[str, Any] = {"index": 0, "finish_reason": FINISH[s.finish_reason]}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    choice["token_ids"] = s.generated
    choice["margins"] = rounded(s.margins)
    choice["logit_hashes"] = list(s.logit_hashes)
    out = {
        "id": ("chatcmpl-" if chat else "cmpl-") + s.req.id,
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": s.prompt_len,
            "completion_tokens": len(s.generated),
            "total_tokens": s.prompt_len + len(s.generated),
        },
        "token_sha": token_sha(s.generated),
        "drafted": s.drafted,
        "accepted": s.accepted,
    }
    if s.error:  # a request the engine could not serve: the OpenAI error shape
        return {
            "error": {
                "message": s.error,
                "type": "invalid_request_error",
                "param": "max_tokens" if s.error_code == "context_length_exceeded" else None,
                "code": s.error_code,
            }
        }
    return out


def chunk(
    req_id: str,
    delta: str,
    bits: Any,
    chat: bool,
    model: str,
    end: Done | None = None,
) -> dict[str, Any]:
    """One SSE event: the new tokens (``bits``: a worker Chunk, or None for the last event)
    with their margins and logit hashes; the last event (``end``: the finished stream)
    carries the finish reason, token_sha, drafted and accepted."""
    choice: dict[str, Any] = {
        "index": 0,
        "finish_reason": FINISH[end.finish_reason] if end is not None else None,
        "token_ids": list(bits.ids) if bits is not None else [],
        "margins": rounded(bits.margins) if bits is not None else [],
        "logit_hashes": list(bits.logit_hashes) if bits is not None else [],
    }
    if chat:
        choice["delta"] = {"content": delta}
    else:
        choice["text"] = delta
    out: dict[str, Any] = {
        "id": ("chatcmpl-" if chat else "cmpl-") + req_id,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
    }
    if end is not None:
        out.update(token_sha=token_sha(end.generated), drafted=end.drafted, accepted=end.accepted)
    return out
