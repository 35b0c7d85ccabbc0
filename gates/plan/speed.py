"""What a matrix's ``speed:`` section may name: the metrics (each with its better side, as the
receipt shows it) and what gives one pair of values. The bench output they are read from is
gates/run/speed/schema.py."""

from __future__ import annotations

from dataclasses import dataclass

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
