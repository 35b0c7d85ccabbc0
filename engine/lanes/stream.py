"""A stream: one request from admission to finish, holding one lane."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.kv.plan import LaneRun
from engine.lanes.request import Request
from engine.lanes.sampling import sample


@dataclass
class Stream:
    sid: int
    req: Request
    long: bool
    run: LaneRun | None = None
    tokens: list[int] = field(default_factory=list)
    fed: int = 0
    margins: list[float] = field(default_factory=list)
    logit_hashes: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    error_code: str | None = None  # a machine-readable kind of error (context_length_exceeded)
    embedding: np.ndarray | None = None
    passed_over: int = 0
    drafted: int = 0
    accepted: int = 0
    rounds: int = 0
    cancel_requested: bool = False
    prefix_keys: tuple[bytes, ...] | None = None  # PagePlan.prefix_keys of the prompt, kept

    def choose(self, logits: np.ndarray, position: int) -> int:
        """The token this stream takes from a logits row at absolute ``position``: the
        engine's sampling rule (``Engine._emit``), for a drafter that predicts it (the oracle)
        without importing lanes."""
        return sample(logits, self.req.temperature, self.req.seed, position)

    @property
    def prompt_len(self) -> int:
        return len(self.req.prompt_ids)

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.prompt_len :]

    @property
    def generated_count(self) -> int:
        """len(generated), without making the list: the engine asks it per stream and round."""
        return max(0, len(self.tokens) - self.prompt_len)

    @property
    def prefilling(self) -> bool:
        return self.fed < self.prompt_len

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def rows_left(self) -> int:
        return self.prompt_len - self.fed
