"""Speed gates (kept as the entry point of ``gates.run`` and the receipt).

The work is in ``gates.speed``: the bench schema, ABBA blocks of fresh processes, per-cell
Wilcoxon signed-rank tests of paired blocks with bootstrap intervals, Holm correction and verdicts.
"""

from __future__ import annotations

from gates.speed.chart import pretty
from gates.speed.measure import bench_argv, run_speed

__all__ = ["bench_argv", "pretty", "run_speed"]
