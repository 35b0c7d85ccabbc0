"""What an equality of two arms records per request, typed: one differing request (the
tokens part, the bits behind equal tokens part, what a client reads parts, or ``b`` has no
reply) and a request left out of the count (``Skipped``).

Each ``to_json`` writes the record as the manifest has always held it (the same keys, in
the same order, absent where they were absent), and ``from_json`` reads one back, so a
manifest's bytes and the receipt rendered from it do not change with the types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from gates.jsontypes import JsonObject
from gates.plan.request import PromptRequest


def _request(got: Any) -> PromptRequest | None:
    """A record's ``request`` (the line the engine was sent), read; None where it is null."""
    return PromptRequest.from_json(got) if got is not None else None


@dataclass(frozen=True, slots=True)
class Skipped:
    """A request left out of a comparison's count, and why (dropped, or both arms erred)."""

    id: str
    reason: str

    def to_json(self) -> JsonObject:
        return {"id": self.id, "reason": self.reason}

    @classmethod
    def from_json(cls, d: JsonObject) -> Skipped:
        return cls(str(d["id"]), str(d["reason"]))


@dataclass(frozen=True, slots=True)
class TokensDiff:
    """The ids (or the error state) part at ``index`` (None: the ids are equal, only one
    side is an error). ``a_ids`` to ``b_text`` are the window from ``index``, None when
    there is none; ``common_text`` is None where no decoder gave the texts (they are the
    whole replies then)."""

    KIND: ClassVar[str] = "tokens"

    id: str
    prompt_tokens: int | None
    request: PromptRequest | None
    a_len: int
    b_len: int
    a_finish: str | None
    b_finish: str | None
    index: int | None
    error: tuple[str | None, str | None] | None = None  # (a's, b's): one side erred
    a_ids: tuple[int, ...] | None = None
    b_ids: tuple[int, ...] | None = None
    a_margin: float | None = None
    b_margin: float | None = None
    median_margin: float | None = None
    a_text: str | None = None
    b_text: str | None = None
    common_text: str | None = None

    def to_json(self) -> JsonObject:
        req = self.request.to_json() if self.request is not None else None
        out = {"id": self.id, "kind": self.KIND, "prompt_tokens": self.prompt_tokens}
        out |= {"request": req, "a_len": self.a_len, "b_len": self.b_len}
        out |= {"a_finish": self.a_finish, "b_finish": self.b_finish}
        if self.error is not None:
            out["error"] = {"a": self.error[0], "b": self.error[1]}
        out["index"] = self.index
        if self.a_ids is None:
            return out
        out |= {"a_ids": list(self.a_ids), "b_ids": list(self.b_ids or ())}
        out |= {"a_margin": self.a_margin, "b_margin": self.b_margin}
        out |= {"median_margin": self.median_margin, "a_text": self.a_text, "b_text": self.b_text}
        if self.common_text is None:
            out["text_is_whole_reply"] = True
        else:
            out["common_text"] = self.common_text
        return out

    @classmethod
    def from_json(cls, d: JsonObject) -> TokensDiff:
        err, window = d.get("error"), "a_ids" in d
        return cls(
            id=d["id"],
            prompt_tokens=d.get("prompt_tokens"),
            request=_request(d.get("request")),
            a_len=d.get("a_len", 0),
            b_len=d.get("b_len", 0),
            a_finish=d.get("a_finish"),
            b_finish=d.get("b_finish"),
            index=d.get("index"),
            error=(err.get("a"), err.get("b")) if isinstance(err, dict) else None,
            a_ids=tuple(d["a_ids"] or ()) if window else None,
            b_ids=tuple(d.get("b_ids") or ()) if window else None,
            a_margin=d.get("a_margin"),
            b_margin=d.get("b_margin"),
            median_margin=d.get("median_margin"),
            a_text=d.get("a_text"),
            b_text=d.get("b_text"),
            common_text=None if d.get("text_is_whole_reply") else d.get("common_text"),
        )


@dataclass(frozen=True, slots=True)
class BitsDiff:
    """Equal ids whose bits (``bits_of``: logit_hashes, margins, embedding) part at
    ``index``. ``a_ids`` is the window from that token, None where there is no token to
    show (an embedding, or no index); then the margins and hashes are not recorded either.
    The hashes are recorded for ``logit_hashes`` only, ``a_text`` where a decoder gave it."""

    KIND: ClassVar[str] = "bits"

    id: str
    bits_of: str
    prompt_tokens: int | None
    request: PromptRequest | None
    index: int | None
    a_len: int
    b_len: int
    a_finish: str | None
    b_finish: str | None
    a_ids: tuple[int, ...] | None = None
    a_margin: float | None = None
    b_margin: float | None = None
    a_hash: str | None = None
    b_hash: str | None = None
    a_text: str | None = None

    def to_json(self) -> JsonObject:
        req = self.request.to_json() if self.request is not None else None
        out = {"id": self.id, "kind": self.KIND, "bits_of": self.bits_of}
        out |= {"prompt_tokens": self.prompt_tokens, "request": req, "index": self.index}
        out |= {"a_len": self.a_len, "b_len": self.b_len}
        out |= {"a_finish": self.a_finish, "b_finish": self.b_finish}
        if self.a_ids is None:
            return out
        out |= {"a_margin": self.a_margin, "b_margin": self.b_margin}
        if self.bits_of == "logit_hashes":
            out |= {"a_hash": self.a_hash, "b_hash": self.b_hash}
        out["a_ids"] = list(self.a_ids)
        if self.a_text is not None:
            out["a_text"] = self.a_text
        return out

    @classmethod
    def from_json(cls, d: JsonObject) -> BitsDiff:
        return cls(
            id=d["id"],
            bits_of=d.get("bits_of", ""),
            prompt_tokens=d.get("prompt_tokens"),
            request=_request(d.get("request")),
            index=d.get("index"),
            a_len=d.get("a_len", 0),
            b_len=d.get("b_len", 0),
            a_finish=d.get("a_finish"),
            b_finish=d.get("b_finish"),
            a_ids=tuple(d["a_ids"] or ()) if "a_ids" in d else None,
            a_margin=d.get("a_margin"),
            b_margin=d.get("b_margin"),
            a_hash=d.get("a_hash"),
            b_hash=d.get("b_hash"),
            a_text=d.get("a_text"),
        )


@dataclass(frozen=True, slots=True)
class FieldsDiff:
    """Equal ids and bits, but what a client reads (``field``: finish_reason, text,
    token_sha, usage.*, stream) differs: ``a_value`` against ``b_value``, as the replies
    carried them. Both replies have ``length`` ids."""

    KIND: ClassVar[str] = "fields"
    index: ClassVar[None] = None

    id: str
    field: str
    a_value: Any
    b_value: Any
    prompt_tokens: int | None
    request: PromptRequest | None
    length: int

    def to_json(self) -> JsonObject:
        req = self.request.to_json() if self.request is not None else None
        out = {"id": self.id, "kind": self.KIND, "field": self.field}
        out |= {"a_value": self.a_value, "b_value": self.b_value}
        out |= {"prompt_tokens": self.prompt_tokens, "request": req, "index": None}
        return out | {"a_len": self.length, "b_len": self.length}

    @classmethod
    def from_json(cls, d: JsonObject) -> FieldsDiff:
        return cls(
            id=d["id"],
            field=d.get("field", ""),
            a_value=d.get("a_value"),
            b_value=d.get("b_value"),
            prompt_tokens=d.get("prompt_tokens"),
            request=_request(d.get("request")),
            length=d.get("a_len", 0),
        )


@dataclass(frozen=True, slots=True)
class Missing:
    """``b`` has no reply to a request ``a`` answered."""

    KIND: ClassVar[None] = None
    index: ClassVar[None] = None

    id: str
    request: PromptRequest | None = None

    def to_json(self) -> JsonObject:
        req = self.request.to_json() if self.request is not None else None
        return {"id": self.id, "missing": True, "index": None, "request": req}

    @classmethod
    def from_json(cls, d: JsonObject) -> Missing:
        return cls(d["id"], _request(d.get("request")))


Diff = TokensDiff | BitsDiff | FieldsDiff | Missing


def from_json(d: JsonObject) -> Diff:
    """A differing request as the manifest holds it."""
    if d.get("missing"):
        return Missing.from_json(d)
    kinds = {"bits": BitsDiff, "fields": FieldsDiff}
    return kinds.get(d.get("kind", ""), TokensDiff).from_json(d)
