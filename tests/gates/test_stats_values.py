"""gates/run/speed/stats.py on small hand-made inputs whose answers are computed here without it:
exact Wilcoxon p values from counting sign patterns, Holm by hand, the bootstrap interval
redone with numpy alone, and every verdict boundary (docs/testing.md, "Mutation testing")."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from gates.run.speed import stats
from gates.run.speed.results import SpeedCell, Verdict

LN2 = math.log(2)


# ---------------------------------------------------------------- log speeds


def test_log_speeds_invert_costs_not_rates() -> None:
    assert stats.log_speeds([2.0, 1.0], [1.0, 4.0], "lower") == [LN2, math.log(0.25)]
    assert stats.log_speeds([2.0, 1.0], [1.0, 4.0], "higher") == [math.log(0.5), math.log(4.0)]
    with pytest.raises(ValueError):
        stats.log_speeds([1.0, 2.0], [1.0], "lower")  # blocks come in pairs


# ---------------------------------------------------------------- Wilcoxon, Holm


def exact_two_sided(d: list[float]) -> float:
    """P(a signed-rank sum at least as far from its mean as d's), counting all 2**n sign
    patterns (d has no zeros and no ties in |d|)."""
    ranks = {abs(x): r for r, x in enumerate(sorted(d, key=abs), start=1)}
    w = sum(ranks[abs(x)] for x in d if x > 0)
    n = len(d)
    mean = n * (n + 1) / 4
    patterns = itertools.product((0, 1), repeat=n)  # which ranks are positive
    sums = [sum(r for r, s in enumerate(signs, start=1) if s) for signs in patterns]
    return sum(abs(s - mean) >= abs(w - mean) for s in sums) / len(sums)


@pytest.mark.parametrize(
    ("d", "p"),
    [
        ([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], 2 / 64),  # every block faster: 2 of 64 patterns
        ([-0.1, 0.2, 0.3, 0.4, 0.5, 0.6], 4 / 64),
        ([-0.6, -0.5, -0.4, -0.3, -0.2, -0.1, 0.05], 4 / 128),
        ([0.3, -0.1, 0.2, -0.4, 0.5], None),
    ],
)
def test_signed_rank_is_the_exact_two_sided_p(d: list[float], p: float | None) -> None:
    want = exact_two_sided(d)
    if p is not None:
        assert want == p  # the counting above agrees with the textbook value
    assert stats.signed_rank(d) == pytest.approx(want, rel=1e-12)


def test_signed_rank_of_no_change_is_one() -> None:
    assert stats.signed_rank([]) == 1.0
    assert stats.signed_rank([0.0, 0.0, 0.0]) == 1.0


def test_holm_by_hand() -> None:
    # sorted 0.01, 0.03, 0.04: 3 x 0.01, 2 x 0.03, then max(0.06, 1 x 0.04)
    assert stats.holm([0.01, 0.04, 0.03]) == [3 * 0.01, 2 * 0.03, 2 * 0.03]
    assert stats.holm([0.3, 0.2]) == [2 * 0.2, 2 * 0.2]  # never below an earlier step
    assert stats.holm([0.6, 0.7]) == [1.0, 1.0]  # 1.2 and 0.7: capped, then carried
    assert stats.holm([0.2, 0.7]) == [0.4, 0.7]
    assert stats.holm([0.05]) == [0.05]
    assert stats.holm([]) == []


# ---------------------------------------------------------------- spread, outliers


def test_spread_is_1_4826_times_the_mad() -> None:
    assert stats.spread([0.0, 1.0, 3.0]) == 1.4826  # median 1, deviations 1, 0, 2
    assert stats.spread([0.0, 1.0]) == 1.4826 * 0.5
    assert stats.spread([7.0]) == 0.0 and stats.spread([]) == 0.0


def test_outliers_past_four_spreads_with_a_floor() -> None:
    zeros = [0.0] * 9
    assert stats.outliers([*zeros, 0.0041]) == 1  # spread 0: the floor 1e-3 counts
    assert stats.outliers([*zeros, 0.004]) == 0  # exactly 4 floors is not past them
    assert stats.outliers([*zeros, 0.0039, -0.0041]) == 1
    assert stats.outliers([0.0, 100.0]) == 0  # fewer than 3 blocks: none
    assert stats.outliers([0.0, 0.0, 100.0]) == 1
    # spread 1.4826 (median 0, |d| median 1): the limit is 4 * 1.4826 = 5.9304
    assert stats.outliers([-1.0, 0.0, 0.0, 1.0, 5.93]) == 0
    assert stats.outliers([-1.0, 0.0, 0.0, 1.0, 5.94]) == 1


def test_unstable_names_its_reasons() -> None:
    assert stats._unstable([0.0] * 27 + [1.0] * 3) == []  # 3 of 30 is the machine
    assert stats._unstable([0.0] * 26 + [1.0] * 4) == ["4 outlier blocks of 30"]
    wide = [-0.1, -0.05, 0.0, 0.05, 0.1]  # median 0, MAD 0.05: spread 7.4 %
    assert stats._unstable(wide) == ["block-to-block spread 7%"]
    assert stats._unstable([x / 2 for x in wide]) == []  # spread 3.7 %
    assert stats._unstable([0.0] * 9 + [1.0]) == []  # 1 of 10 is 0.1 x 10 exactly: not over
    assert stats._unstable([0.0] * 8 + [1.0] * 2) == ["2 outlier blocks of 10"]


# ---------------------------------------------------------------- the interval


def bootstrap_by_hand(d: list[float]) -> tuple[float, float]:
    """4000 resamples of the blocks (numpy's generator seeded 20240609), each one's 20 %
    trimmed mean by sorting, and the 2.5 % and 97.5 % quantiles (linear) of those."""
    x = np.asarray(d)
    idx = np.random.default_rng(20240609).integers(0, len(x), (4000, len(x)))
    cut = int(0.2 * len(x))
    means = np.sort(x[idx], axis=1)[:, cut : len(x) - cut].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return math.exp(lo), math.exp(hi)


def test_interval_is_a_seeded_percentile_bootstrap_of_the_trimmed_mean() -> None:
    d = [0.01, -0.02, 0.03, 0.08, -0.01, 0.02, 0.05, 0.0, 0.4, -0.3]
    lo, hi = stats.interval(d)
    want_lo, want_hi = bootstrap_by_hand(d)
    assert lo == pytest.approx(want_lo, rel=1e-12) and hi == pytest.approx(want_hi, rel=1e-12)
    assert lo < math.exp(0.0175) < hi  # around the trimmed mean (8 middle blocks)


def test_interval_edges() -> None:
    assert all(math.isnan(v) for v in stats.interval([0.1, 0.2]))
    assert stats.interval([0.1, 0.1, 0.1]) == (math.exp(0.1), math.exp(0.1))
    for d in ([0.1, 0.2, 0.3], [0.0, 0.0, 0.0, 0.0, 1.0]):  # two values are not one
        assert stats.interval(d) == pytest.approx(bootstrap_by_hand(d), rel=1e-12)
    assert stats.interval([0.0, 0.0, 0.0, 0.0, 1.0])[1] > 1.0


# ---------------------------------------------------------------- one cell


def test_a_cell_of_costs_by_hand() -> None:
    base = [2.0, 2.0, 2.0, 2.0, 2.0]
    head = [1.0, 1.0, 1.0, 0.5, 4.0]  # log speeds ln2, ln2, ln2, 2 ln2, -ln2
    c = stats.cell("decode_cpu_s_per_token", 4, base, head, "lower")
    assert c.log_speeds == [LN2, LN2, LN2, 2 * LN2, -LN2]
    # the 20 % trimmed mean of 5 drops one from each end: the mean of ln2 x 3
    assert c.speed == pytest.approx(2.0, rel=1e-12) and c.ratio == pytest.approx(0.5, rel=1e-12)
    assert (c.metric, c.parallel, c.blocks, c.base, c.head) == (
        "decode_cpu_s_per_token",
        4,
        5,
        2.0,
        1.0,
    )
    assert (c.speed_lo, c.speed_hi) == pytest.approx(bootstrap_by_hand(c.log_speeds), rel=1e-12)
    assert c.p == pytest.approx(stats.signed_rank(c.log_speeds), rel=1e-12)
    assert c.unstable == stats._unstable(c.log_speeds) != []


def test_a_cell_of_rates_and_of_nothing() -> None:
    c = stats.cell("tokens_per_s", 1, [10.0, 10.0, 10.0], [20.0, 20.0, 20.0], "higher")
    assert c.speed == pytest.approx(2.0, rel=1e-12) and c.ratio == pytest.approx(2.0, rel=1e-12)
    assert (c.base, c.head, c.speed_lo, c.speed_hi, c.unstable) == (10.0, 20.0, 2.0, 2.0, [])
    empty = stats.cell("tokens_per_s", 1, [], [], "higher")
    assert math.isnan(empty.base) and math.isnan(empty.head) and math.isnan(empty.speed)
    assert (empty.blocks, empty.p, empty.log_speeds) == (0, 1.0, [])


# ---------------------------------------------------------------- verdicts


def at(speed: float, lo: float, hi: float, p_holm: float = 0.001) -> SpeedCell:
    c = SpeedCell("m", 1, 1.0, 1.0, 10, speed, lo, hi, 1.0, p_holm)
    c.p_holm = p_holm
    return c


LEVEL, DELTA, EFFECT = 0.01, 0.03, 0.05


def verdict(speed: float, lo: float, hi: float, p_holm: float = 0.001) -> Verdict:
    return stats.decide(at(speed, lo, hi, p_holm), LEVEL, DELTA, EFFECT)


def test_slower_and_faster_need_p_the_interval_and_the_effect() -> None:
    assert verdict(0.90, 0.88, 0.92) is Verdict.SLOWER
    assert verdict(0.90, 0.88, 0.92, p_holm=LEVEL) is Verdict.SLOWER  # p at the level
    assert verdict(0.90, 0.88, 0.92, p_holm=0.0101) is Verdict.INCONCLUSIVE
    assert verdict(0.90, 0.88, 1.0) is Verdict.INCONCLUSIVE  # hi = 1: 1 is inside
    assert verdict(1.10, 1.08, 1.12) is Verdict.FASTER
    assert verdict(1.10, 1.08, 1.12, p_holm=LEVEL) is Verdict.FASTER
    assert verdict(1.10, 1.0, 1.12) is Verdict.INCONCLUSIVE  # lo = 1
    assert verdict(1.10, 1.08, 1.12, p_holm=0.02) is Verdict.INCONCLUSIVE
    nan = math.nan
    assert verdict(0.5, nan, 0.6) is Verdict.INCONCLUSIVE
    assert verdict(0.5, 0.4, nan) is Verdict.INCONCLUSIVE
    assert verdict(1.5, 1.4, nan) is Verdict.INCONCLUSIVE
    assert verdict(1.0, nan, nan) is Verdict.INCONCLUSIVE


def test_the_small_bands_and_their_edges() -> None:
    # speed exactly 1 - min_effect: not slower, but slower (small)
    assert verdict(0.95, 0.93, 0.97) is Verdict.SLOWER_SMALL
    assert verdict(0.94, 0.93, 0.97, p_holm=0.5) is Verdict.INCONCLUSIVE  # below the band
    assert verdict(0.96, 0.95, 0.99, p_holm=0.5) is Verdict.SLOWER_SMALL
    assert verdict(0.97, 0.95, 0.99, p_holm=0.5) is Verdict.INCONCLUSIVE  # 1 - delta: not
    assert verdict(0.96, 0.95, 1.0, p_holm=0.5) is Verdict.INCONCLUSIVE  # hi = 1
    assert verdict(1.05, 1.03, 1.07) is Verdict.FASTER_SMALL  # exactly 1 + min_effect
    assert verdict(1.06, 1.03, 1.07, p_holm=0.5) is Verdict.INCONCLUSIVE  # above the band
    assert verdict(1.04, 1.01, 1.05, p_holm=0.5) is Verdict.FASTER_SMALL
    assert verdict(1.03, 1.01, 1.05, p_holm=0.5) is Verdict.INCONCLUSIVE  # 1 + delta: not
    assert verdict(1.04, 1.0, 1.05, p_holm=0.5) is Verdict.INCONCLUSIVE  # lo = 1
    assert verdict(0.96, math.nan, 0.99) is Verdict.INCONCLUSIVE
    assert verdict(1.04, 1.01, math.nan) is Verdict.INCONCLUSIVE


def test_equivalent_is_an_interval_inside_the_tolerance() -> None:
    assert verdict(1.0, 0.97, 1.03, p_holm=0.5) is Verdict.EQUIVALENT  # both edges in
    assert verdict(1.0, 0.9699, 1.0, p_holm=0.5) is Verdict.INCONCLUSIVE
    assert verdict(1.0, 1.0, 1.0301, p_holm=0.5) is Verdict.INCONCLUSIVE
    assert verdict(0.99, 0.98, 0.995) is Verdict.EQUIVALENT  # a small loss, p or not
    assert verdict(1.0, math.nan, 1.0, p_holm=0.5) is Verdict.INCONCLUSIVE


def test_verdicts_split_alpha_over_the_looks_and_holm_the_cells() -> None:
    faster = ([1.0] * 6, [0.5, 0.49, 0.51, 0.48, 0.52, 0.47])  # every block faster: p 2/64
    samples = {("decode_cpu_s_per_token", 1): faster, ("decode_cpu_s_per_token", 2): faster}
    better = {"decode_cpu_s_per_token": "lower"}
    opts = {"delta": 0.03, "min_effect": 0.05}
    one = stats.verdicts(samples, better, alpha=0.0625, looks=1, **opts)
    assert [c.p_holm for c in one] == pytest.approx([2 * 2 / 64] * 2, rel=1e-12)
    assert [c.level for c in one] == [0.0625, 0.0625]
    assert [c.verdict for c in one] == [Verdict.FASTER] * 2
    two = stats.verdicts(samples, better, alpha=0.0625, looks=2, **opts)
    assert [c.level for c in two] == [0.03125] * 2  # p 0.0625 is past it now
    assert [c.verdict for c in two] == [Verdict.INCONCLUSIVE] * 2
    zero = stats.verdicts(samples, better, alpha=0.0625, looks=0, **opts)
    assert [c.level for c in zero] == [0.0625, 0.0625]
    assert [(c.metric, c.parallel) for c in zero] == [
        ("decode_cpu_s_per_token", 1),
        ("decode_cpu_s_per_token", 2),
    ]
