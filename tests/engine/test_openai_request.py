"""OpenAI request parsing (engine/serve/openai.py: to_request) through its public function:
which token limit wins, every refused field on and beside its edge, seeds past 32 bits."""

from __future__ import annotations

import pytest

from engine.serve.openai import to_request
from engine.serve.schema import Invalid


def req(**body):
    return to_request({"prompt": [5, 6, 7], **body}, False, None, "m").request


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    assert req(max_completion_tokens=3, max_tokens=9).max_tokens == 3
    assert req(max_tokens=9).max_tokens == 9
    assert req(max_completion_tokens=4).max_tokens == 4
    assert req().max_tokens == 16
    assert req(max_tokens=1).max_tokens == 1
    with pytest.raises(Invalid, match="'max_completion_tokens': expected an integer >= 1"):
        req(max_completion_tokens=0, max_tokens=5)


def test_a_null_token_limit_is_an_absent_one() -> None:
    assert req(max_completion_tokens=None, max_tokens=5).max_tokens == 5
    assert req(max_tokens=None).max_tokens == 16


@pytest.mark.parametrize("seed", [0, 2**31, 2**32, 2**32 + 1, 2**63, 2**64 - 1])
def test_seeds_pass_through_whole(seed: int) -> None:
    assert req(seed=seed, temperature=0.8).seed == seed


REFUSED = [
    ("n", 2),
    ("best_of", 2),
    ("logprobs", True),
    ("logprobs", 1),
    ("top_logprobs", 1),
    ("echo", True),
    ("suffix", "x"),
    ("tools", [{"type": "function"}]),
    ("functions", [{"name": "f"}]),
    ("logit_bias", {"5": 1}),
    ("top_p", 0.5),
    ("presence_penalty", 1),
    ("stop", [""]),
    ("stop", ["a", "b", "c", "d", "e"]),
]


@pytest.mark.parametrize("key,value", REFUSED)
def test_every_unsupported_field_is_refused_by_name(key: str, value: object) -> None:
    with pytest.raises(Invalid, match=key) as e:
        req(**{key: value})
    assert e.value.param == key


ALLOWED = [("n", 1), ("n", None), ("best_of", 1), ("best_of", None), ("logprobs", False)]
ALLOWED += [("logprobs", 0), ("echo", False), ("stop", None), ("stop", []), ("top_p", 1)]
ALLOWED += [("stop", ""), ("logit_bias", None), ("suffix", None)]


@pytest.mark.parametrize("key,value", ALLOWED)
def test_the_neutral_values_of_those_fields_are_accepted(key: str, value: object) -> None:
    assert req(**{key: value}).prompt_ids == [5, 6, 7]


def test_fields_are_passed_and_nulls_are_defaults() -> None:
    r = req(temperature=0.5, seed=9, priority="background", stop_ids=[3], ignore_eos=True)
    assert (r.temperature, r.seed, r.priority, r.stop_ids, r.ignore_eos) == (
        0.5, 9, "background", [3], True,
    )  # fmt: skip
    d = req(temperature=None, seed=None, priority=None, draft=None, stop_ids=None)
    assert (d.temperature, d.seed, d.priority, d.draft, d.stop_ids) == (
        0.0, 0, "foreground", True, [],
    )  # fmt: skip
    assert req(draft=False).draft is False


def test_body_prompt_and_stream() -> None:
    with pytest.raises(Invalid, match="^request body: expected a JSON object$"):
        to_request([1, 2], False, None, "m")
    with pytest.raises(Invalid, match="^field 'prompt' is required"):
        to_request({"prompt": None}, False, None, "m")
    for bad in (5, [1, "a"], {"a": 1}):
        with pytest.raises(
            Invalid, match="^field 'prompt': expected a string or a list of token ids"
        ):
            to_request({"prompt": bad}, False, None, "m")
    got = to_request({"prompt": [1], "stream": True}, False, None, "m")
    assert got.stream is True and got.request.prompt_ids == [1] and len(got.request.id) == 16
    assert to_request({"prompt": [1]}, False, None, "m").stream is False
    other = to_request({"prompt": [1]}, False, None, "m").request
    assert other.id != got.request.id  # a fresh id per request
