"""gates/run/speed/estimate.py on small hand-made runs: which actions count, on their edges."""

from __future__ import annotations

import math
import warnings

from gates.run.speed import estimate
from gates.run.speed.schema import Actions, TimedRun


def run(kinds, cpu, rows, tokens, wall=None, **row) -> TimedRun:
    acts = Actions(tuple(kinds), tuple(cpu), tuple(wall or cpu), tuple(rows), tuple(tokens))
    return TimedRun(1, row, acts)


def test_rounds_are_decode_and_every_other_kind_is_a_prompt_step() -> None:
    r = run(["short", "long", "round", "verify"], [0.5, 2.0, 0.75, 0.5], [2, 4, 3, 4], [0, 1, 3, 2])
    # decode: the round only (0.75 / 3); prefill: short, long and verify, per row
    assert estimate.value([r], "decode_cpu_s_per_token", 0.5) == 0.25
    assert estimate.value([r], "prefill_cpu_s_per_token", 0.0) == 0.125
    assert estimate.value([r], "prefill_cpu_s_per_token", 1.0) == 0.5
    assert estimate.value([r], "decode_tok_s", 0.5) == 4.0  # a rate: 1 / (wall per token)


def test_actions_with_no_tokens_or_no_seconds_are_left_out() -> None:
    r = run(["round", "round", "round"], [0.0, 0.75, 0.5], [1, 1, 1], [4, 0, 2])
    assert estimate.value([r], "decode_cpu_s_per_token", 0.5) == 0.25  # only 0.5 / 2
    assert math.isnan(estimate.value([run(["round"], [0.0], [1], [1])], "decode_tok_s", 0.5))


def test_the_quantile_is_over_every_action_of_every_run() -> None:
    a = run(["round"] * 2, [1.0, 2.0], [1, 1], [1, 1])
    b = run(["round"] * 3, [3.0, 4.0, 5.0], [1, 1, 1], [1, 1, 1])
    assert estimate.value([a, b], "decode_cpu_s_per_token", 0.5) == 3.0
    assert estimate.value([a, b], "decode_cpu_s_per_token", 0.25) == 2.0
    assert estimate.value([a, b], "decode_cpu_s_per_token", 1.0) == 5.0


def test_per_run_metrics_are_the_median_of_positive_values() -> None:
    runs = [run([], [], [], [], ttft_ms=v) for v in (4.0, 0.0, 6.0, 9.0)] + [run([], [], [], [])]
    assert estimate.value(runs, "ttft_ms", 0.5) == 6.0  # 0 and absent are left out
    with warnings.catch_warnings():  # no median of nothing (a RuntimeWarning) is taken
        warnings.simplefilter("error")
        assert math.isnan(estimate.value(runs[1:2], "ttft_ms", 0.5))
    small = [run([], [], [], [], cpu_s_per_token=v) for v in (0.5, 0.25, 0.75)]
    assert estimate.value(small, "cpu_s_per_token", 0.5) == 0.5  # below 1 counts too
    assert set(estimate.PER_RUN) == {"cpu_s_per_token", "ttft_ms"}
