"""OpenAI request parsing (engine/serve/openai.py: to_request) through its public function:
which token limit wins, every refused field on and beside its edge, seeds past 32 bits."""

from __future__ import annotations

import math

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


class CharTokenizer:
    """Text to ids one character each; chat messages as 'role:content|' then '>'."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool) -> str:
        assert add_generation_prompt is True
        return "".join(f"{m['role']}:{m['content']}|" for m in messages) + ">"


TOK = CharTokenizer()
HI = [{"role": "user", "content": "hi"}]


def test_text_prompts_and_messages_go_through_the_tokenizer() -> None:
    assert to_request({"prompt": "ab"}, False, TOK, "m").request.prompt_ids == [97, 98]
    chat = to_request({"messages": HI}, True, TOK, "m").request
    assert chat.prompt_ids == [ord(c) for c in "user:hi|>"]
    with pytest.raises(Invalid, match="^request body: text prompts need a tokenizer$") as e:
        to_request({"prompt": "ab"}, False, None, "m")
    assert e.value.param is None and e.value.status == 400
    with pytest.raises(Invalid, match="^request body: the prompt is empty$"):
        to_request({"prompt": ""}, False, TOK, "m")


def test_stop_strings_need_a_tokenizer_and_empty_ones_are_none() -> None:
    assert to_request({"prompt": [1], "stop": "ab"}, False, TOK, "m").stops == ["ab"]
    got = to_request({"prompt": [1], "stop": ["a", "bc", "d", "e"]}, False, TOK, "m")
    assert got.stops == ["a", "bc", "d", "e"]  # four: OpenAI's limit
    for none in ("", [], None):
        assert to_request({"prompt": [1], "stop": none}, False, None, "m").stops == []
    assert to_request({"prompt": [1]}, False, None, "m").stops == []
    with pytest.raises(Invalid) as e:
        to_request({"prompt": [1], "stop": ["a"]}, False, None, "m")
    assert (e.value.message, e.value.param) == (
        "field 'stop': stop strings need the model's tokenizer",
        "stop",
    )


CHAT_REFUSED = [
    ("logprobs", True),
    ("logprobs", 0),  # chat's logprobs is a boolean
    ("top_logprobs", 1),
    ("top_logprobs", True),
    ("tools", [{"type": "function"}]),
    ("functions", [{"name": "f"}]),
    ("tool_choice", "auto"),
    ("n", 2),
    ("n", 1.0),
    ("frequency_penalty", 0.5),
    ("presence_penalty", math.inf),
    ("top_p", 0.9),
    ("logit_bias", {"5": 1}),
    ("prompt", "hi"),  # a completions field
    ("best_of", 1),
    ("suffix", ""),
    ("echo", False),
]


@pytest.mark.parametrize("key,value", CHAT_REFUSED)
def test_chat_refuses_what_it_cannot_honour_by_name(key: str, value: object) -> None:
    with pytest.raises(Invalid, match=key) as e:
        to_request({"messages": HI, key: value}, True, TOK, "m")
    assert e.value.param == key and e.value.status == 400


CHAT_ALLOWED = [("logprobs", False), ("top_logprobs", 0), ("tools", []), ("functions", [])]
CHAT_ALLOWED += [("tool_choice", "none"), ("n", 1), ("frequency_penalty", 0), ("top_p", 1.0)]
CHAT_ALLOWED += [("presence_penalty", 0.0), ("logit_bias", {}), ("user", "u"), ("model", "m")]


@pytest.mark.parametrize("key,value", CHAT_ALLOWED)
def test_chat_takes_the_neutral_values(key: str, value: object) -> None:
    assert to_request({"messages": HI, key: value}, True, TOK, "m").request.prompt_ids


TYPES_REFUSED = [
    ("stream", "false"),
    ("stream", 0),
    ("max_tokens", True),
    ("max_tokens", 0),
    ("max_tokens", 2.0),
    ("max_completion_tokens", -1),
    ("temperature", -0.5),
    ("temperature", math.nan),
    ("temperature", math.inf),
    ("temperature", "0.5"),
    ("temperature", True),
    ("seed", 1.5),
    ("seed", False),
    ("stop_ids", [-1]),
    ("stop_ids", [True]),
    ("stop_ids", 3),
    ("priority", "urgent"),
    ("draft", 1),
    ("ignore_eos", "yes"),
    ("user", 5),
    ("model", 5),
    ("stop", 5),
    ("stop", ["a", 5]),
    ("logprobs", 1),
    ("logprobs", True),
    ("echo", True),
    ("suffix", "x"),
    ("best_of", True),
    ("messages", HI),  # a chat field
]


@pytest.mark.parametrize("key,value", TYPES_REFUSED)
def test_strict_types_on_completions(key: str, value: object) -> None:
    with pytest.raises(Invalid, match=f"'?{key}'?") as e:
        req(**{key: value})
    assert e.value.param == key


def test_edges_that_are_accepted() -> None:
    r = req(temperature=0, max_tokens=1, stop_ids=[0], seed=-1, priority="foreground")
    assert (r.temperature, r.max_tokens, r.stop_ids, r.seed) == (0, 1, [0], -1)
    assert req(temperature=2**70).temperature == 2**70
    assert req(logprobs=0).prompt_ids == [5, 6, 7] and req(user="u").prompt_ids == [5, 6, 7]
    assert to_request({"prompt": [0]}, False, None, "m").request.prompt_ids == [0]


def test_bad_prompts_messages_and_models() -> None:
    for bad in ([], [-1], [True], [1.0]):
        with pytest.raises(Invalid, match="^field 'prompt': expected a string or a list"):
            to_request({"prompt": bad}, False, None, "m")
    for bad in ([], [{"role": "user"}], [{"role": "user", "content": 5}], HI[0]):
        with pytest.raises(Invalid, match="^field 'messages': expected a non-empty list") as e:
            to_request({"messages": bad}, True, TOK, "m")
        assert e.value.param == "messages"
    extra = [{"role": "user", "content": "x", "tool_call_id": "t"}]
    with pytest.raises(Invalid, match="messages"):
        to_request({"messages": extra}, True, TOK, "m")
    named = [{"role": "user", "content": "x", "name": "n"}]
    assert to_request({"messages": named}, True, TOK, "m").request.prompt_ids
    with pytest.raises(Invalid, match="^field 'messages' is required$") as e:
        to_request({"model": "m"}, True, TOK, "m")
    assert e.value.param == "messages"
    with pytest.raises(Invalid) as e:
        to_request({"prompt": [1], "model": "other"}, False, None, "served")
    assert e.value.message == "The model `other` does not exist (this server serves `served`)"
    assert (e.value.param, e.value.status, e.value.code) == ("model", 404, "model_not_found")
    with pytest.raises(Invalid) as e:
        to_request({"prompt": [1], "model": "x" * 300}, False, None, "served")
    assert e.value.message.startswith("The model `" + "x" * 200 + "` does not")


def test_an_unknown_field_and_a_long_value_are_named_briefly() -> None:
    with pytest.raises(Invalid) as e:
        to_request({"prompt": [1], "frobnicate": 1}, False, None, "m")
    assert e.value.message == "Unrecognized request argument supplied: frobnicate"
    assert e.value.param == "frobnicate" and e.value.code is None
    with pytest.raises(Invalid) as e:
        req(suffix="y" * 100)
    shown = repr("y" * 100)[:57] + "..."
    assert (
        e.value.message == f"field 'suffix': expected empty (suffix is not supported), got {shown}"
    )
    with pytest.raises(Invalid) as e:
        req(suffix="y" * 58)  # repr 60 characters: shown whole
    assert e.value.message.endswith("got " + repr("y" * 58))
    with pytest.raises(Invalid) as e:
        req(suffix="y" * 59)  # repr 61 characters: cut to 57 and "..."
    assert e.value.message.endswith("got '" + "y" * 56 + "...")
