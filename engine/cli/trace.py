"""`run --trace PATH`: one JSONL row per Engine action, written from the on_event hook
(docs/contract.md, "The trace"). Nothing here runs unless --trace is given."""

from __future__ import annotations

import json
from typing import IO, Any

from engine.lanes.engine import Engine, Event
from engine.lanes.stream import Stream


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 6)


class TraceWriter:
    """An Engine.on_event hook; `streams` are all submitted streams (unique request ids)."""

    def __init__(self, out: IO[str], streams: list[Stream]) -> None:
        self.out = out
        self.by_sid = {s.sid: s for s in streams}
        self.count = 0

    def _id(self, sid: int) -> str:
        return self.by_sid[sid].req.id

    def row(self, event: Event) -> dict[str, Any]:
        phases = {v.id: v.phase for v in event.views}
        stepped = event.streams[0] if event.kind != "round" else None
        arrived = {}
        for sid in event.arrived:
            phase = phases.get(sid) or ("long" if self.by_sid[sid].long else "short")
            arrived[self._id(sid)] = "long" if phase == "long" else "short"
        return {
            "event": self.count,
            "t_ms": _ms(event.start),
            "ms": _ms(event.seconds),
            "kind": event.kind,
            "decoding": [self._id(i) for i in sorted(phases) if phases[i] == "decoding"],
            "decoded": [self._id(i) for i in sorted(event.streams)] if stepped is None else [],
            "stepped": {} if stepped is None else {self._id(stepped): event.rows},
            "waiting": [
                self._id(i) for i in sorted(phases) if phases[i] != "decoding" and i != stepped
            ],
            "arrived": arrived,
            "debt_ms": _ms(event.debt),
            "first_token": [self._id(i) for i in event.first_token],
            "finished": {self._id(i): self.by_sid[i].finish_reason for i in event.finished},
        }

    def __call__(self, engine: Engine, event: Event) -> None:
        self.out.write(json.dumps(self.row(event)) + "\n")
        self.count += 1
