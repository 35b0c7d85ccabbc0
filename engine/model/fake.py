"""A fake backend: the next token is a hash of the whole fed history.

It stores fed token ids in pages exactly where a real model stores K/V rows, so lanes,
paging, prefix reuse and rollback are exercised as on the real model, at no cost. Each
forward advances an optional fake clock by a cost per row, for scheduler tests.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from engine.model.config import ModelConfig
from engine.model.qwen3 import Segment, SegmentOut


class TokenStore:
    def __init__(self, pages: int, page_rows: int) -> None:
        self.page_rows = page_rows
        self.ids = np.full((pages, page_rows), -1, dtype=np.int64)

    def write(self, pages: list[int], start: int, tokens: np.ndarray) -> None:
        pos = np.arange(start, start + len(tokens))
        self.ids[np.asarray(pages)[pos // self.page_rows], pos % self.page_rows] = tokens

    def open_lane(self, lane: int, pages: list[int], rows: int) -> None:
        pass

    def read(self, pages: list[int], length: int) -> np.ndarray:
        used = -(-length // self.page_rows)
        return self.ids[np.asarray(pages[:used], dtype=np.int64)].reshape(-1)[:length]


class FakeModel:
    def __init__(
        self,
        config: ModelConfig,
        clock: Any = None,
        seconds_per_row: float = 0.0,
        seconds_per_forward: float = 0.0,
    ) -> None:
        self.config = config
        self.clock = clock
        self.seconds_per_row = seconds_per_row
        self.seconds_per_forward = seconds_per_forward
        self.forwards = 0

    def new_kv(
        self, pages: int, page_rows: int, kind: str, lanes: int = 1, lane_rows: int = 0
    ) -> TokenStore:
        return TokenStore(pages, page_rows)

    def logits_for(self, history: np.ndarray) -> np.ndarray:
        digest = hashlib.sha256(history.astype(np.int64).tobytes()).digest()
        vocab = self.config.vocab_size
        first = int.from_bytes(digest[:8], "little") % vocab
        second = int.from_bytes(digest[8:16], "little") % vocab
        logits = np.zeros(vocab, dtype=np.float32)
        logits[second] = 1.0
        logits[first] = 2.0 + (digest[16] / 255.0)
        return logits

    def forward(
        self, segments: list[Segment], kv: TokenStore, taps: tuple[int, ...] = ()
    ) -> list[SegmentOut]:
        self.forwards += 1
        rows = sum(len(s.tokens) for s in segments)
        if self.clock is not None:
            self.clock.advance(self.seconds_per_forward + self.seconds_per_row * rows)
        outs = []
        for seg in segments:
            kv.write(seg.pages, seg.start, seg.tokens)
            history = kv.read(seg.pages, seg.start + len(seg.tokens))
            logits = (
                np.stack([self.logits_for(history[: seg.start + r + 1]) for r in seg.logit_rows])
                if len(seg.logit_rows)
                else None
            )
            hidden = np.zeros((len(seg.logit_rows), 8), dtype=np.float32)
            outs.append(SegmentOut(logits=logits, hidden=hidden))
        return outs
