"""The HTTP front on aiohttp (docs/serving.md says why): /v1/completions and
/v1/chat/completions (plain or SSE), /v1/models, /metrics and /health. Handlers are
coroutines on one event loop; the engine runs on the worker's thread and hands tokens back
with ``call_soon_threadsafe``. Every error, on every route, is OpenAI's JSON error shape."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from aiohttp import web

from engine.serve import openai
from engine.serve.schema import Invalid
from engine.serve.stops import StopScan, TextStream
from engine.serve.worker import Chunk, Done, EngineWorker

MAX_BODY = 4 << 20  # bytes of a request body


@dataclass
class Settings:
    worker: EngineWorker
    tokenizer: Any
    model_name: str
    body_timeout: float = 30.0  # seconds a client may take to send its body


def error(status: int, message: str, param: str | None = None, code: Any = None, **kw: Any):
    """OpenAI's error shape: {"error": {"message", "type", "param", "code"}}."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status, **kw)


class JsonErrors(web.RequestHandler):
    """A connection whose malformed requests (no Host, a bad Content-Length, ...) are
    answered in the same JSON shape as every route's errors."""

    def handle_error(
        self, request: Any, status: int = 500, exc: Any = None, message: str | None = None
    ) -> web.StreamResponse:
        why = getattr(exc, "message", None) or message or HTTPStatus(status).phrase
        resp = error(status, f"malformed HTTP request: {str(why).splitlines()[0]}")
        resp.force_close()
        return resp


class Server(web.Server):
    """aiohttp's low-level server, its connections ``JsonErrors``."""

    def __init__(self, handler: Any, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self.handler_kwargs = {k: v for k, v in kwargs.items() if k != "handler_cancellation"}

    def __call__(self) -> web.RequestHandler:
        return JsonErrors(self, loop=asyncio.get_running_loop(), **self.handler_kwargs)


Handler = Callable[[web.BaseRequest, Settings], Awaitable[web.StreamResponse]]


async def health(request: web.BaseRequest, st: Settings) -> web.StreamResponse:
    return web.json_response({"status": "ok"})


async def metrics(request: web.BaseRequest, st: Settings) -> web.StreamResponse:
    loop = asyncio.get_running_loop()  # the worker's lock waits for a round: not on the loop
    return web.json_response(await loop.run_in_executor(None, st.worker.metrics))


async def models(request: web.BaseRequest, st: Settings) -> web.StreamResponse:
    data = [{"id": st.model_name, "object": "model", "owned_by": "exact-engine"}]
    return web.json_response({"object": "list", "data": data})


async def _read(request: web.BaseRequest) -> bytes:
    if (request.content_length or 0) > MAX_BODY:
        raise Invalid(f"request body: larger than {MAX_BODY} bytes", None, 413)
    raw = bytearray()
    async for part in request.content.iter_any():
        raw += part
        if len(raw) > MAX_BODY:
            raise Invalid(f"request body: larger than {MAX_BODY} bytes", None, 413)
    return bytes(raw)


async def _body(request: web.BaseRequest, timeout: float) -> Any:
    try:
        async with asyncio.timeout(timeout):
            raw = await _read(request)
    except TimeoutError:
        raise Invalid(f"request body: not received within {timeout:g} s", None, 408) from None
    try:
        return json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise Invalid(f"request body: not valid JSON ({exc})", None) from None


async def completions(request: web.BaseRequest, st: Settings) -> web.StreamResponse:
    return await _complete(request, st, chat=False)


async def chat_completions(request: web.BaseRequest, st: Settings) -> web.StreamResponse:
    return await _complete(request, st, chat=True)


async def _complete(request: web.BaseRequest, st: Settings, chat: bool) -> web.StreamResponse:
    body = await _body(request, st.body_timeout)
    parsed = openai.to_request(body, chat, st.tokenizer, st.model_name)
    loop, updates = asyncio.get_running_loop(), asyncio.Queue()

    def post(item: Chunk | Done) -> None:
        loop.call_soon_threadsafe(updates.put_nowait, item)

    stop = StopScan(st.tokenizer, parsed.stops) if parsed.stops else None
    ticket = st.worker.submit(parsed.request, stop=stop, post=post)
    finished = False
    try:
        first = await updates.get()
        if isinstance(first, Done) and first.error:  # refused at submission (context, ...)
            finished = True
            return web.json_response(openai.completion(first, st.tokenizer, chat, ""), status=400)
        if parsed.stream:
            rid = parsed.request.id
            resp = await _stream(request, st, rid, first, updates, chat, parsed.stops)
            finished = True
            return resp
        item = first
        while not isinstance(item, Done):
            item = await updates.get()
        finished = True
        return web.json_response(openai.completion(item, st.tokenizer, chat, st.model_name))
    finally:
        if not finished:  # the client left (the handler is cancelled) or a write failed
            st.worker.cancel(ticket)


async def _stream(
    request: web.BaseRequest,
    st: Settings,
    rid: str,
    item: Chunk | Done,
    updates: asyncio.Queue,
    chat: bool,
    stops: list[str],
) -> web.StreamResponse:
    """Server-sent events until the Done."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    resp.headers["Cache-Control"] = "no-cache"
    await resp.prepare(request)
    text = TextStream(st.tokenizer, stops)
    while not isinstance(item, Done):
        delta = text.feed(item.ids)
        await _event(resp, openai.chunk(rid, delta, item, chat, st.model_name))
        item = await updates.get()
    delta = text.end(openai.final_text(item, st.tokenizer))
    await _event(resp, openai.chunk(rid, delta, None, chat, st.model_name, item))
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def _event(resp: web.StreamResponse, obj: dict[str, Any]) -> None:
    await resp.write(b"data: " + json.dumps(obj).encode() + b"\n\n")


ROUTES: dict[str, dict[str, Handler]] = {
    "/health": {"GET": health},
    "/metrics": {"GET": metrics},
    "/v1/models": {"GET": models},
    "/v1/completions": {"POST": completions},
    "/v1/chat/completions": {"POST": chat_completions},
}


def dispatcher(st: Settings) -> Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]:
    """The one handler of the low-level server: route, method, and JSON errors."""

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        methods = ROUTES.get(request.path)
        if methods is None:
            return error(404, f"no route {request.method} {request.path[:200]}")
        method = "GET" if request.method == "HEAD" else request.method
        handler = methods.get(method)
        if handler is None:
            allow = ", ".join([*methods, "HEAD"] if "GET" in methods else methods)
            message = f"method {request.method} not allowed on {request.path} (allowed: {allow})"
            return error(405, message, headers={"Allow": allow})
        try:
            return await handler(request, st)
        except Invalid as exc:
            return error(exc.status, exc.message, exc.param, exc.code)

    return handle
