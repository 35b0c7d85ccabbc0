"""Per-cell statistics and verdicts of the speed gates.

A *cell* is one metric at one stream count, with one value per fresh bench process on
each side. For each cell:

* ``p``: a two-sided Mann–Whitney U test, head against base (``scipy.stats.mannwhitneyu``);
* ``ratio``: median(head) / median(base), with a 95 % percentile bootstrap interval
  (``scipy.stats.bootstrap``, resampling each side on its own, a fixed seed);
* ``speed``: the same as a speed factor, > 1 = head faster (the ratio, or its inverse for
  costs such as CPU seconds per token and TTFT).

The p values of all cells are Holm-adjusted together; the level of each look is
``alpha / looks`` (the runner looks again after adding blocks, and a verdict may be
reached at any look: this split keeps the false-alarm rate of the whole run at ``alpha``).

Verdicts (``speed`` and its interval ``[lo, hi]``):

* **slower**: Holm-adjusted p <= level, hi < 1 and speed < 1 - min_effect;
* **faster**: Holm-adjusted p <= level, lo > 1 and speed > 1 + min_effect;
* **equivalent**: otherwise, when 1 - delta <= lo and hi <= 1 + delta;
* **inconclusive**: anything else (the runner adds blocks while a cell is inconclusive).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np
from scipy import stats as sps

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 20240609
UNSTABLE_SPREAD = 0.10  # robust spread (1.4826 MAD / median) of a side above this: unstable
OUTLIER_Z = 4.0  # a sample this many robust spreads from its side's median is an outlier


def _ratio_of_medians(h: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(h, axis=axis) / np.median(b, axis=axis)


def ratio_interval(base: list[float], head: list[float]) -> tuple[float, float]:
    """95 % bootstrap interval of median(head) / median(base); nan with < 2 per side."""
    if len(base) < 2 or len(head) < 2:
        return math.nan, math.nan
    if len(set(base)) == 1 and len(set(head)) == 1:
        r = head[0] / base[0]
        return r, r
    res = sps.bootstrap(
        (np.asarray(head), np.asarray(base)),
        _ratio_of_medians,
        vectorized=True,
        n_resamples=RESAMPLES,
        confidence_level=CONFIDENCE,
        method="percentile",
        rng=np.random.default_rng(SEED),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def mann_whitney(base: list[float], head: list[float]) -> float:
    """Two-sided Mann–Whitney p value (1.0 when a side is empty or all values tie)."""
    if not base or not head or len(set(base) | set(head)) == 1:
        return 1.0
    return float(sps.mannwhitneyu(head, base, alternative="two-sided").pvalue)


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
    """Robust relative spread: 1.4826 * MAD / median."""
    if len(xs) < 2:
        return 0.0
    med = statistics.median(xs)
    mad = statistics.median(abs(x - med) for x in xs)
    return 1.4826 * mad / med if med else 0.0


def outliers(xs: list[float]) -> int:
    if len(xs) < 3:
        return 0
    med = statistics.median(xs)
    mad = 1.4826 * statistics.median(abs(x - med) for x in xs)
    if mad == 0:
        return sum(1 for x in xs if x != med)
    return sum(1 for x in xs if abs(x - med) > OUTLIER_Z * mad)


def cell(base: list[float], head: list[float], better: str) -> dict[str, Any]:
    """Everything about one cell but its verdict (which needs every cell's p value)."""
    mb, mh = float(statistics.median(base)), float(statistics.median(head))
    ratio = mh / mb
    lo, hi = ratio_interval(base, head)
    if better == "higher":
        speed, s_lo, s_hi = ratio, lo, hi
    else:
        speed, s_lo, s_hi = 1 / ratio, 1 / hi, 1 / lo
    unstable = []
    for side, xs in (("base", base), ("head", head)):
        sp = spread(xs)
        if sp > UNSTABLE_SPREAD:
            unstable.append(f"{side} spread {sp:.0%}")
        n_out = outliers(xs)
        if n_out:
            unstable.append(f"{side} {n_out} outlier{'s' * (n_out > 1)}")
    return {
        "base": mb,
        "head": mh,
        "n_base": len(base),
        "n_head": len(head),
        "ratio": ratio,
        "lo": lo,
        "hi": hi,
        "speed": speed,
        "speed_lo": s_lo,
        "speed_hi": s_hi,
        "p": mann_whitney(base, head),
        "unstable": unstable,
    }


def decide(c: dict[str, Any], p_adj: float, level: float, delta: float, min_effect: float) -> str:
    s, lo, hi = c["speed"], c["speed_lo"], c["speed_hi"]
    have_ci = not (math.isnan(lo) or math.isnan(hi))
    if have_ci and p_adj <= level:
        if hi < 1 and s < 1 - min_effect:
            return "slower"
        if lo > 1 and s > 1 + min_effect:
            return "faster"
    if have_ci and 1 - delta <= lo and hi <= 1 + delta:
        return "equivalent"
    return "inconclusive"


def verdicts(
    samples: dict[tuple[str, int], tuple[list[float], list[float]]],
    better: dict[str, str],
    *,
    alpha: float,
    looks: int,
    delta: float,
    min_effect: float,
) -> list[dict[str, Any]]:
    """One row per cell ``(metric, parallel)`` -> (base values, head values), in order."""
    keys = list(samples)
    cells = [cell(*samples[k], better[k[0]]) for k in keys]
    adj = holm([c["p"] for c in cells])
    level = alpha / max(1, looks)
    out = []
    for (metric, par), c, pa in zip(keys, cells, adj, strict=True):
        c.update(metric=metric, parallel=par, p_holm=pa, level=level)
        c["verdict"] = decide(c, pa, level, delta, min_effect)
        out.append(c)
    return out
