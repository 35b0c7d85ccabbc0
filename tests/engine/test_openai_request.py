"""OpenAI request parsing (engine/serve/openai.py: to_request) through its public function:
which token limit wins, every refused field on and beside its edge, seeds past 32 bits."""

from __future__ import annotations

import pytest

from engine.errors import InputError
from engine.serve.openai import Unsupported, to_request


def req(**body):
    r, _ = to_request({"prompt": [5, 6, 7], **body}, False, None)
    return r


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    assert req(max_completion_tokens=3, max_tokens=9).max_tokens == 3
    assert req(max_tokens=9).max_tokens == 9
    assert req(max_completion_tokens=4).max_tokens == 4
    assert req().max_tokens == 16
    assert req(max_tokens=1).max_tokens == 1
    with pytest.raises(InputError, match="'max_tokens' must be >= 1"):
        req(max_completion_tokens=0, max_tokens=5)


@pytest.mark.xfail(strict=True, raises=TypeError, reason="null limit: TypeError, not a default")
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
    ("stop", "\n"),
    ("stop", ["x"]),
]


@pytest.mark.parametrize("key,value", REFUSED)
def test_every_unsupported_field_is_refused_by_name(key: str, value: object) -> None:
    with pytest.raises(Unsupported, match=f"'{key}'") as e:
        req(**{key: value})
    assert e.value.param == key


ALLOWED = [("n", 1), ("n", None), ("best_of", 1), ("best_of", None), ("logprobs", False)]
ALLOWED += [("logprobs", 0), ("echo", False), ("tools", None), ("stop", None), ("stop", [])]
ALLOWED += [("stop", ""), ("logit_bias", None), ("suffix", None), ("top_logprobs", 0)]


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
    with pytest.raises(InputError, match="^request body: expected a JSON object$"):
        to_request([1, 2], False, None)
    for bad in (None, 5, [1, "a"], {"a": 1}):
        with pytest.raises(InputError, match="^field 'prompt': expected a string or a list"):
            to_request({"prompt": bad}, False, None)
    r, stream = to_request({"prompt": [1], "stream": True}, False, None)
    assert stream is True and r.prompt_ids == [1] and len(r.id) == 16
    assert to_request({"prompt": [1]}, False, None)[1] is False
    other, _ = to_request({"prompt": [1]}, False, None)
    assert other.id != r.id  # a fresh id per request


def test_text_prompts_and_messages_go_through_the_tokenizer() -> None:
    from pathlib import Path

    from engine.model.tokenizer import Tokenizer

    tok = Tokenizer(Path(__file__).resolve().parents[2] / "fixtures" / "models" / "tiny-qwen3")
    r, _ = to_request({"prompt": "The gate runner"}, False, tok)
    assert r.prompt_ids == tok.encode("The gate runner")
    messages = [{"role": "user", "content": "Name a prime."}]
    chat, _ = to_request({"messages": messages}, True, tok)
    want = tok.encode(tok.apply_chat_template(messages, add_generation_prompt=True))
    assert chat.prompt_ids == want
    with pytest.raises(InputError, match="^request body: 'messages' must be a list"):
        to_request({"messages": "hi"}, True, tok)


def test_errors_name_the_request_body_and_say_what_is_supported() -> None:
    with pytest.raises(InputError, match="^request body: field 'max_tokens' must be >= 1$"):
        req(max_tokens=0)
    with pytest.raises(Unsupported, match="^field 'n': only n = 1 is supported$"):
        req(n=3)
    with pytest.raises(Unsupported, match="^field 'best_of': only 1 is supported$"):
        req(best_of=3)
    want = "^field 'stop': stop strings are not supported; use stop_ids$"
    with pytest.raises(Unsupported, match=want):
        req(stop="x")
