"""One request of a prompt set, parsed and checked once where the set is read
(gates/plan/prompts.py), typed from there on.

A ``PromptRequest`` keeps its line as JSON (``to_json``: the object as read, its keys in
their order), because two files write it out as it is: the engine's request file (its
bytes are hashed into the result store's keys) and the manifest (a differing request's
``request``). What the harness reads of it is a typed attribute: the id, the harness-only
keys (``note``, ``resume_from``), which prompt key it has, and the engine fields that the
gates, the served client and the checks look at (``max_tokens``, ``kind``, ``arrival``,
``cancel_after``, ``priority``). The other engine fields travel in the JSON only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gates import BadInput
from gates.jsontypes import JsonObject

HARNESS_KEYS = ("note", "resume_from")
PROMPT_KEYS = ("prompt", "prompt_ids", "messages")
STRINGS = ("prompt", "note", "kind", "priority")  # each a string where the line has it
INTS = ("max_tokens", "cancel_after")  # each an int where the line has it


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True, slots=True)
class PromptRequest:
    """One request line: its JSON (``line``) and the typed fields read from it. Made by
    ``from_json`` only, so that the two always agree."""

    id: str
    line: str  # the request as JSON, its keys in the order given: what to_json gives back
    keys: tuple[str, ...]  # the keys of the line, in order
    prompt_key: str  # which of PROMPT_KEYS holds the prompt
    prompt: str | None = None
    prompt_ids: tuple[int, ...] | None = None
    note: str | None = None
    resume_from: int | None = None
    max_tokens: int | None = None  # None: the line names none (the arm's is sent)
    kind: str = "complete"
    arrival: float = 0.0
    cancel_after: int | None = None
    priority: str | None = None

    @property
    def is_chat(self) -> bool:
        return self.prompt_key == "messages"

    def to_json(self) -> JsonObject:
        """The request line as read (a fresh object each time)."""
        return json.loads(self.line)

    def edited(self, drop: tuple[str, ...] = (), **changes: Any) -> PromptRequest:
        """A copy without the keys ``drop`` and with ``changes`` (a key it has keeps its
        place; a new one goes last), checked like a line of a prompt set."""
        body = {k: v for k, v in self.to_json().items() if k not in drop}
        body.update(changes)
        return PromptRequest.from_json(body)

    @classmethod
    def from_json(cls, d: Any, where: str = "request") -> PromptRequest:
        """A request from its JSON object; BadInput, prefixed with ``where``, for a line
        that is no request (``where``: FILE:LINE of a prompt set)."""
        if not isinstance(d, dict):
            raise BadInput(f"{where}: expected a JSON object")
        rid = d.get("id")
        if not isinstance(rid, str) or not rid:
            raise BadInput(f"{where}: id: expected a non-empty string, got {rid!r}")
        given = [k for k in PROMPT_KEYS if k in d]
        if len(given) != 1:
            raise BadInput(f"{where}: expected exactly one of prompt, prompt_ids, messages")
        ids = d.get("prompt_ids")
        if ids is not None and (
            not isinstance(ids, list)
            or not ids
            or not all(isinstance(i, int) and i >= 0 for i in ids)
        ):
            raise BadInput(f"{where}: prompt_ids: expected a non-empty list of token ids")
        rf = d.get("resume_from")
        if rf is not None and (ids is None or not isinstance(rf, int) or not 0 < rf < len(ids)):
            raise BadInput(f"{where}: resume_from: expected an int inside prompt_ids")
        _check_fields(d, where)
        return cls(
            id=rid,
            line=json.dumps(d),
            keys=tuple(d),
            prompt_key=given[0],
            prompt=d.get("prompt"),
            prompt_ids=tuple(ids) if ids is not None else None,
            note=d.get("note"),
            resume_from=rf,
            max_tokens=d.get("max_tokens"),
            kind=d.get("kind", "complete"),
            arrival=float(d.get("arrival", 0.0)),
            cancel_after=d.get("cancel_after"),
            priority=d.get("priority"),
        )


def _check_fields(d: Mapping[str, object], where: str) -> None:
    """The fields read as typed attributes hold their type (docs/contract.md)."""
    for k in STRINGS:
        if k in d and not isinstance(d[k], str):
            raise BadInput(f"{where}: {k}: expected a string, got {d[k]!r}")
    for k in INTS:
        if k in d and not _is_int(d[k]):
            raise BadInput(f"{where}: {k}: expected an int, got {d[k]!r}")
    arrival = d.get("arrival", 0.0)
    if not isinstance(arrival, int | float) or isinstance(arrival, bool):
        raise BadInput(f"{where}: arrival: expected a number of seconds, got {arrival!r}")
    msgs = d.get("messages", [])
    if not isinstance(msgs, list) or not all(isinstance(m, dict) for m in msgs):
        raise BadInput(f"{where}: messages: expected a list of objects")
