"""Requests as the engine takes them, parsed from JSON objects with clear errors."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from engine.errors import InputError

KINDS = ("complete", "embed")
MAX_ARRIVAL_S = 3600.0  # an arrival is a test's offset, not a schedule for next week
PRIORITIES = ("foreground", "background")
REQUEST_KEYS = (
    "id", "prompt", "prompt_ids", "messages", "max_tokens", "kind", "stop_ids", "temperature",
    "seed", "priority", "arrival", "draft", "cancel_after", "cancel_after_rows", "ignore_eos",
)  # fmt: skip


@dataclass
class Request:
    id: str
    prompt_ids: list[int]
    max_tokens: int = 16
    kind: str = "complete"
    stop_ids: list[int] = field(default_factory=list)
    temperature: float = 0.0
    seed: int = 0
    priority: str = "foreground"
    arrival: float = 0.0
    draft: bool = True
    cancel_after: int | None = None
    cancel_after_rows: int | None = None
    ignore_eos: bool = False


def _field(obj: dict[str, Any], where: str, name: str, kind: type | tuple, default: Any) -> Any:
    value = obj.get(name, default)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if value is not None and (
        not isinstance(value, kind) or (isinstance(value, bool) and kind not in (bool,))
    ):
        raise InputError(f"{where}: field '{name}' has the wrong type ({value!r})")
    return value


def _prompt_ids(obj: dict[str, Any], where: str, tokenizer: Any) -> list[int]:
    """The prompt as ids: given, or a prompt or messages encoded by the tokenizer."""
    given = [k for k in ("prompt", "prompt_ids", "messages") if k in obj]
    if len(given) != 1:
        raise InputError(f"{where}: give exactly one of 'prompt', 'prompt_ids', 'messages'")
    if "prompt_ids" in obj:
        ids = obj["prompt_ids"]
        if not isinstance(ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids
        ):
            raise InputError(f"{where}: field 'prompt_ids' must be a list of ids >= 0")
    else:
        if tokenizer is None:
            raise InputError(f"{where}: text prompts need a tokenizer")
        if "prompt" in obj:
            text = _field(obj, where, "prompt", str, "")
        else:
            messages = obj["messages"]
            if not isinstance(messages, list) or not all(
                isinstance(m, dict) and "role" in m and "content" in m for m in messages
            ):
                raise InputError(f"{where}: 'messages' must be a list of {{role, content}}")
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        ids = tokenizer.encode(text)
    if not ids:
        raise InputError(f"{where}: the prompt is empty")
    return ids


def parse_request(obj: Any, where: str, tokenizer: Any = None) -> Request:
    """Build a Request from one decoded JSON object; `where` prefixes every error."""
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a JSON object")

    def field_of(name: str, kind: type | tuple, default: Any) -> Any:
        return _field(obj, where, name, kind, default)

    unknown = sorted(k for k in obj if k not in REQUEST_KEYS)
    if unknown:  # a typo (temprature) must not quietly run another request
        raise InputError(
            f"{where}: unknown field '{unknown[0]}' (fields: {', '.join(REQUEST_KEYS)})"
        )
    rid = obj.get("id")
    if not isinstance(rid, (str, int)) or isinstance(rid, bool):
        raise InputError(f"{where}: field 'id' is required (a string)")
    ids = _prompt_ids(obj, where, tokenizer)
    kind = field_of("kind", str, "complete")
    if kind not in KINDS:
        raise InputError(f"{where}: field 'kind' must be one of {', '.join(KINDS)}")
    priority = field_of("priority", str, "foreground")
    if priority not in PRIORITIES:
        raise InputError(f"{where}: field 'priority' must be one of {', '.join(PRIORITIES)}")
    max_tokens = field_of("max_tokens", int, 16)
    if max_tokens < 1:
        raise InputError(f"{where}: field 'max_tokens' must be >= 1")
    stop_ids = field_of("stop_ids", list, [])
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in stop_ids):
        raise InputError(f"{where}: field 'stop_ids' must be a list of ids >= 0")
    temperature = field_of("temperature", float, 0.0)
    if not 0 <= temperature < math.inf:  # NaN fails too
        raise InputError(f"{where}: field 'temperature' must be a finite number >= 0")
    arrival = field_of("arrival", float, 0.0)
    if not 0 <= arrival <= MAX_ARRIVAL_S:
        raise InputError(
            f"{where}: field 'arrival' must be between 0 and {MAX_ARRIVAL_S:g} seconds"
        )
    cancel_after = field_of("cancel_after", int, None)
    if cancel_after is not None and cancel_after < 0:
        raise InputError(f"{where}: field 'cancel_after' must be >= 0")
    cancel_after_rows = field_of("cancel_after_rows", int, None)
    if cancel_after_rows is not None and cancel_after_rows < 1:
        raise InputError(f"{where}: field 'cancel_after_rows' must be >= 1")
    return Request(
        id=str(rid),
        prompt_ids=list(ids),
        max_tokens=max_tokens,
        kind=kind,
        stop_ids=list(stop_ids),
        temperature=temperature,
        seed=field_of("seed", int, 0),
        priority=priority,
        arrival=arrival,
        draft=field_of("draft", bool, True),
        cancel_after=cancel_after,
        cancel_after_rows=cancel_after_rows,
        ignore_eos=field_of("ignore_eos", bool, False),
    )
