"""A matrix's ``speed:`` section, typed (``SpeedSpec``, its defaults in one place), and what
it may name: the metrics (each with its better side, as the receipt shows it) and what gives
one pair of values. The bench output they are read from is gates/run/speed/schema.py."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gates.jsontypes import JsonObject

SAMPLE_PER = ("block", "repeat")  # what gives one pair of values: a block, or each repeat


@dataclass(frozen=True)
class Metric:
    label: str  # for the receipt
    better: str  # higher | lower
    scale: float = 1.0  # shown value = raw * scale
    unit: str = ""


METRICS = {
    "decode_cpu_s_per_token": Metric("decode CPU per token", "lower", 1000.0, "ms"),
    "prefill_cpu_s_per_token": Metric("prefill CPU per token", "lower", 1e6, "µs"),
    "decode_tok_s": Metric("decode", "higher", 1.0, "tok/s"),
    "prefill_tok_s": Metric("prefill", "higher", 1.0, "tok/s"),
    "cpu_s_per_token": Metric("CPU per token", "lower", 1000.0, "ms"),
    "ttft_ms": Metric("TTFT", "lower", 1.0, "ms"),
}
DEFAULT_METRICS = ("decode_cpu_s_per_token", "prefill_cpu_s_per_token", "decode_tok_s", "ttft_ms")


def label(metric: str, parallel: int) -> str:
    m = METRICS.get(metric)
    name = f"{m.label} ({m.unit})" if m else metric
    return f"{name} at {parallel} stream{'s' * (parallel != 1)}"


@dataclass(frozen=True)
class SpeedSpec:
    """The speed section after parsing (gates/plan/matrix.py checks every key and value)."""

    parallel: tuple[int, ...] = (1, 2, 4, 8)  # the stream counts of the sweep
    prompt_tokens: int = 128
    gen_tokens: int = 32
    repeats: int = 2  # timed runs per stream count and side in a block
    metrics: tuple[str, ...] = DEFAULT_METRICS
    blocks: int = 12  # blocks first run
    add_blocks: int = 6  # blocks added per look while a cell is open
    max_blocks: int = 36
    budget_s: float = 270  # seconds of blocks before stopping with cells open
    alpha: float = 0.05
    delta: float = 0.05  # the tolerated slowdown (a ratio)
    min_effect: float = 0.02
    quantile: float = 0.5  # of a timed run's per-token costs
    turn: int = 1  # timed runs per turn of a side
    timeout: int = 600  # seconds a bench process may take for one answer
    sample_per: str = "block"  # block or repeat (SAMPLE_PER)

    @property
    def per_repeat(self) -> bool:
        """``sample_per: repeat``: each repeat of a block is a pair of its own (a sample), so
        one pair of processes (their load and warm-up: most of a block's time on a small
        machine) gives ``repeats`` samples; ``block``: one sample per block."""
        return self.sample_per == "repeat"

    def to_json(self) -> JsonObject:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in vars(self).items()}

    @classmethod
    def from_json(cls, d: JsonObject) -> SpeedSpec:
        """A section as ``to_json`` wrote it (a key this runner does not know is left out)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in names}
        return cls(**kw)
