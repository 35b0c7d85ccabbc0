"""Equality between two arms, per request id: the token ids, then the bits behind them.

Two replies are equal when their ids and error state are equal *and* the bits that the
engine reports about each token are equal: ``logit_hashes`` (a hash of each token's
float32 logits row), ``margins`` and ``embedding``, each compared only when both replies
carry it (an older engine may not). Equal ids with other bits is a failure of its own
kind, "same tokens, other bits", located at the first token where the bits part.
Never closeness: floats are compared exactly as JSON gives them.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gates.judge.checks import client
from gates.judge.diffs import BitsDiff, Diff, FieldsDiff, Missing, Skipped, TokensDiff
from gates.judge.results import Equality
from gates.plan.request import PromptRequest
from gates.run.reply import Reply
from gates.run.results import ArmRun

WINDOW = 8  # tokens of each continuation shown from the first difference
NEAR_TIE = 0.01  # a logit margin below this is called a near-tie

Decoder = Callable[[list[int]], str]


def make_decoder(model_dir: Path) -> Decoder | None:
    """Decode ids with the model's tokenizer.json (the ``tokenizers`` package), if any."""
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        from tokenizers import Tokenizer  # optional: receipts show ids without it

        tok = Tokenizer.from_file(str(path))
    except Exception:  # noqa: BLE001 - any failure here only costs the text column
        return None

    def decode(ids: list[int]) -> str:
        try:
            return tok.decode(ids, skip_special_tokens=False)
        except Exception:  # noqa: BLE001
            return ""

    return decode


BITS_FIELDS = ("logit_hashes", "margins")  # per generated token, compared when both carry them


def first_difference(a: list[Any], b: list[Any]) -> int | None:
    """Index of the first differing token (the shorter length if one is a prefix)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _margin(reply: Reply, i: int) -> float | None:
    m = reply.margins
    if m is not None and i < len(m) and isinstance(m[i], (int, float)):
        return float(m[i])
    return None


def _hash(reply: Reply, i: int) -> str | None:
    """The i-th logit hash, None where the list is missing or ends before i (one too few)."""
    h = reply.logit_hashes
    return h[i] if h is not None and i < len(h) else None


def _diff(
    rid: str,
    ra: Reply,
    rb: Reply,
    request: PromptRequest | None,
    decode: Decoder | None,
) -> TokensDiff:
    a, b = list(ra.ids), list(rb.ids)
    d = TokensDiff(
        id=rid,
        prompt_tokens=ra.prompt_tokens,
        request=request,
        a_len=len(a),
        b_len=len(b),
        a_finish=ra.finish_reason,
        b_finish=rb.finish_reason,
        index=first_difference(a, b),
        error=(ra.error, rb.error) if ra.is_error != rb.is_error else None,
    )
    i = d.index
    if i is None:  # same ids, so the difference is the error state alone
        return d
    a_ids, b_ids = a[i : i + WINDOW], b[i : i + WINDOW]
    ms = [abs(float(v)) for v in ra.margins or () if isinstance(v, (int, float))]
    if decode is not None:
        texts = (decode(a_ids), decode(b_ids), decode(a[:i])[-40:])
    else:
        texts = (ra.text, rb.text, None)
    return dataclasses.replace(
        d,
        a_ids=tuple(a_ids),
        b_ids=tuple(b_ids),
        a_margin=_margin(ra, i),
        b_margin=_margin(rb, i),
        median_margin=statistics.median(ms) if ms else None,
        a_text=texts[0],
        b_text=texts[1],
        common_text=texts[2],
    )


def bits_difference(x: Reply, y: Reply) -> tuple[str, int | None] | None:
    """(field, first differing token index) where equal-id replies part in their bits.

    None when every bit field that both carry is equal. The index is None for fields that
    are not per token (``embedding``)."""
    for name in BITS_FIELDS:
        a, b = getattr(x, name), getattr(y, name)
        if a is not None and b is not None:
            i = first_difference(list(a), list(b))
            if i is not None:
                return name, i
    ea, eb = x.embedding, y.embedding
    if ea is not None and eb is not None and ea != eb:
        return "embedding", first_difference(list(ea), list(eb))
    return None


def _bits_diff(
    rid: str,
    ra: Reply,
    rb: Reply,
    where: tuple[str, int | None],
    request: PromptRequest | None,
    decode: Decoder | None,
) -> BitsDiff:
    field_name, i = where
    ids = list(ra.ids)
    d = BitsDiff(
        id=rid,
        bits_of=field_name,
        prompt_tokens=ra.prompt_tokens,
        request=request,
        index=i,
        a_len=len(ids),
        b_len=len(ids),
        a_finish=ra.finish_reason,
        b_finish=rb.finish_reason,
    )
    if field_name == "embedding" or i is None:
        return d
    hashes = (_hash(ra, i), _hash(rb, i)) if field_name == "logit_hashes" else (None, None)
    return dataclasses.replace(
        d,
        a_ids=tuple(ids[i : i + WINDOW]),
        a_margin=_margin(ra, i),
        b_margin=_margin(rb, i),
        a_hash=hashes[0],
        b_hash=hashes[1],
        a_text=decode(ids[i : i + WINDOW]) if decode is not None else None,
    )


def _fields_diff(
    rid: str, ra: Reply, where: tuple[str, Any, Any], request: PromptRequest | None
) -> FieldsDiff:
    """Equal ids and bits, but what a client reads differs (served replies, checks/client)."""
    name, va, vb = where
    return FieldsDiff(rid, name, va, vb, ra.prompt_tokens, request, len(ra.ids))


def compare(
    a: ArmRun,
    b: ArmRun,
    only_ids: list[str] | None = None,
    requests: dict[str, PromptRequest] | None = None,
    decode: Decoder | None = None,
    dropped: dict[str, str] | None = None,
) -> Equality:
    """Compare two arm results (``replies`` lists). ``a`` is the reference.

    Returns matched/total counts, the requests both arms failed or that were dropped (left
    out of the count) and one record per differing request with its first divergence."""
    ra = {r.id: r for r in a.replies or []}
    rb = {r.id: r for r in b.replies or []}
    ids = [i for i in ra if only_ids is None or i in only_ids]
    dropped, requests = dropped or {}, requests or {}
    matched = total = 0
    skipped = [
        Skipped(rid, why) for rid, why in dropped.items() if only_ids is None or rid in only_ids
    ]
    diffs: list[Diff] = []
    for rid in ids:
        if rid in dropped:
            continue
        x, y = ra[rid], rb.get(rid)
        if y is None:
            total += 1
            diffs.append(Missing(rid, requests.get(rid)))
            continue
        if x.is_error and y.is_error:
            skipped.append(Skipped(rid, f"both arms replied error: {x.error or '?'}"))
            continue
        total += 1
        same_ids = x.ids == y.ids
        same_state = x.is_error == y.is_error
        if not (same_ids and same_state):
            diffs.append(_diff(rid, x, y, requests.get(rid), decode))
            continue
        parted = bits_difference(x, y)
        fields = client.difference(x, y) if parted is None else None
        if parted is not None:
            diffs.append(_bits_diff(rid, x, y, parted, requests.get(rid), decode))
        elif fields is not None:
            diffs.append(_fields_diff(rid, x, fields, requests.get(rid)))
        else:
            matched += 1
    return Equality(matched, total, skipped, diffs)


def describe_margin(a: float | None, b: float | None, median: float | None = None) -> str:
    """A near-tie: below NEAR_TIE, or below a tenth of the reply's median margin."""
    vals = [v for v in (a, b) if v is not None]
    if not vals:
        return "no margin reported"
    low = min(abs(v) for v in vals)
    tie = low < NEAR_TIE or (median is not None and low < 0.1 * median)
    ctx = f"the reply's median margin is {median:.3g}; " if median is not None else ""
    return ctx + ("a near-tie" if tie else "not a near-tie")
