"""The app on a listening socket, with its event loop: in the foreground until SIGINT or
SIGTERM (``engine serve``), or on a thread of its own (tests, the load test).

Deadlines: a connection must finish a request's headers within ``header_timeout`` seconds
of opening (or of its previous reply), else it is closed (aiohttp's keep-alive timer runs
from the connection's start and fires while no request is parsed); a body must arrive within
the app's ``body_timeout`` (408). A client that disconnects cancels its handler, which
cancels its request in the engine."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable

from aiohttp import web

from engine.serve.app import Server, Settings, dispatcher

BACKLOG = 8192  # the listen backlog: thousands of clients may connect at once


class HttpServer:
    def __init__(
        self,
        settings: Settings,
        host: str,
        port: int,
        header_timeout: float = 30.0,
        verbose: bool = False,
    ) -> None:
        self.settings, self.host, self.port = settings, host, port
        self.header_timeout, self.verbose = header_timeout, verbose
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    async def _run(self, ready: Callable[[HttpServer], None]) -> None:
        self.loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        server = Server(
            dispatcher(self.settings),
            access_log=logging.getLogger("aiohttp.access") if self.verbose else None,
            keepalive_timeout=self.header_timeout,
            handler_cancellation=True,
        )
        runner = web.ServerRunner(server, shutdown_timeout=2.0)  # SIGTERM: gone in seconds
        if not self.verbose:  # a malformed request is answered 400; no traceback in the log
            logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port, backlog=BACKLOG)
            await site.start()
            self.port = runner.addresses[0][1]
            ready(self)
            await self._stop.wait()
        finally:
            await runner.cleanup()

    def serve(self, ready: Callable[[HttpServer], None]) -> None:
        """In the foreground until SIGINT or SIGTERM; ``ready`` once it listens (OSError:
        the address cannot be bound)."""

        async def main() -> None:
            loop = asyncio.get_running_loop()
            task = asyncio.create_task(self._run(ready))
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self.stop)
            await task

        asyncio.run(main())

    def start(self) -> str:
        """On a thread of its own; the base URL once it listens."""
        up = threading.Event()
        failed: list[BaseException] = []

        def body() -> None:
            try:
                asyncio.run(self._run(lambda _: up.set()))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                failed.append(exc)
                up.set()

        self._thread = threading.Thread(target=body, name="http", daemon=True)
        self._thread.start()
        up.wait()
        if failed:
            raise failed[0]
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        if self.loop is not None and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
