"""The engine loop on its own thread. HTTP handlers hand it requests and cancels through an
inbox and wait on per-request tickets; only this thread touches the Engine."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any

from engine.lanes.engine import Engine
from engine.lanes.request import Request
from engine.lanes.stream import Stream


@dataclass
class Chunk:
    """Tokens generated since the last chunk, with the bits behind each (docs/contract.md)."""

    ids: list[int]
    margins: list[float]
    logit_hashes: list[str]


@dataclass
class Ticket:
    request: Request
    updates: queue.Queue = field(default_factory=queue.Queue)  # Chunks, then the Stream
    stream: Stream | None = None


METRICS_KEYS = (
    "pages_in_use", "unplanned_allocations", "cached_pages", "live_streams", "waiting_streams",
    "drafter_states", "prefill_tokens", "decode_tokens", "rounds", "steps",
)  # fmt: skip


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

    def submit(self, request: Request) -> Ticket:
        ticket = Ticket(request)
        self.inbox.put(("submit", ticket))
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        self.inbox.put(("cancel", ticket))

    def metrics(self) -> dict[str, Any]:
        with self.lock:
            e = self.engine
            return {
                "pages_in_use": e.plan.pages_in_use,
                "unplanned_allocations": e.plan.unplanned_allocations,
                "cached_pages": e.plan.cached_pages,
                "live_streams": len(e.live),
                "waiting_streams": len(e.waiting),
                "drafter_states": len(getattr(e.drafter, "states", {})),
                **e.stats,
            }

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
        for sid, ticket in list(self.tickets.items()):
            s = ticket.stream
            start = self.sent[sid]
            new = s.generated[start:]
            if new:
                self.sent[sid] += len(new)
                end = start + len(new)
                ticket.updates.put(
                    Chunk(list(new), s.margins[start:end], s.logit_hashes[start:end])
                )
            if s.done:
                ticket.updates.put(s)
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
