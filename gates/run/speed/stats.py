"""Per-cell statistics and verdicts of the speed gates, on paired blocks.

A *cell* is one metric at one stream count. Each block gives it one value per side (base
and head ran in the same seconds, turn about), so a cell is a list of pairs. Per pair the
log speed ``d = log(base cost / head cost)`` (> 0: head faster; rates are inverted into
costs first). For each cell:

* ``p``: a two-sided Wilcoxon signed-rank test of ``d`` against 0 (``scipy.stats.wilcoxon``,
  a test on paired differences: the machine's drift, which both sides of a
  block share, drops out of ``d``);
* ``speed``: ``exp`` of the 20 % trimmed mean of ``d``, with a 95 % percentile bootstrap
  interval (``scipy.stats.bootstrap``, resampling blocks, a fixed seed); ``ratio`` is
  head / base of the metric itself (its inverse for rates).

The p values of all cells are Holm-adjusted together; the level of each look is
``alpha / looks`` (the runner looks again after adding blocks, and a verdict may be
reached at any look: this split keeps the false-alarm rate of the whole run at ``alpha``).

Verdicts (``speed`` and its interval ``[lo, hi]``):

* **slower**: Holm-adjusted p <= level, hi < 1 and speed < 1 - min_effect;
* **faster**: Holm-adjusted p <= level, lo > 1 and speed > 1 + min_effect;
* **slower (small)**: otherwise, when hi < 1 and 1 - min_effect <= speed < 1 - delta: the
  interval excludes 1 and the loss is past the tolerance, but short of a *slower* one (it
  does not fail; the runner keeps adding blocks, as for *inconclusive*);
* **faster (small)**: the same, mirrored (lo > 1 and 1 + delta < speed <= 1 + min_effect);
* **equivalent**: otherwise, when 1 - delta <= lo and hi <= 1 + delta;
* **inconclusive**: anything else (the runner adds blocks while a cell is inconclusive).

So a cell is never *equivalent* when its interval excludes 1 by more than ``delta``: the
interval would reach past 1 - delta. quick's tolerance is 3 %: a 3.4 % decode loss with
interval 0.956-0.975 reads *slower (small)*, not *equivalent* as under its old 10 %.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
from scipy import stats as sps

from gates.run.speed.results import SpeedCell, Verdict

CONFIDENCE = 0.95
RESAMPLES = 4000
SEED = 20240609
TRIM = 0.2
UNSTABLE_SPREAD = 0.05  # robust spread (1.4826 MAD) of the blocks' log speeds above this
OUTLIER_Z = 4.0  # a block this many robust spreads from the median log speed is an outlier
OUTLIER_SHARE = 0.1  # unstable when more than this share of the blocks are outliers
FLOOR = 1e-3  # spreads below 0.1 % count as 0.1 %: float noise is not an outlier


def _center(d: np.ndarray, axis: int = -1) -> np.ndarray:
    return sps.trim_mean(d, TRIM, axis=axis)


def log_speeds(base: list[float], head: list[float], better: str) -> list[float]:
    """Per block log(head's speed / base's): costs base/head, rates head/base."""
    pairs = zip(base, head, strict=True)
    if better == "lower":
        return [math.log(b / h) for b, h in pairs]
    return [math.log(h / b) for b, h in pairs]


def interval(d: list[float]) -> tuple[float, float]:
    """95 % bootstrap interval of exp(trimmed mean of d); nan with fewer than 3 blocks."""
    if len(d) < 3:
        return math.nan, math.nan
    if len(set(d)) == 1:
        return math.exp(d[0]), math.exp(d[0])
    res = sps.bootstrap(
        (np.asarray(d),),
        _center,
        vectorized=True,
        n_resamples=RESAMPLES,
        confidence_level=CONFIDENCE,
        method="percentile",
        rng=np.random.default_rng(SEED),
    )
    return math.exp(res.confidence_interval.low), math.exp(res.confidence_interval.high)


def signed_rank(d: list[float]) -> float:
    """Two-sided Wilcoxon signed-rank p value (1.0 when every d is 0 or there are none)."""
    if not any(d):
        return 1.0
    return float(sps.wilcoxon(d, alternative="two-sided").pvalue)


def holm(ps: list[float]) -> list[float]:
    """Holm step-down adjusted p values, in the order given."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out


def spread(xs: list[float]) -> float:
    """Robust spread of log speeds: 1.4826 * MAD (about the relative spread of a ratio)."""
    if len(xs) < 2:
        return 0.0
    med = statistics.median(xs)
    return 1.4826 * statistics.median(abs(x - med) for x in xs)


def outliers(xs: list[float]) -> int:
    if len(xs) < 3:
        return 0
    med, mad = statistics.median(xs), max(spread(xs), FLOOR)
    return sum(1 for x in xs if abs(x - med) > OUTLIER_Z * mad)


def _unstable(d: list[float]) -> list[str]:
    out = []
    sp = spread(d)
    if sp > UNSTABLE_SPREAD:
        out.append(f"block-to-block spread {sp:.0%}")
    n_out = outliers(d)
    if n_out > OUTLIER_SHARE * len(d):  # one odd block in thirty is the machine, not the cell
        out.append(f"{n_out} outlier blocks of {len(d)}")
    return out


def cell(
    metric: str, parallel: int, base: list[float], head: list[float], better: str
) -> SpeedCell:
    """Everything about one cell but its verdict (which needs every cell's p value)."""
    d = log_speeds(base, head, better)
    speed = math.exp(float(_center(np.asarray(d)))) if d else math.nan
    lo, hi = interval(d)
    return SpeedCell(
        metric=metric,
        parallel=parallel,
        base=float(statistics.median(base)) if base else math.nan,
        head=float(statistics.median(head)) if head else math.nan,
        blocks=len(d),
        speed=speed,
        speed_lo=lo,
        speed_hi=hi,
        ratio=1 / speed if better == "lower" else speed,
        p=signed_rank(d),
        unstable=_unstable(d),
        log_speeds=d,
    )


def decide(c: SpeedCell, level: float, delta: float, min_effect: float) -> Verdict:
    s, lo, hi = c.speed, c.speed_lo, c.speed_hi
    have_ci = not (math.isnan(lo) or math.isnan(hi))
    if have_ci and c.p_holm <= level:
        if hi < 1 and s < 1 - min_effect:
            return Verdict.SLOWER
        if lo > 1 and s > 1 + min_effect:
            return Verdict.FASTER
    if have_ci and hi < 1 and 1 - min_effect <= s < 1 - delta:
        return Verdict.SLOWER_SMALL
    if have_ci and lo > 1 and 1 + delta < s <= 1 + min_effect:
        return Verdict.FASTER_SMALL
    if have_ci and 1 - delta <= lo and hi <= 1 + delta:
        return Verdict.EQUIVALENT
    return Verdict.INCONCLUSIVE


def verdicts(
    samples: dict[tuple[str, int], tuple[list[float], list[float]]],
    better: dict[str, str],
    *,
    alpha: float,
    looks: int,
    delta: float,
    min_effect: float,
) -> list[SpeedCell]:
    """One cell per ``(metric, parallel)`` -> (base values, head values) paired by block."""
    cells = [cell(m, n, *samples[(m, n)], better[m]) for m, n in samples]
    level = alpha / max(1, looks)
    for c, pa in zip(cells, holm([c.p for c in cells]), strict=True):
        c.p_holm, c.level = pa, level
        c.verdict = decide(c, level, delta, min_effect)
    return cells
