"""The OpenAI-compatible server on loopback: concurrent replies equal solo ones, bit for
bit; streaming gives the same ids; bad input is a 400; nothing is left in use at idle."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from engine.config import EngineConfig
from engine.lanes.engine import Engine
from engine.lanes.request import Request
from engine.model.loader import load_model
from engine.model.tokenizer import Tokenizer
from engine.serve.app import Settings
from engine.serve.runner import HttpServer
from engine.serve.worker import EngineWorker

TINY = Path(__file__).parents[2] / "fixtures" / "models" / "tiny-qwen3"
PROMPTS = ["Return the", "The quick brown fox jumps over", "x", "Raise ValueError if the " * 6]


@pytest.fixture(scope="module")
def model():
    return load_model(TINY)


@pytest.fixture(scope="module")
def server(model):
    worker = EngineWorker(Engine(model, EngineConfig(parallel=4, kv_pages=256)))
    worker.start()
    srv = HttpServer(Settings(worker, Tokenizer(TINY), "tiny-qwen3"), "127.0.0.1", 0)
    yield srv.start()
    srv.stop()
    worker.stop()


def post(url: str, body: dict, timeout: float = 60) -> tuple[int, bytes]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def solo(model, prompt: str, max_tokens: int, temperature: float = 0.0) -> list[int]:
    engine = Engine(model, EngineConfig())
    engine.submit(
        Request(
            id="s",
            prompt_ids=Tokenizer(TINY).encode(prompt),
            max_tokens=max_tokens,
            temperature=temperature,
            seed=5,
        )
    )
    return engine.run()[0].generated


def test_concurrent_requests_equal_solo(server, model):
    bodies = [
        {"prompt": p, "max_tokens": 12, "temperature": 0.7 * (i % 2), "seed": 5}
        for i, p in enumerate(PROMPTS * 2)
    ]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda b: post(server + "/v1/completions", b), bodies))
    for body, (status, raw) in zip(bodies, results, strict=True):
        assert status == 200
        out = json.loads(raw)
        ids = out["choices"][0]["token_ids"]
        assert ids == solo(model, body["prompt"], 12, body["temperature"])
        assert out["choices"][0]["text"] == Tokenizer(TINY).decode(ids)


def test_chat_and_streaming_give_the_same_ids(server):
    body = {"messages": [{"role": "user", "content": "Return the value"}], "max_tokens": 10}
    status, raw = post(server + "/v1/chat/completions", body)
    assert status == 200
    plain = json.loads(raw)["choices"][0]
    req = urllib.request.Request(
        server + "/v1/chat/completions", data=json.dumps({**body, "stream": True}).encode()
    )
    ids, text = [], ""
    with urllib.request.urlopen(req, timeout=60) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                choice = json.loads(line[6:])["choices"][0]
                ids += choice["token_ids"]
                text += choice["delta"]["content"]
    assert ids == plain["token_ids"] and text == plain["message"]["content"]


def test_bad_input_is_400_and_nothing_is_left_in_use(server):
    req = urllib.request.Request(server + "/v1/completions", data=b"{not json")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 400
    status, raw = post(server + "/v1/completions", {"prompt": 5})
    assert status == 400 and "prompt" in json.loads(raw)["error"]["message"]
    status, raw = post(server + "/v1/completions", {"prompt": "hi", "max_tokens": 5000})
    assert status == 400 and "context" in json.loads(raw)["error"]["message"]
    deadline = time.time() + 10
    while time.time() < deadline:
        with urllib.request.urlopen(server + "/metrics", timeout=10) as resp:
            metrics = json.loads(resp.read())
        if metrics["live_streams"] == 0:
            break
        time.sleep(0.05)
    assert metrics["pages_in_use"] == 0 and metrics["unplanned_allocations"] == 0


def metrics_of(server: str) -> dict:
    with urllib.request.urlopen(server + "/metrics", timeout=10) as resp:
        return json.loads(resp.read())


def test_errors_have_the_openai_shape_and_unsupported_fields_are_refused(server):
    for field, value in (("n", 2), ("logprobs", 3), ("top_p", 0.5), ("echo", True)):
        status, raw = post(server + "/v1/completions", {"prompt": "hi", field: value})
        err = json.loads(raw)["error"]
        assert status == 400 and err["param"] == field, raw
        assert set(err) == {"message", "type", "param", "code"}


def test_a_bad_content_length_is_400_not_a_hang(server):
    host, port = server.removeprefix("http://").split(":")
    for length, status in (("-1", b"400"), ("abc", b"400"), (str(1 << 30), b"413")):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            head = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n"
            s.sendall(head.encode())
            assert s.recv(64).split(b" ")[1] == status, length


def test_many_clients_at_once_are_all_answered(server):
    def one(i: int) -> int:
        return post(server + "/v1/completions", {"prompt": [5 + i], "max_tokens": 1})[0]

    with ThreadPoolExecutor(48) as pool:
        assert list(pool.map(one, range(48))) == [200] * 48


def test_a_client_that_leaves_frees_its_lane(server):
    before = metrics_of(server)["decode_tokens"]
    host, port = server.removeprefix("http://").split(":")
    body = json.dumps({"prompt": [7, 8, 9], "max_tokens": 1000, "ignore_eos": True}).encode()
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        time.sleep(0.02)  # it is generating
    deadline = time.time() + 20
    while time.time() < deadline and metrics_of(server)["live_streams"]:
        time.sleep(0.05)
    m = metrics_of(server)
    assert m["live_streams"] == 0 and m["pages_in_use"] == 0
    assert m["decode_tokens"] - before < 900  # cancelled, not run to max_tokens


def test_a_port_in_use_is_a_one_line_error(capsys):
    from engine.__main__ import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["serve", "--model", str(TINY), "--port", str(port)])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--port {port}" in err[0], err


def stream_events(url: str, body: dict) -> list[dict]:
    req = urllib.request.Request(url, data=json.dumps({**body, "stream": True}).encode())
    with urllib.request.urlopen(req, timeout=60) as resp:
        lines = resp.read().decode().splitlines()
    return [json.loads(ln[6:]) for ln in lines if ln.startswith("data: {")]


def test_replies_and_chunks_carry_the_bits_of_an_offline_reply(server, model):
    from engine.lanes.replies import reply

    engine = Engine(model, EngineConfig())
    tok = Tokenizer(TINY)
    engine.submit(Request("s", tok.encode(PROMPTS[1]), 9, temperature=0.6, seed=3))
    offline = reply(engine.run()[0], tok)
    body = {"prompt": PROMPTS[1], "max_tokens": 9, "temperature": 0.6, "seed": 3}
    status, raw = post(server + "/v1/completions", body)
    plain = json.loads(raw)
    choice = plain["choices"][0]
    assert status == 200 and choice["token_ids"] == offline["ids"]
    assert choice["margins"] == offline["margins"]
    assert choice["logit_hashes"] == offline["logit_hashes"]
    assert plain["token_sha"] == offline["token_sha"]
    events = stream_events(server + "/v1/completions", body)
    got = {k: [x for e in events for x in e["choices"][0][k]] for k in ("token_ids", "margins")}
    hashes = [x for e in events for x in e["choices"][0]["logit_hashes"]]
    assert got["token_ids"] == offline["ids"] and got["margins"] == offline["margins"]
    assert hashes == offline["logit_hashes"]
    assert events[-1]["token_sha"] == offline["token_sha"] and events[-1]["drafted"] == 0
