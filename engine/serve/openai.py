"""OpenAI-compatible request parsing and response shapes (completions and chat)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from engine.cli.common import token_sha
from engine.cli.replies import rounded
from engine.errors import InputError
from engine.lanes.request import Request, parse_request
from engine.lanes.stream import Stream

FINISH = {"stop": "stop", "length": "length", "cancelled": "stop", "error": "error"}

# What the server reads and writes (capabilities' "serve", docs/contract.md version 3).
REQUEST_KEYS = (
    "model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "seed",
    "stream", "stop_ids", "priority", "draft", "ignore_eos",
)  # fmt: skip
CHOICE_KEYS = ("token_ids", "margins", "logit_hashes")  # per token, in every choice and chunk
REPLY_KEYS = ("token_sha", "drafted", "accepted")  # a reply's top level and a stream's last chunk


class Unsupported(InputError):
    """An OpenAI field this server does not implement: refused, never ignored."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def _refuse_unsupported(body: dict[str, Any]) -> None:
    if body.get("n", 1) not in (1, None):
        raise Unsupported("n", "field 'n': only n = 1 is supported")
    if body.get("best_of", 1) not in (1, None):
        raise Unsupported("best_of", "field 'best_of': only 1 is supported")
    for key in ("logprobs", "top_logprobs", "echo", "suffix", "tools", "functions", "logit_bias"):
        if body.get(key) not in (None, False, 0):
            raise Unsupported(key, f"field '{key}' is not supported by this server")
    if body.get("stop") not in (None, [], ""):
        raise Unsupported("stop", "field 'stop': stop strings are not supported; use stop_ids")


def to_request(body: Any, chat: bool, tokenizer: Any) -> tuple[Request, bool]:
    """An engine Request from an OpenAI body; also whether the client wants a stream."""
    if not isinstance(body, dict):
        raise InputError("request body: expected a JSON object")
    _refuse_unsupported(body)
    fields: dict[str, Any] = {"id": uuid.uuid4().hex[:16]}
    if chat:
        fields["messages"] = body.get("messages")
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and all(isinstance(i, int) for i in prompt):
            fields["prompt_ids"] = prompt
        elif isinstance(prompt, str):
            fields["prompt"] = prompt
        else:
            raise InputError("field 'prompt': expected a string or a list of token ids")
    for key in ("temperature", "seed", "priority", "draft", "stop_ids", "ignore_eos"):
        if key in body and body[key] is not None:
            fields[key] = body[key]
    limit = body.get("max_completion_tokens", body.get("max_tokens", 16))
    fields["max_tokens"] = limit
    stream = bool(body.get("stream", False))
    return parse_request(fields, "request body", tokenizer), stream


def completion(s: Stream, tokenizer: Any, chat: bool, model: str) -> dict[str, Any]:
    text = tokenizer.decode(s.generated) if tokenizer else ""
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
    end: Stream | None = None,
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
