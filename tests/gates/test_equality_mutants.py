"""gates/judge/checks/equality.py record by record: every field of each kind of difference, the
counts and skips of compare, the decoder and the near-tie wording, on small hand-made replies.

Each expected value is written out by hand, so a renamed key, a moved window or a changed
boundary is a failure here (docs/testing.md, "Mutation testing").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gates.judge import diffs as diffs_mod
from gates.judge.checks import equality
from gates.judge.diffs import Diff, Skipped
from gates.judge.results import Equality
from gates.plan.request import PromptRequest
from gates.run.reply import Reply
from gates.run.results import ArmRun, Status

TINY = Path(__file__).resolve().parents[2] / "fixtures" / "models" / "tiny-qwen3"


def R(d: dict) -> Reply:
    """A reply read as the store reads one (an id unless the dict names its own)."""
    return Reply.from_json({"id": "r", **d})


def _margin(d: dict, i: int) -> float | None:
    return equality._margin(R(d), i)


def bits_difference(x: dict, y: dict) -> tuple[str, int | None] | None:
    return equality.bits_difference(R(x), R(y))


def _diff(rid: str, a: dict, b: dict, *rest: Any) -> dict[str, Any]:
    """The record as the manifest holds it (to_json), read back unchanged by diffs_mod.from_json."""
    return _written(equality._diff(rid, R(a), R(b), *rest))


def _bits_diff(rid: str, a: dict, b: dict, *rest: Any) -> dict[str, Any]:
    return _written(equality._bits_diff(rid, R(a), R(b), *rest))


def _fields_diff(rid: str, a: dict, *rest: Any) -> dict[str, Any]:
    return _written(equality._fields_diff(rid, R(a), *rest))


def _written(d: Diff) -> dict[str, Any]:
    out = d.to_json()
    assert diffs_mod.from_json(out) == d and list(diffs_mod.from_json(out).to_json()) == list(out)
    return out


def assert_written(got: dict[str, Any], want: dict[str, Any]) -> None:
    """Equal, keys in the same order: the manifest's bytes are what they were."""
    assert got == want and list(got) == list(want)


def diffs(got: Equality) -> list[dict[str, Any]]:
    return [_written(d) for d in got.diffs]


def arm(*replies: dict) -> ArmRun:
    return ArmRun(Status.OK, replies=[Reply.from_json(r) for r in replies])


def r(rid: str, ids: list[int], **kw) -> dict:
    return {"id": rid, "ids": ids, "finish_reason": "length", **kw}


def Q(rid: str, prompt: str) -> PromptRequest:
    """A prompt request, as a prompt set's line gives one."""
    return PromptRequest.from_json({"id": rid, "prompt": prompt})


def letters(ids: list[int]) -> str:
    """A decoder whose text shows which ids it was given."""
    return "".join(chr(ord("a") + i % 26) for i in ids)


# ---------------------------------------------------------------- the decoder


def test_the_decoder_keeps_special_tokens_and_swallows_bad_ids(tmp_path) -> None:
    pytest.importorskip("tokenizers")
    decode = equality.make_decoder(TINY)
    assert decode is not None
    assert decode([40, 1000, 41]) == "I<|endoftext|>J"  # 1000 is <|endoftext|>
    assert decode(["not an id"]) == ""  # the tokenizer raises: no text, no crash
    assert equality.make_decoder(tmp_path) is None  # no tokenizer.json
    (tmp_path / "tokenizer.json").write_text("{not json")
    assert equality.make_decoder(tmp_path) is None
    (tmp_path / "tokenizer.json").unlink()
    (tmp_path / "tokenizer.json").mkdir()  # there, but not a file
    assert equality.make_decoder(tmp_path) is None


# ---------------------------------------------------------------- first_difference, _margin


def test_first_difference_on_prefixes_either_way() -> None:
    assert equality.first_difference([1, 2, 3], [1, 2]) == 2
    assert equality.first_difference([1, 2], [1, 2, 3, 4]) == 2
    assert equality.first_difference([], []) is None
    assert equality.first_difference([0, 1], [1, 1]) == 0


def test_margin_only_where_there_is_a_number() -> None:
    m = {"margins": [0.5, 2, "x", None, True]}
    assert _margin(m, 0) == 0.5
    got = _margin(m, 1)
    assert got == 2.0 and type(got) is float
    assert _margin(m, 2) is None and _margin(m, 3) is None
    assert _margin(m, 5) is None  # past the end
    assert _margin({"margins": [1.0]}, 1) is None
    assert _margin({"margins": "0.5"}, 0) is None
    assert _margin({}, 0) is None


# ---------------------------------------------------------------- token differences


def test_a_token_difference_record_without_a_decoder() -> None:
    a = r("x", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], margins=[3, -1.0, 0.5, "?"], text="A")
    a["prompt_tokens"] = 7
    b = r("x", [1, 9], margins=[3, 0.25], text="B", finish_reason="stop")
    got = _diff("x", a, b, Q("x", "hi"), None)
    assert_written(
        got,
        {
            "id": "x",
            "kind": "tokens",
            "prompt_tokens": 7,
            "request": {"id": "x", "prompt": "hi"},
            "a_len": 11,
            "b_len": 2,
            "a_finish": "length",
            "b_finish": "stop",
            "index": 1,
            "a_ids": [2, 3, 4, 5, 6, 7, 8, 9],  # eight tokens from the difference
            "b_ids": [9],
            "a_margin": -1.0,
            "b_margin": 0.25,
            "median_margin": 1.0,  # of |3|, |-1|, |0.5|: numbers only
            "a_text": "A",
            "b_text": "B",
            "text_is_whole_reply": True,
        },
    )


def test_a_token_difference_record_with_a_decoder() -> None:
    common = list(range(45))
    a = r("y", [*common, 1, 2], margins=[])
    b = r("y", [*common, 3])
    got = _diff("y", a, b, None, letters)
    assert got["index"] == 45 and got["median_margin"] is None
    assert (got["a_text"], got["b_text"]) == ("bc", "d")
    assert got["common_text"] == letters(common)[-40:] and len(got["common_text"]) == 40
    assert "text_is_whole_reply" not in got


def test_an_error_on_one_side_only_is_recorded() -> None:
    a = r("z", [1], finish_reason="error", error="boom")
    b = r("z", [1], error="ignored: not an error reply")
    got = _diff("z", a, b, None, None)
    assert got["error"] == {"a": "boom", "b": "ignored: not an error reply"}
    assert got["index"] is None and "a_ids" not in got  # same ids: the error state alone
    both = _diff("z", a, {**a, "ids": [2]}, None, None)
    assert "error" not in both
    assert "error" not in _diff("z", r("z", [1]), r("z", [2]), None, None)


def test_missing_ids_count_as_none() -> None:
    got = _diff("n", {"id": "n", "ids": None}, r("n", [4]), None, None)
    assert (got["a_len"], got["b_len"], got["index"], got["b_ids"]) == (0, 1, 0, [4])


# ---------------------------------------------------------------- bit differences


def test_bits_difference_field_by_field() -> None:
    x = {"logit_hashes": ["h0", "h1"], "margins": [1.0, 2.0], "embedding": [0.5, 0.25]}
    assert bits_difference(x, dict(x)) is None
    assert bits_difference(x, {**x, "logit_hashes": ["h0", "hX"]}) == ("logit_hashes", 1)
    assert bits_difference(x, {**x, "margins": [1.0, 2.5]}) == ("margins", 1)
    both = {**x, "logit_hashes": ["hX", "h1"], "margins": [1.5, 2.0]}
    assert bits_difference(x, both) == ("logit_hashes", 0)  # hashes are read first
    got = bits_difference(x, {**x, "embedding": [0.5, 0.125]})
    assert got == ("embedding", 1)
    assert bits_difference(x, {**x, "embedding": [0.5]}) == ("embedding", 1)
    # a field one side does not carry is not compared
    assert bits_difference(x, {"margins": [1.0, 2.0]}) is None
    assert bits_difference({"logit_hashes": None}, {"logit_hashes": ["h"]}) is None
    assert bits_difference({"embedding": "e"}, {"embedding": ["e"]}) is None
    assert bits_difference({"embedding": [1]}, {"embedding": None}) is None
    shorter = {**x, "margins": [1.0]}
    assert bits_difference(x, shorter) == ("margins", 1)


def test_a_bits_record_at_a_token() -> None:
    ids = list(range(20, 32))
    a = r("b", ids, margins=[1.0] * 3 + [0.5], logit_hashes=["a"] * 12, prompt_tokens=3)
    b = r("b", ids, margins=[1.0] * 3 + [0.5], logit_hashes=["a"] * 3 + ["z"] * 9)
    b["finish_reason"] = "stop"
    got = _bits_diff("b", a, b, ("logit_hashes", 3), Q("b", "p"), None)
    assert_written(
        got,
        {
            "id": "b",
            "kind": "bits",
            "bits_of": "logit_hashes",
            "prompt_tokens": 3,
            "request": {"id": "b", "prompt": "p"},
            "index": 3,
            "a_len": 12,
            "b_len": 12,
            "a_finish": "length",
            "b_finish": "stop",
            "a_margin": 0.5,
            "b_margin": 0.5,
            "a_hash": "a",
            "b_hash": "z",
            "a_ids": [23, 24, 25, 26, 27, 28, 29, 30],
        },
    )
    with_text = _bits_diff("b", a, b, ("logit_hashes", 3), None, letters)
    assert with_text["a_text"] == letters(ids[3:11])


def test_a_bits_record_without_hashes_or_per_token_index() -> None:
    a, b = r("m", [1, 2], margins=[1.0, 2.0]), r("m", [1, 2], margins=[1.0, 3.0])
    got = _bits_diff("m", a, b, ("margins", 1), None, letters)
    assert (got["a_margin"], got["b_margin"], got["a_ids"], got["a_text"]) == (2.0, 3.0, [2], "c")
    assert "a_hash" not in got and "b_hash" not in got
    nohash = _bits_diff("m", a, b, ("logit_hashes", 1), None, None)
    assert (nohash["a_hash"], nohash["b_hash"]) == (None, None)  # neither carries hashes
    emb = _bits_diff("m", a, b, ("embedding", 0), None, letters)
    assert emb["index"] == 0 and emb["bits_of"] == "embedding"
    assert not {"a_margin", "a_ids", "a_text"} & set(emb)  # an embedding has no tokens
    whole = _bits_diff("m", a, b, ("margins", None), None, letters)
    assert not {"a_margin", "a_ids", "a_text"} & set(whole)


def test_equal_ids_with_a_shorter_hash_list_is_a_bits_record() -> None:
    # An engine that reports one hash too few: bits_difference places the difference at
    # the shorter list's end, where that list has no hash (None, not an IndexError).
    a = arm(r("h", [1, 2], logit_hashes=["p", "q"]))
    b = arm(r("h", [1, 2], logit_hashes=["p"]))
    (got,) = diffs(equality.compare(a, b))
    assert got["kind"] == "bits" and got["index"] == 1
    assert (got["a_hash"], got["b_hash"]) == ("q", None)


def test_a_fields_record() -> None:
    a = r("f", [1, 2, 3], prompt_tokens=4)
    got = _fields_diff("f", a, ("text", "ab", "ac"), Q("f", "q"))
    assert_written(
        got,
        {
            "id": "f",
            "kind": "fields",
            "field": "text",
            "a_value": "ab",
            "b_value": "ac",
            "prompt_tokens": 4,
            "request": {"id": "f", "prompt": "q"},
            "index": None,
            "a_len": 3,
            "b_len": 3,
        },
    )
    assert _fields_diff("f", {"ids": None}, ("text", 1, 2), None)["a_len"] == 0


# ---------------------------------------------------------------- compare


def test_compare_counts_skips_and_kinds() -> None:
    a = arm(
        r("same", [1, 2], margins=[1.0, 1.0]),
        r("tok", [1, 2]),
        r("bits", [5], margins=[1.0]),
        r("field", [6], served=True, text="x"),
        r("gone", [7]),
        r("err2", [], finish_reason="error", error="too long"),
        r("err0", [], finish_reason="error"),
        r("drop", [8]),
    )
    b = arm(
        r("same", [1, 2], margins=[1.0, 1.0]),
        r("tok", [1, 3]),
        r("bits", [5], margins=[1.5]),
        r("field", [6], served=True, text="y"),
        r("err2", [], finish_reason="error", error="other"),
        r("err0", [], finish_reason="error"),
        r("drop", [9]),
        r("only_b", [1]),
    )
    requests = {"tok": Q("tok", "t"), "gone": Q("gone", "g")}
    got = equality.compare(a, b, requests=requests, dropped={"drop": "timed out"})
    assert (got.matched, got.total, got.all_equal) == (1, 5, False)
    assert got.skipped == [
        Skipped("drop", "timed out"),
        Skipped("err2", "both arms replied error: too long"),
        Skipped("err0", "both arms replied error: ?"),
    ]
    assert got.skipped[0].to_json() == {"id": "drop", "reason": "timed out"}
    written = diffs(got)
    kinds = [(d["id"], d.get("kind")) for d in written]
    assert kinds == [("tok", "tokens"), ("bits", "bits"), ("field", "fields"), ("gone", None)]
    assert written[0]["request"] == {"id": "tok", "prompt": "t"}
    assert written[1]["request"] is None
    gone = {"id": "gone", "missing": True, "index": None, "request": {"id": "gone", "prompt": "g"}}
    assert_written(written[3], gone)
    assert (written[2]["a_value"], written[2]["b_value"]) == ("x", "y")


def test_compare_passes_each_record_its_request_and_decoder() -> None:
    same = [r("s1", [7]), r("s2", [8])]
    a = arm(r("t", [1, 2]), r("b", [3], margins=[1.0]), r("f", [4], served=True, text="x"), *same)
    b = arm(r("t", [1, 5]), r("b", [3], margins=[2.0]), r("f", [4], served=True, text="y"), *same)
    requests = {k: Q(k, k) for k in ("t", "b", "f")}
    got = equality.compare(a, b, requests=requests, decode=letters)
    assert (got.matched, got.total) == (2, 5)
    assert [d["request"] for d in diffs(got)] == [{"id": k, "prompt": k} for k in "tbf"]
    tok, bits, _ = diffs(got)
    assert (tok["id"], tok["a_text"], tok["b_text"], tok["common_text"]) == ("t", "c", "f", "b")
    assert (bits["id"], bits["a_text"]) == ("b", "d")


def test_compare_only_some_ids_and_nothing_given() -> None:
    a = arm(r("p", [1]), r("q", [2]), r("s", [3]))
    b = arm(r("p", [1]), r("q", [9]), r("s", [3]))
    only = equality.compare(a, b, only_ids=["q", "s"], dropped={"p": "x", "s": "y"})
    assert (only.matched, only.total) == (0, 1)
    assert only.skipped == [Skipped("s", "y")]  # p is not asked about
    none = equality.compare(ArmRun(Status.OK), ArmRun(Status.OK))
    assert (none.matched, none.total, none.skipped, none.diffs) == (0, 0, [], [])
    assert none.all_equal
    first_dropped = equality.compare(
        arm(r("d", [1]), r("k", [2])), arm(r("d", [9]), r("k", [2])), dropped={"d": "x"}
    )
    assert (first_dropped.matched, first_dropped.total) == (1, 1)  # the rest still counted
    empty_ids = equality.compare(arm({"id": "e", "ids": None}), arm(r("e", [])))
    assert (empty_ids.matched, empty_ids.total) == (1, 1)


def test_compare_an_error_beside_equal_ids_is_a_tokens_record() -> None:
    a = arm(r("e", [1], finish_reason="error", error="boom"))
    b = arm(r("e", [1]))
    got = equality.compare(a, b)
    assert (got.matched, got.total) == (0, 1)
    (d,) = diffs(got)
    assert d["kind"] == "tokens" and d["error"] == {"a": "boom", "b": None}


# ---------------------------------------------------------------- describe_margin


def test_describe_margin_edges() -> None:
    assert equality.describe_margin(None, None) == "no margin reported"
    assert equality.describe_margin(None, None, 2.0) == "no margin reported"
    assert equality.describe_margin(0.0099, None) == "a near-tie"
    assert equality.describe_margin(0.01, 0.5) == "not a near-tie"  # 0.01 itself is not
    assert equality.describe_margin(0.5, -0.005) == "a near-tie"  # the smaller |margin|
    assert equality.describe_margin(None, 0.02) == "not a near-tie"
    got = equality.describe_margin(0.2, 0.3, median=2.5)
    assert got == "the reply's median margin is 2.5; a near-tie"  # 0.2 < 0.25
    got = equality.describe_margin(0.25, 0.3, median=2.5)
    assert got == "the reply's median margin is 2.5; not a near-tie"  # 0.25 is not < 0.25
    got = equality.describe_margin(0.5, 0.5, median=1.23456)
    assert got == "the reply's median margin is 1.23; not a near-tie"
    assert equality.describe_margin(0.5, 0.5, median=0.0) == (
        "the reply's median margin is 0; not a near-tie"
    )
