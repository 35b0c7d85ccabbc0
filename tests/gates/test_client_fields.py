"""served == offline past the ids and bits: finish_reason, text, token_sha, usage and the
order and shape of a stream's chunks (gates/judge/checks/client.py, gates/run/served.py)."""

from __future__ import annotations

from conftest import ran
from gates.judge.checks import client, equality
from gates.judge.diffs import FieldsDiff
from gates.run import served
from gates.run.reply import Reply

OFFLINE = {
    "id": "r",
    "ids": [5, 6, 7],
    "text": "abc",
    "token_sha": "s1",
    "finish_reason": "length",
    "prompt_tokens": 4,
    "logit_hashes": ["a", "b", "c"],
}
PLAIN = {
    **OFFLINE,
    "served": "plain",
    "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7},
    "stream_problems": [],
}


def difference(a: dict, b: dict):
    return client.difference(Reply.from_json(a), Reply.from_json(b))


def test_a_served_reply_equal_in_every_field_a_client_reads_matches():
    assert difference(OFFLINE, PLAIN) is None
    cancelled = {**OFFLINE, "finish_reason": "cancelled"}
    assert difference(cancelled, {**PLAIN, "finish_reason": "stop"}) is None
    assert difference(OFFLINE, {**OFFLINE, "text": "x"}) is None  # neither is served


def test_each_field_a_client_reads_is_compared():
    cases = {
        "finish_reason": {"finish_reason": "stop"},
        "text": {"text": "abd"},
        "token_sha": {"token_sha": "s2"},
        "usage.completion_tokens": {
            "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
        },
        "usage.prompt_tokens": {
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
        },
        "usage.total_tokens": {
            "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 3}
        },
        "stream": {"stream_problems": ["chunk 3 came after the chunk with the finish_reason"]},
    }
    for field, change in cases.items():
        got = difference(OFFLINE, {**PLAIN, **change})
        assert got is not None and got[0] == field, (field, got)
        back = difference({**PLAIN, **change}, OFFLINE)  # either side may be served
        assert back is not None and back[0] == field, (field, back)


def test_equality_counts_a_field_difference_and_the_receipt_names_it():
    cmp = equality.compare(
        ran({"replies": [OFFLINE]}), ran({"replies": [{**PLAIN, "finish_reason": "stop"}]})
    )
    assert (cmp.matched, cmp.total) == (0, 1)
    (d,) = cmp.diffs
    assert isinstance(d, FieldsDiff)
    assert (d.field, d.a_value, d.b_value) == ("finish_reason", "length", "stop")
    assert client.line(d, "offline", "served stream") == (
        "same tokens and bits, other finish_reason — offline 'length', served stream 'stop'"
    )


def _chunk(ids, finish=None, cid="cmpl-1", index=0):
    return {
        "id": cid,
        "choices": [
            {
                "index": index,
                "finish_reason": finish,
                "token_ids": ids,
                "margins": [0.5] * len(ids),
                "logit_hashes": ["h"] * len(ids),
            }
        ],
    }


def test_stream_chunk_order_and_shape():
    assert served._chunk_problem(_chunk([1, 2]), "cmpl-1", 1, False) is None
    assert served._chunk_problem(_chunk([], "length"), "cmpl-1", 2, False) is None
    assert "after the chunk with the finish_reason" in served._chunk_problem(
        _chunk([3]), "cmpl-1", 3, True
    )
    assert "has id" in served._chunk_problem(_chunk([3], cid="cmpl-2"), "cmpl-1", 1, False)
    assert "the last chunk carries tokens" in served._chunk_problem(
        _chunk([3], "stop"), "cmpl-1", 1, False
    )
    assert "choice 1" in served._chunk_problem(_chunk([3], index=1), "cmpl-1", 1, False)
    odd = _chunk([3, 4])
    odd["choices"][0]["margins"] = [0.1]
    assert "other lengths" in served._chunk_problem(odd, "cmpl-1", 1, False)
