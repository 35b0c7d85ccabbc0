"""The served API is strict: a schema with strict types (a string is not a bool), unknown
fields and models refused in OpenAI's error shape, 405 with Allow, JSON on every error;
and stop strings cut the text while the token ids stay a prefix of the solo run's."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
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
PROMPT = "The quick brown fox jumps over"


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


def call(url: str, body: bytes | None = None, method: str = "POST") -> tuple[int, dict, dict]:
    req = urllib.request.Request(url, data=body, method=method)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            raw, status, headers = resp.read(), resp.status, dict(resp.headers)
    except urllib.error.HTTPError as exc:
        raw, status, headers = exc.read(), exc.code, dict(exc.headers)
    return status, json.loads(raw) if raw else {}, headers


def post(server: str, body: dict, route: str = "/v1/completions") -> tuple[int, dict]:
    status, out, _ = call(server + route, json.dumps(body).encode())
    return status, out


def error_of(out: dict) -> dict:
    assert set(out) == {"error"} and set(out["error"]) == {"message", "type", "param", "code"}
    return out["error"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("stream", "false"),
        ("stream", 0),
        ("max_tokens", "5"),
        ("max_tokens", True),
        ("max_tokens", 2.0),
        ("temperature", "0.5"),
        ("seed", 1.5),
        ("stop", [""]),
        ("stop", ["a", "b", "c", "d", "e"]),
        ("stop_ids", [-1]),
        ("ignore_eos", "yes"),
        ("priority", "urgent"),
        ("n", 2),
        ("top_p", 0.5),
    ],
)
def test_wrong_types_and_values_are_400_naming_the_field(server, field, value):
    status, out = post(server, {"prompt": "hi", "max_tokens": 2, field: value})
    err = error_of(out)
    assert status == 400 and err["param"] == field and field in err["message"], out


def test_unknown_fields_are_400_and_an_unknown_model_is_404(server):
    status, out = post(server, {"prompt": "hi", "max_tokens": 2, "temprature": 0.5})
    assert status == 400 and error_of(out)["param"] == "temprature"
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "echo": True}
    status, out = post(server, chat, "/v1/chat/completions")  # echo is a completions field
    assert status == 400 and error_of(out)["param"] == "echo"
    status, out = post(server, {"prompt": "hi", "max_tokens": 2, "model": "gpt-4o"})
    err = error_of(out)
    assert status == 404 and err["code"] == "model_not_found" and "gpt-4o" in err["message"]
    status, out = post(server, {"prompt": "hi", "max_tokens": 2, "model": "tiny-qwen3"})
    assert status == 200 and out["model"] == "tiny-qwen3"


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/v1/completions", "POST"),
        ("PUT", "/v1/chat/completions", "POST"),
        ("DELETE", "/v1/completions", "POST"),
        ("POST", "/health", "GET, HEAD"),
        ("PATCH", "/metrics", "GET, HEAD"),
    ],
)
def test_a_wrong_method_is_405_with_allow_in_json(server, method, path, allow):
    status, out, headers = call(server + path, b"{}" if method != "GET" else None, method)
    assert status == 405 and headers["Allow"] == allow and method in error_of(out)["message"]


def test_every_error_is_json_even_for_malformed_http(server):
    status, out, _ = call(server + "/nowhere", None, "GET")
    assert status == 404 and "/nowhere" in error_of(out)["message"]
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 3\r\n\r\n{}x")  # no Host
        raw = s.recv(4096)
    head, body = raw.split(b"\r\n\r\n", 1)
    assert b" 400 " in head.splitlines()[0] and b"application/json" in head
    assert "Host" in error_of(json.loads(body))["message"]


def solo(model, prompt_ids: list[int], n: int) -> list[int]:
    engine = Engine(model, EngineConfig())
    engine.submit(Request("s", prompt_ids, n, ignore_eos=True))
    return engine.run()[0].generated


def events(server: str, body: dict) -> list[dict]:
    req = urllib.request.Request(
        server + "/v1/completions", data=json.dumps({**body, "stream": True}).encode()
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        lines = resp.read().decode().splitlines()
    return [json.loads(ln[6:]) for ln in lines if ln.startswith("data: {")]


def test_a_stop_string_cuts_the_text_and_keeps_the_ids_exact(server, model):
    tok = Tokenizer(TINY)
    full = solo(model, tok.encode(PROMPT), 24)
    text = tok.decode(full)
    stop = next(
        text[i : i + 3]
        for i in range(len(text) // 3, len(text) - 3)
        if text[i : i + 3].strip() and text.find(text[i : i + 3]) == i
    )
    k = next(k for k in range(1, 25) if stop in tok.decode(full[:k]))
    want_text = tok.decode(full[:k])[: tok.decode(full[:k]).find(stop)]
    body = {"prompt": PROMPT, "max_tokens": 24, "ignore_eos": True, "stop": [stop, "\x00never"]}
    status, out = post(server, body)
    choice = out["choices"][0]
    assert status == 200 and choice["finish_reason"] == "stop"
    assert choice["token_ids"] == full[:k] and choice["text"] == want_text
    assert len(choice["logit_hashes"]) == k and out["usage"]["completion_tokens"] == k
    evs = events(server, body)
    assert [t for e in evs for t in e["choices"][0]["token_ids"]] == full[:k]
    assert "".join(e["choices"][0]["text"] for e in evs) == want_text
    assert evs[-1]["choices"][0]["finish_reason"] == "stop"


@pytest.fixture(scope="module")
def impatient(model):
    """A server with short header and body deadlines."""
    worker = EngineWorker(Engine(model, EngineConfig(parallel=2)))
    worker.start()
    settings = Settings(worker, Tokenizer(TINY), "tiny-qwen3", body_timeout=0.5)
    srv = HttpServer(settings, "127.0.0.1", 0, header_timeout=0.5)
    yield srv.start()
    srv.stop()
    worker.stop()


def connect(base: str) -> socket.socket:
    host, port = base.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=20)


def test_a_client_that_never_finishes_its_headers_is_closed(impatient):
    with connect(impatient) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Ty")
        assert s.recv(4096) == b""  # closed by the server (well before the 20 s timeout)
    status, out, _ = call(impatient + "/health", None, "GET")
    assert status == 200


def test_a_body_that_never_comes_is_408(impatient):
    with connect(impatient) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{")
        raw = s.recv(4096)
    head, body = raw.split(b"\r\n\r\n", 1)
    assert b" 408 " in head.splitlines()[0] and "body" in error_of(json.loads(body))["message"]
