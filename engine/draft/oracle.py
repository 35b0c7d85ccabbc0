"""Test drafters: `oracle` is always right, `noisy` is right except at one index a round,
which cycles through 0..k so that every accepted length from 0 to k occurs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from engine.draft.lifecycle import LaneDrafter
from engine.errors import InputError


class OracleDrafter(LaneDrafter):
    """Knows each request's plain continuation: from a replies file (`--drafter-model`),
    a dict of ids, or, on the fake backend, by asking the fake model directly."""

    def __init__(self, truth: dict[str, list[int]] | None = None, model: Any = None) -> None:
        super().__init__()
        self.truth = truth
        self.model = model

    @classmethod
    def from_config(cls, cfg: Any, model: Any) -> OracleDrafter:
        if cfg.drafter_model:
            return cls(truth=read_replies(cfg.drafter_model))
        if not hasattr(model, "logits_for"):
            raise InputError(
                f"--drafter {cfg.drafter}: needs --drafter-model REPLIES.jsonl (a plain run's "
                "output) except on the fake backend"
            )
        return cls(model=model)

    def new_state(self, stream: Any, area: tuple[Any, int]) -> dict:
        return {"rounds": 0}

    def continuation(self, stream: Any, k: int) -> list[int]:
        done = len(stream.generated)
        if self.truth is not None:
            return list(self.truth.get(stream.req.id, [])[done : done + k])
        history = list(stream.tokens)
        out = []
        for _ in range(k):
            logits = self.model.logits_for(np.asarray(history))
            tok = stream.choose(logits, len(history))
            out.append(tok)
            history.append(tok)
        return out

    def propose(self, stream: Any, k: int) -> list[int]:
        state = self.states.get(stream.sid)
        if state is None:
            return []
        state["rounds"] += 1
        return self.continuation(stream, k)


class NoisyDrafter(OracleDrafter):
    def propose(self, stream: Any, k: int) -> list[int]:
        state = self.states.get(stream.sid)
        if state is None:
            return []
        drafts = self.continuation(stream, k)
        wrong = state["rounds"] % (k + 1)  # k: all right this round
        state["rounds"] += 1
        if wrong < len(drafts):
            drafts[wrong] = drafts[wrong] + 1 if drafts[wrong] > 0 else 1
        return drafts


def read_replies(path: str) -> dict[str, list[int]]:
    src = Path(path)
    if not src.is_file():
        raise InputError(f"--drafter-model {path}: not found (expected a replies JSONL)")
    truth = {}
    for number, line in enumerate(src.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            truth[str(obj["id"])] = [int(i) for i in obj["ids"]]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise InputError(f"{path}:{number}: expected a reply with 'id' and 'ids'") from None
    return truth
