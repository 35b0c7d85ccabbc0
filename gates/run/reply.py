"""One reply of an arm, typed: what ``engine run`` printed for a request (the fields of
``contract.REPLY_KEYS``) or what a served arm's client got (``served``, ``usage``,
``stream_problems`` beside them). Read once where the engine's output or the result
store's JSON is read; ``to_json`` writes what was read (absent fields stay absent). A
``ReplySummary`` is what an arm's manifest row keeps of a reply (the store keeps the rest)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gates.jsontypes import JsonObject

LISTS = ("ids", "margins", "logit_hashes", "embedding", "stream_problems")


@dataclass(frozen=True)
class Reply:
    id: str
    ids: tuple[int, ...] = ()
    text: str | None = None
    token_sha: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    margins: tuple[float, ...] | None = None
    min_margin: float | None = None
    drafted: int | None = None
    accepted: int | None = None
    error: str | None = None
    logit_hashes: tuple[str, ...] | None = None
    embedding: tuple[float, ...] | None = None
    served: str | None = None  # plain | stream: a served arm's reply, as its client got it
    usage: dict[str, int] | None = None
    stream_problems: tuple[str, ...] = ()

    @property
    def is_error(self) -> bool:
        return self.finish_reason == "error"

    @classmethod
    def from_json(cls, d: JsonObject) -> Reply:
        """A reply object; ValueError for one without an id (the store's miss)."""
        if not isinstance(d, dict) or "id" not in d:
            raise ValueError(f"reply: {str(d)[:80]} is no object with an id")
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names and v is not None}
        for k in LISTS:
            if k in kw:
                kw[k] = tuple(kw[k]) if isinstance(kw[k], list) else None
        if kw.get("ids") is None:
            kw.pop("ids", None)
        if kw.get("stream_problems") is None:
            kw.pop("stream_problems", None)
        usage = kw.get("usage")
        kw["usage"] = dict(usage) if isinstance(usage, dict) else None
        return cls(**kw)

    def to_json(self) -> JsonObject:
        out: JsonObject = {"id": self.id, "ids": list(self.ids)}
        for f in dataclasses.fields(self)[2:]:
            v = getattr(self, f.name)
            if f.name == "stream_problems":
                if self.served is not None:
                    out[f.name] = list(v)
            elif v is not None:
                out[f.name] = list(v) if isinstance(v, tuple) else v
        return out


@dataclass(frozen=True)
class ReplySummary:
    """A reply as an arm's manifest row records it: id, token count, token hash, finish
    reason (a row of an older manifest may lack all but the id)."""

    id: str
    n: int = 0
    token_sha: str | None = None
    finish_reason: str | None = None

    @classmethod
    def of(cls, r: Reply) -> ReplySummary:
        return cls(r.id, len(r.ids), r.token_sha, r.finish_reason)

    @classmethod
    def from_json(cls, d: JsonObject) -> ReplySummary:
        if not isinstance(d, dict) or "id" not in d:
            raise ValueError(f"reply summary: {str(d)[:80]} is no object with an id")
        n, sha, finish = d.get("n", 0), d.get("token_sha"), d.get("finish_reason")
        return cls(
            str(d["id"]),
            n if isinstance(n, int) else 0,
            sha if isinstance(sha, str) else None,
            finish if isinstance(finish, str) else None,
        )

    def to_json(self) -> JsonObject:
        return {k: getattr(self, k) for k in ("id", "n", "token_sha", "finish_reason")}
