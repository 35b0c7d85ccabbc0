"""The engine loop on its own thread. HTTP handlers hand it requests and cancels through an
inbox and wait on per-request tickets; only this thread touches the Engine."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.lanes.engine import Engine
from engine.lanes.metrics import COUNTER_KEYS, counters
from engine.lanes.request import Request
from engine.lanes.stream import Stream
from engine.serve.stops import StopScan


@dataclass
class Chunk:
    """Tokens generated since the last chunk, with the bits behind each (docs/contract.md)."""

    ids: list[int]
    margins: list[float]
    logit_hashes: list[str]


@dataclass
class Done:
    """A finished request as the server replies it: a stream's fields, its tokens cut at a
    stop string (``text``: the text before it; None: decode the tokens)."""

    req: Request
    generated: list[int]
    margins: list[float]
    logit_hashes: list[str]
    finish_reason: str
    prompt_len: int
    drafted: int
    accepted: int
    error: str | None = None
    error_code: str | None = None
    text: str | None = None

    @classmethod
    def of(cls, s: Stream, cut: tuple[int, str] | None = None) -> Done:
        k = cut[0] if cut else len(s.generated)
        reason = "stop" if cut else str(s.finish_reason)
        return cls(
            s.req, s.generated[:k], s.margins[:k], s.logit_hashes[:k], reason, s.prompt_len,
            s.drafted, s.accepted, s.error, s.error_code, cut[1] if cut else None,
        )  # fmt: skip


@dataclass
class Ticket:
    request: Request
    stop: StopScan | None = None
    updates: queue.Queue = field(default_factory=queue.Queue)  # Chunks, then a Done
    post: Callable[[Any], None] | None = None  # None: put on ``updates``
    stream: Stream | None = None

    def send(self, item: Chunk | Done) -> None:
        (self.post or self.updates.put)(item)


# what /metrics returns: the engine's counters, then the streams holding a lane or queued
SERVE_METRICS_KEYS = (*COUNTER_KEYS, "live_streams", "waiting_streams")


class EngineWorker:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.inbox: queue.Queue = queue.Queue()
        self.tickets: dict[int, Ticket] = {}
        self.sent: dict[int, int] = {}
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, name="engine-loop", daemon=True)
        self.stopping = False

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping = True
        self.inbox.put(None)
        self.thread.join(timeout=10)

    def submit(
        self,
        request: Request,
        stop: StopScan | None = None,
        post: Callable[[Any], None] | None = None,
    ) -> Ticket:
        ticket = Ticket(request, stop=stop, post=post)
        self.inbox.put(("submit", ticket))
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        self.inbox.put(("cancel", ticket))

    def metrics(self) -> dict[str, Any]:
        with self.lock:
            e = self.engine
            return {**counters(e), "live_streams": len(e.live), "waiting_streams": len(e.waiting)}

    def _take(self, item: Any) -> None:
        kind, ticket = item
        if kind == "submit":
            ticket.request.arrival = self.engine.clock.now() - self.engine.t0
            ticket.stream = self.engine.submit(ticket.request)
            self.tickets[ticket.stream.sid] = ticket
            self.sent[ticket.stream.sid] = 0
        elif ticket.stream is not None:
            self.engine.cancel(ticket.request.id)

    def _publish(self) -> None:
        """New tokens of the streams the last action touched (live or just finished): the
        thousands of queued ones cost nothing here."""
        for s in [*self.engine.live, *self.engine.finished]:
            sid = s.sid
            ticket = self.tickets.get(sid)
            if ticket is None:
                continue
            start = self.sent[sid]
            cut = ticket.stop.cut(s.generated) if ticket.stop and not s.error else None
            if cut:
                self.engine.cancel(ticket.request.id)  # acted on before the next action
            end = cut[0] if cut else len(s.generated)
            if end > start:
                self.sent[sid] = end
                ticket.send(Chunk(s.generated[start:end], s.margins[start:end],
                                  s.logit_hashes[start:end]))  # fmt: skip
            if s.done or cut:
                ticket.send(Done.of(s, cut))
                del self.tickets[sid], self.sent[sid]

    def _loop(self) -> None:
        while not self.stopping:
            block = self.engine.idle
            try:
                item = self.inbox.get(block=block, timeout=None if block else 0)
            except queue.Empty:
                item = ()
            if item is None:
                break
            while item:
                self._take(item)
                try:
                    item = self.inbox.get_nowait()
                except queue.Empty:
                    item = ()
                if item is None:
                    return
            with self.lock:
                self.engine.step()
                self.engine.events.clear()  # a server keeps no history
            self._publish()
            self.engine.finished.clear()
