"""The HTTP front: /v1/completions, /v1/chat/completions (plain or SSE), /v1/models,
/metrics and /health, on the standard library's threading HTTP server."""

from __future__ import annotations

import json
import queue
import select
import socket
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from engine.errors import InputError
from engine.lanes.stream import Stream
from engine.serve import openai
from engine.serve.worker import EngineWorker

MAX_BODY = 4 << 20  # bytes of a request body
POLL_S = 0.05  # how often a waiting non-streaming handler looks for a closed connection


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"
    timeout = 30  # seconds a client may take to send its headers and body

    def log_message(self, fmt: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(fmt, *args)

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client left before its reply

    def _error(self, status: int, message: str, param: str | None = None) -> None:
        """The OpenAI error shape: {"error": {"message", "type", "param", "code"}}."""
        kind = "invalid_request_error" if status < 500 else "server_error"
        body = {"message": message, "type": kind, "param": param, "code": None}
        self._send(status, {"error": body})

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, {"status": "ok"})
        elif self.path == "/metrics":
            self._send(200, self.server.worker.metrics())
        elif self.path == "/v1/models":
            self._send(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": self.server.model_name,
                            "object": "model",
                            "owned_by": "exact-engine",
                        }
                    ],
                },
            )
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:
        chat = self.path == "/v1/chat/completions"
        if not chat and self.path != "/v1/completions":
            self._error(404, f"no route {self.path}")
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self.close_connection = True  # the body cannot be read past: drop the connection
            self._error(400, f"Content-Length: expected 0..{MAX_BODY} bytes")
            return
        try:
            body = json.loads(self.rfile.read(length) or b"null")
            request, stream = openai.to_request(body, chat, self.server.tokenizer)
        except json.JSONDecodeError as exc:
            self._error(400, f"request body: not valid JSON ({exc.msg})")
            return
        except openai.Unsupported as exc:
            self._error(400, str(exc), exc.param)
            return
        except (InputError, ValueError) as exc:
            self._error(400, str(exc))
            return
        ticket = self.server.worker.submit(request)
        if stream:
            self._stream(ticket, chat)
            return
        checked = time.monotonic()
        while True:
            try:
                item = ticket.updates.get(timeout=POLL_S)
            except queue.Empty:
                item = None
            if time.monotonic() - checked >= POLL_S:  # tokens keep coming: look anyway
                checked = time.monotonic()
                if self._client_left():
                    self.server.worker.cancel(ticket)  # nobody waits for it: free its lane
                    self.close_connection = True
                    return
            if isinstance(item, Stream):
                status = 400 if item.finish_reason == "error" else 200
                self._send(
                    status,
                    openai.completion(item, self.server.tokenizer, chat, self.server.model_name),
                )
                return

    def _client_left(self) -> bool:
        """True when the client closed its end (readable with nothing to read)."""
        try:
            ready, _, _ = select.select([self.connection], [], [], 0)
            return bool(ready) and not self.connection.recv(1, socket.MSG_PEEK)
        except OSError:
            return True

    def _stream(self, ticket: Any, chat: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        tok, name = self.server.tokenizer, self.server.model_name
        ids: list[int] = []
        shown = ""
        try:
            while True:
                item = ticket.updates.get()
                if isinstance(item, Stream):
                    text = tok.decode(ids) if tok else ""
                    self._event(
                        openai.chunk(item.req.id, text[len(shown) :], None, chat, name, item)
                    )
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.close_connection = True
                    return
                ids.extend(item.ids)
                text = tok.decode(ids) if tok else ""
                stable = text.rstrip("\ufffd")  # hold back an incomplete UTF-8 sequence
                self._event(openai.chunk(ticket.request.id, stable[len(shown) :], item, chat, name))
                shown = stable
        except (BrokenPipeError, ConnectionResetError):
            self.server.worker.cancel(ticket)  # the client left: free its lane

    def _event(self, obj: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the listen backlog (the default 5 reset clients under load)

    def __init__(
        self,
        address: tuple[str, int],
        worker: EngineWorker,
        tokenizer: Any,
        model_name: str,
        verbose: bool = False,
    ) -> None:
        super().__init__(address, Handler)
        self.worker = worker
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.verbose = verbose
