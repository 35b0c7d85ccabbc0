"""Hostile matrices (checked against this engine's capabilities before any arm runs) and
hostile HTTP: each is refused with exit 2 / an HTTP error status and one clear line."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from engine.cli.capabilities import capabilities
from engine.config import EngineConfig
from engine.lanes.engine import Engine
from engine.model.loader import load_model
from engine.model.tokenizer import Tokenizer
from engine.serve.app import Settings
from engine.serve.runner import HttpServer
from engine.serve.worker import EngineWorker
from gates import BadInput
from gates.judge.kinds import KINDS
from gates.plan import matrix
from gates.run import validate
from gates.run.capabilities import Capabilities

TINY = Path(__file__).parents[2] / "fixtures" / "models" / "tiny-qwen3"
HEAD = "model: m\nprompts: p\n"

MATRICES = [
    ("axes: {parallel: [1, 100]}\n", "axes.parallel[1]"),
    ("parallel: [100]\n", "parallel"),
    ("axes: {parallel: [4]}\ngates: [{name: g, across_commits: {}, where: {parallel: 65}}]\n",
     "gates[0].where.parallel[0]"),
    ("speed: {parallel: [1, 500]}\n", "speed.parallel[1]"),
    ("axes: {kv: [fp4]}\n", "kv"),
    ("axes: {drafter: [warp]}\n", "drafter"),
    ("axes: {flags: [{ENGINE_NOPE: 1}]}\n", "ENGINE_NOPE"),
    ("axes: {parallel: [0]}\n", "parallel"),
    ("axes: {colour: [red]}\n", "colour"),
    ("gates: {name: g}\n", "gates"),
    ("timeout: soon\n", "timeout"),
    ("gates: [{name: g, served: {clients: 3}}]\n", "gates[0].served.clients"),
    ("gates: [{name: g, within_commit: {vary: colour}}]\n", "gates[0].within_commit.vary"),
    ("surprise: 1\n", "surprise"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "key"), MATRICES, ids=[k for _, k in MATRICES])
def test_a_bad_matrix_is_refused_before_any_arm(tmp_path, body, key):
    path = tmp_path / "m.yaml"
    rules = "" if "gates:" in body else "gates: [{name: g, across_commits: {}}]\n"
    path.write_text(HEAD + body + rules)
    with pytest.raises(BadInput) as err:
        m = matrix.load(path, KINDS)
        validate.against_capabilities(m, [Capabilities.from_json(capabilities())])
    line = str(err.value)
    assert "\n" not in line and key in line and str(path) in line, line


@pytest.mark.parametrize("text", ["{", "- a list\n", "model: [unclosed\n", ""])
def test_a_matrix_that_is_not_a_mapping_is_refused(tmp_path, text):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(BadInput) as err:
        matrix.load(path, KINDS)
    assert "\n" not in str(err.value).strip() and str(path) in str(err.value)


@pytest.fixture(scope="module")
def server():
    worker = EngineWorker(Engine(load_model(TINY), EngineConfig(parallel=2, context=256)))
    worker.start()
    settings = Settings(worker, Tokenizer(TINY), "tiny-qwen3", body_timeout=5)
    srv = HttpServer(settings, "127.0.0.1", 0, header_timeout=5)
    srv.start()
    yield srv.port
    srv.stop()
    worker.stop()


def exchange(port: int, raw: bytes) -> tuple[int, dict, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(raw)
        got = b""
        while b"\r\n\r\n" not in got or len(got.split(b"\r\n\r\n", 1)[1]) < _length(got):
            part = s.recv(65536)
            if not part:
                break
            got += part
    head, _, body = got.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body[: _length(got)] or b"{}"), head


def _length(got: bytes) -> int:
    head = got.split(b"\r\n\r\n", 1)[0].decode(errors="replace").lower()
    for line in head.splitlines():
        if line.startswith("content-length:"):
            return int(line.split(":")[1])
    return 0


def request(method: str, path: str, body: bytes = b"", extra: str = "") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{extra}"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def js(obj) -> bytes:
    return json.dumps(obj).encode()


OK = {"prompt": "hi", "max_tokens": 2}
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
C, CC = "/v1/completions", "/v1/chat/completions"
HTTP = [
    ("not-json", request("POST", C, b"{nope"), 400, "JSON"),
    ("a-list", request("POST", C, js([1])), 400, "object"),
    ("stream-string", request("POST", C, js({**OK, "stream": "false"})), 400, "stream"),
    ("unknown-field", request("POST", C, js({**OK, "best_off": 2})), 400, "best_off"),
    ("unknown-model", request("POST", C, js({**OK, "model": "gpt-5"})), 404, "gpt-5"),
    ("no-prompt", request("POST", C, js({"max_tokens": 2})), 400, "prompt"),
    ("empty-ids", request("POST", C, js({**OK, "prompt": []})), 400, "prompt"),
    ("max-tokens-0", request("POST", C, js({**OK, "max_tokens": 0})), 400, "max_tokens"),
    ("temperature-nan", request("POST", C, b'{"prompt": "hi", "temperature": NaN}'), 400,
     "temperature"),
    ("stop-5", request("POST", C, js({**OK, "stop": list("abcde")})), 400, "stop"),
    ("n-2", request("POST", C, js({**OK, "n": 2})), 400, "n"),
    ("past-context", request("POST", C, js({"prompt": [5] * 10, "max_tokens": 999})), 400,
     "context"),
    ("chat-bad-messages", request("POST", CC, js({"messages": [{"role": "user"}]})), 400,
     "messages"),
    ("chat-prompt", request("POST", CC, js({**CHAT, "prompt": "x"})), 400, "prompt"),
    ("chat-max-completion", request("POST", CC, js({**CHAT, "max_completion_tokens": "9"})),
     400, "max_completion_tokens"),
    ("get-on-post", request("GET", C), 405, "GET"),
    ("put", request("PUT", CC, b"{}"), 405, "PUT"),
    ("delete", request("DELETE", C), 405, "DELETE"),
    ("post-on-get", request("POST", "/metrics", b"{}"), 405, "POST"),
    ("no-route", request("GET", "/v2/everything"), 404, "/v2/everything"),
    ("too-large", b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 8388608\r\n\r\n",
     413, "larger"),
    ("no-host", b"GET /health HTTP/1.1\r\n\r\n", 400, "Host"),
    ("bad-length", b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: x\r\n\r\n", 400,
     "Content-Length"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "raw", "status", "word"), HTTP, ids=[h[0] for h in HTTP])
def test_hostile_http_is_an_error_status_with_one_json_line(server, name, raw, status, word):
    got, body, head = exchange(server, raw)
    err = body.get("error", {})
    assert set(err) == {"message", "type", "param", "code"}, body
    assert got == status and word in err["message"] and "\n" not in err["message"], body
    if status == 405:
        assert b"\r\nAllow: " in head
