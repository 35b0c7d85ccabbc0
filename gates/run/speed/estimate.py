"""One value per side, metric and stream count from the timed runs of one block.

A timed run reports each engine action (``actions``: kind, CPU and wall seconds, rows fed,
tokens made). Costs per token are taken per action and summarised by a quantile over all
actions of the block (``quantile``, 0.5 = the median): an action that another process
slowed down moves a mean but hardly a quantile, while a slower step moves them all.

* ``decode_cpu_s_per_token`` / ``decode_tok_s``: decoding rounds, CPU / wall seconds per token made;
* ``prefill_cpu_s_per_token`` / ``prefill_tok_s``: prompt steps, CPU / wall seconds per row fed;
* ``cpu_s_per_token``, ``ttft_ms``: one value per run (the whole run), their median.
"""

from __future__ import annotations

import numpy as np

from gates.run.speed.schema import TimedRun

PER_ACTION = {
    "decode_cpu_s_per_token": ("round", "cpu_s", "tokens", False),
    "decode_tok_s": ("round", "wall_s", "tokens", True),
    "prefill_cpu_s_per_token": ("step", "cpu_s", "rows", False),
    "prefill_tok_s": ("step", "wall_s", "rows", True),
}
PER_RUN = ("cpu_s_per_token", "ttft_ms")


def _costs(runs: list[TimedRun], kind: str, seconds: str, per: str) -> list[float]:
    out = []
    for r in runs:
        a = r.actions  # a run as printed (one read back from a manifest has none)
        for k, s, n in zip(a.kind, getattr(a, seconds), getattr(a, per), strict=True):
            if (k == "round") == (kind == "round") and n > 0 and s > 0:
                out.append(s / n)
    return out


def value(runs: list[TimedRun], metric: str, quantile: float) -> float:
    """The block's value of ``metric`` from its runs at one stream count (nan if none)."""
    if metric in PER_ACTION:
        kind, seconds, per, rate = PER_ACTION[metric]
        costs = _costs(runs, kind, seconds, per)
        if not costs:
            return float("nan")
        q = float(np.quantile(costs, quantile))
        return 1.0 / q if rate else q
    vals = [float(r.kept[metric]) for r in runs if r.kept.get(metric, 0) > 0]
    return float(np.median(vals)) if vals else float("nan")
