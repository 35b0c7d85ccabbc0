"""The request schema of the served API: every field a body may carry, with its type and
the values this server can honour. Types are strict (``"stream": "false"`` is a string,
not a bool; ``true`` is not an int); a field outside the schema, or an OpenAI field set to
a value the server does not implement, is refused (``Invalid``), never ignored. ``null``
means "not given", as in OpenAI's API."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from engine.lanes.request import PRIORITIES

MAX_STOPS = 4  # OpenAI's limit on stop strings


class Invalid(Exception):
    """A body the schema refuses: the HTTP status, OpenAI's error fields."""

    def __init__(self, message: str, param: str | None, status: int = 400, code: Any = None):
        super().__init__(message)
        self.message, self.param, self.status, self.code = message, param, status, code


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _num(v: Any) -> bool:
    return (_int(v) or isinstance(v, float)) and math.isfinite(v)


def _ids(v: Any) -> bool:
    return isinstance(v, list) and all(_int(i) and i >= 0 for i in v)


def _stop(v: Any) -> bool:
    if isinstance(v, str):
        return True  # "" is no stop string
    strings = isinstance(v, list) and all(isinstance(s, str) and s for s in v)
    return strings and len(v) <= MAX_STOPS


def _messages(v: Any) -> bool:
    def ok(m: Any) -> bool:
        return (
            isinstance(m, dict)
            and set(m) <= {"role", "content", "name"}
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
        )

    return isinstance(v, list) and len(v) > 0 and all(map(ok, v))


Check = tuple[Callable[[Any], bool], str]
SAMPLING: dict[str, Check] = {
    "model": (lambda v: isinstance(v, str), "a string"),
    "stream": (lambda v: isinstance(v, bool), "a boolean (true or false)"),
    "max_tokens": (lambda v: _int(v) and v >= 1, "an integer >= 1"),
    "temperature": (lambda v: _num(v) and v >= 0, "a finite number >= 0"),
    "seed": (_int, "an integer"),
    "stop": (_stop, f"a string or a list of at most {MAX_STOPS} non-empty strings"),
    "max_completion_tokens": (lambda v: _int(v) and v >= 1, "an integer >= 1"),
    "stop_ids": (_ids, "a list of token ids >= 0"),
    "priority": (lambda v: v in PRIORITIES, f"one of {', '.join(PRIORITIES)}"),
    "draft": (lambda v: isinstance(v, bool), "a boolean"),
    "ignore_eos": (lambda v: isinstance(v, bool), "a boolean"),
    "user": (lambda v: isinstance(v, str), "a string"),
    # OpenAI fields honoured only at their neutral value
    "n": (lambda v: v == 1 and _int(v), "1 (only one choice is supported)"),
    "top_p": (lambda v: _num(v) and v == 1, "1 (nucleus sampling is not supported)"),
    "frequency_penalty": (lambda v: _num(v) and v == 0, "0 (penalties are not supported)"),
    "presence_penalty": (lambda v: _num(v) and v == 0, "0 (penalties are not supported)"),
    "logit_bias": (lambda v: v == {}, "empty (logit_bias is not supported)"),
}
COMPLETIONS: dict[str, Check] = {
    **SAMPLING,
    "prompt": (
        lambda v: isinstance(v, str) or (_ids(v) and len(v) > 0),
        "a string or a list of token ids",
    ),
    "best_of": (lambda v: v == 1 and _int(v), "1 (best_of is not supported)"),
    "logprobs": (lambda v: v is False or (v == 0 and _int(v)), "0 (logprobs are not supported)"),
    "echo": (lambda v: v is False, "false (echo is not supported)"),
    "suffix": (lambda v: v == "", "empty (suffix is not supported)"),
}
CHAT: dict[str, Check] = {
    **SAMPLING,
    "messages": (_messages, "a non-empty list of {role, content} objects with string values"),
    "logprobs": (lambda v: v is False, "false (logprobs are not supported)"),
    "top_logprobs": (lambda v: v == 0 and _int(v), "0 (logprobs are not supported)"),
    "tools": (lambda v: v == [], "empty (tools are not supported)"),
    "functions": (lambda v: v == [], "empty (functions are not supported)"),
    "tool_choice": (lambda v: v == "none", '"none" (tools are not supported)'),
}
REQUIRED = {"completions": "prompt", "chat": "messages"}


def validate(body: Any, chat: bool, model: str) -> dict[str, Any]:
    """The body's given fields (nulls dropped), or ``Invalid`` naming the first bad one."""
    if not isinstance(body, dict):
        raise Invalid("request body: expected a JSON object", None)
    schema = CHAT if chat else COMPLETIONS
    route = "chat" if chat else "completions"
    for key in body:
        if key not in schema:
            raise Invalid(f"Unrecognized request argument supplied: {key}", key)
    out = {k: v for k, v in body.items() if v is not None}
    for key, value in out.items():
        check, want = schema[key]
        if not check(value):
            raise Invalid(f"field '{key}': expected {want}, got {_shown(value)}", key)
    need = REQUIRED[route]
    if need not in out:
        raise Invalid(f"field '{need}' is required", need)
    if "model" in out and out["model"] != model:
        message = f"The model `{out['model'][:200]}` does not exist (this server serves `{model}`)"
        raise Invalid(message, "model", 404, "model_not_found")
    return out


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
