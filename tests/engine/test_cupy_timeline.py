"""bench/cupy_timeline.py on hand-made traces (no GPU): replays cut in start order, a kernel's
exposed time is what no earlier kernel covers, and exposed plus idle time is the step's span."""

from __future__ import annotations

import pytest

from tests.engine.bench_scripts import load_bench

timeline = load_bench("cupy_timeline")

# one step: a norm, a GEMM started under the norm's tail (PDL), a gap, an attention kernel
STEP = [
    ("add_rms_norm", 0.0, 4.0),
    ("mma_gemm_1u2<128>(float const*)", 3.0, 10.0),
    ("attend_bf16_128_split", 12.0, 20.0),
]


def shifted(step: list, by: float) -> list:
    return [(n, s + by, e + by) for n, s, e in step]


def test_exposed_time_is_what_no_earlier_kernel_covers() -> None:
    exposed, idle = timeline.exposure(STEP)
    assert exposed == [4.0, 6.0, 8.0]
    assert idle == 2.0
    assert sum(exposed) + idle == STEP[-1][2] - STEP[0][1]


def test_a_kernel_inside_an_earlier_one_is_not_exposed() -> None:
    exposed, idle = timeline.exposure([("a", 0.0, 10.0), ("b", 2.0, 5.0), ("c", 6.0, 12.0)])
    assert exposed == [10.0, 0.0, 2.0] and idle == 0.0


def test_replays_are_cut_in_start_order_and_averaged() -> None:
    kernels = shifted(STEP, 100.0) + STEP[::-1]  # any order in the trace
    s = timeline.summarize(kernels, reps=2)
    assert s["kernels_a_step"] == 3
    assert s["span_us"] == 20.0 and s["idle_us"] == 2.0 and s["period_us"] == 100.0
    assert list(s["by_name"]) == ["attend_bf16_128_split", "mma_gemm_1u2", "add_rms_norm"]
    gemm = s["by_name"]["mma_gemm_1u2"]
    assert (gemm["launches"], gemm["us"], gemm["exposed"]) == (1, 7.0, 6.0)
    assert "| attend_bf16_128_split | 1 | 8.0 | 8.0 | 40.0% |" in timeline.table(s)


def test_a_trace_that_does_not_cut_into_the_replays_says_so() -> None:
    with pytest.raises(ValueError, match="4 kernels do not cut into 3 replays"):
        timeline.summarize(STEP + [("x", 30.0, 31.0)], reps=3)


def test_an_empty_trace_says_so() -> None:
    with pytest.raises(ValueError, match="no kernels"):
        timeline.summarize([], reps=2)
