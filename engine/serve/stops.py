"""Stop strings and streamed text. Tokens stay the engine's own: a stop string ends the
request at the first generated token whose decoded text holds it (the ids are a prefix of
the same request's ids without ``stop``); the text is cut where the stop string starts.
While streaming, text that could be the start of a stop string is held back."""

from __future__ import annotations

from typing import Any


class StopScan:
    """Finds the first prefix of the generated ids whose text holds a stop string."""

    def __init__(self, tokenizer: Any, stops: list[str]) -> None:
        self.tokenizer, self.stops = tokenizer, stops
        self.checked = 0  # ids already looked at

    def cut(self, ids: list[int]) -> tuple[int, str] | None:
        """(tokens to keep, text before the stop) for the first hit in ``ids``, or None."""
        for k in range(self.checked + 1, len(ids) + 1):
            text = self.tokenizer.decode(ids[:k])
            at = [text.find(s) for s in self.stops if s in text]
            if at:
                return k, text[: min(at)]
        self.checked = len(ids)
        return None


class TextStream:
    """The text deltas of a stream: a stable prefix each time (an incomplete UTF-8
    sequence and a possible start of a stop string held back), the rest at the end."""

    def __init__(self, tokenizer: Any, stops: list[str]) -> None:
        self.tokenizer, self.stops = tokenizer, stops
        self.ids: list[int] = []
        self.shown = ""

    def feed(self, new: list[int]) -> str:
        self.ids.extend(new)
        if self.tokenizer is None:
            return ""
        text = self.tokenizer.decode(self.ids).rstrip("\ufffd")
        found = [text.find(s) for s in self.stops if s in text]
        text = text[: min(found)] if found else text[: len(text) - self._held(text)]
        if not text.startswith(self.shown):
            return ""  # the decoder rewrote what was shown: wait for the end
        delta, self.shown = text[len(self.shown) :], text
        return delta

    def end(self, final: str) -> str:
        """The rest of the text, given the whole final text."""
        delta = final[len(self.shown) :] if final.startswith(self.shown) else ""
        self.shown = final
        return delta

    def _held(self, text: str) -> int:
        """Length of the longest end of ``text`` that starts some stop string."""
        held = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(text)), held, -1):
                if text.endswith(s[:n]):
                    held = n
                    break
        return held
