"""bench/cupy_attend_phases.py's arithmetic on hand-made logs (no GPU): intervals from a
block's own marks at the clock its globaltimer span gives, blocks without marks left out."""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.bench_scripts import load_bench

tool = load_bench("cupy_attend_phases")


def _log(blocks: list[list[int]]) -> np.ndarray:
    log = np.full((tool.BLOCKS, tool.PHASES), -1, dtype=np.int64)
    for i, row in enumerate(blocks):
        log[i, : len(row)] = row
    return log.ravel()


# clock marks 0, 1, 12, 5, 6, 7 (cycles); summed pass phases 2, 3, 4, 11 (cycles); globaltimer
# start and end (ns); merged: at 2 cycles a ns
# passes taken 13
SPLIT = [0, 200, 1000, 400, 200, 3000, 3400, 4000, 10_000, 12_000, 0, 1200, 200, 1]
MERGING = [100, 300, 1000, 400, 200, 3100, 3500, 8100, 10_500, 14_500, 1, 1200, 300, 1]
PAIR = [0, 400, 600, 300, 100, 2400, -1, 2400, 11_000, 12_200, -1, 1000, 400, 2]  # no election
# q read in 300 cycles, a loop of 3500 whose laps hold 2800: 700 outside them; two passes
SLOW = [0, 200, 1000, 400, 200, 4000, 4400, 5000, 10_000, 12_500, 0, 1200, 500, 2]


def test_intervals_at_the_blocks_own_clock() -> None:
    s = tool.summarize([_log([SPLIT, MERGING])])
    assert s["cycles_per_ns"] == pytest.approx(2.0)
    rows = {r["interval"]: r for r in s["intervals"]}
    merge = rows["-> merge (merging blocks) / exit (split)"]
    assert (merge["mean"], merge["max"]) == (
        pytest.approx(1.3),
        pytest.approx(2.3),
    )  # 600, 4600 cycles
    assert rows["  scores"]["median"] == pytest.approx(0.2)  # 400 cycles
    assert rows["  value pass"]["mean"] == pytest.approx(0.6)
    assert rows["-> the chunk loop's end, of which:"]["max"] == pytest.approx(1.4)
    assert rows["a block, start to end"]["max"] == pytest.approx(4.0)
    assert s["span_us"] == pytest.approx(4.5) and s["start_spread_us"] == pytest.approx(0.5)
    assert (s["blocks"], s["merging"]) == (2, 1)


def test_the_q_read_and_the_loop_outside_its_laps() -> None:
    rows = {r["interval"]: r for r in tool.summarize([_log([SLOW, SPLIT])])["intervals"]}
    q = rows["-> q read (the early copies' barrier before it)"]
    assert (q["max"], q["mean"]) == (pytest.approx(0.15), pytest.approx(0.075))
    outside = rows["  outside the laps"]
    assert (outside["max"], outside["mean"]) == (pytest.approx(0.35), pytest.approx(0.175))
    assert rows["-> the chunk loop's end, of which:"]["max"] == pytest.approx(1.75)


def test_blocks_by_their_passes() -> None:
    """A launch's blocks split by the chunk passes their group took: the one-pass block's loop
    and the two-pass block's, each alone, and both columns in the table."""
    s = tool.summarize([_log([SLOW, SPLIT])])
    assert sorted(s["by_passes"]) == [1, 2]
    one, two = ({r["interval"]: r for r in s["by_passes"][c]} for c in (1, 2))
    loop = "-> the chunk loop's end, of which:"
    assert (one[loop]["mean"], two[loop]["mean"]) == (pytest.approx(1.4), pytest.approx(1.75))
    assert one[loop]["blocks"] == two[loop]["blocks"] == 1
    text = tool.table(s)
    assert "mean, 1 pass |" in text and "mean, 2 passes |" in text and "| 1.40 | 1.75 |" in text


def test_a_block_without_a_mark_is_left_out_of_that_interval_only() -> None:
    s = tool.summarize([_log([SPLIT, PAIR])])
    rows = {r["interval"]: r for r in s["intervals"]}
    assert rows["-> partial sums out, election (split)"]["blocks"] == 1
    assert rows["a block, start to end"]["blocks"] == 2
    assert "|   scores |" in tool.table(s)


def test_no_marks_is_an_error_that_says_so() -> None:
    with pytest.raises(ValueError, match="define"):
        tool.summarize([_log([])])
