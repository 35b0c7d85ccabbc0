"""The receipt's speed section: a table per cell and a mermaid ``xychart-beta`` sweep."""

from __future__ import annotations

import math

from gates.plan.speed import METRICS, label
from gates.report.receipt.table import md_table
from gates.run.speed.results import SpeedCell, SpeedRun, Verdict

HEADERS = ["cell", "base", "head", "head/base", "speed", "95% CI", "p (Holm)", "blocks", "verdict"]
ICON = {
    Verdict.SLOWER: "❌ slower",
    Verdict.SLOWER_SMALL: "⚠️ slower (small)",
    Verdict.FASTER: "🚀 faster",
    Verdict.FASTER_SMALL: "faster (small)",
    Verdict.EQUIVALENT: "✅ equivalent",
    Verdict.INCONCLUSIVE: "inconclusive",
}


def pretty(metric: str, parallel: int | None = None) -> str:
    """``decode_tok_s``, 4 -> ``decode (tok/s) at 4 streams``."""
    if parallel is None:
        return metric
    return label(metric, parallel)


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "—"
    a = abs(v)
    return f"{v:.0f}" if a >= 1000 else f"{v:.1f}" if a >= 100 else f"{v:.3g}"


def _plain(v: float) -> str:
    """About 4 significant digits, never in exponent form (mermaid reads plain numbers)."""
    if v == 0 or math.isnan(v):
        return "0"
    return f"{v:.{max(0, 3 - math.floor(math.log10(abs(v))))}f}"


def _row(c: SpeedCell, budget: bool = False) -> list[str]:
    m = METRICS.get(c.metric)
    scale = m.scale if m else 1.0
    ci = "—" if math.isnan(c.speed_lo) else f"{c.speed_lo:.3f}–{c.speed_hi:.3f}"
    verdict = ICON[c.verdict]
    if c.accepted_by:
        verdict = f"☑️ slower, accepted by {c.accepted_by}"
    if c.verdict is Verdict.INCONCLUSIVE and budget:
        verdict += ": budget"
    if c.unstable:
        verdict += " ⚠️ unstable: " + ", ".join(c.unstable)
    return [
        pretty(c.metric, c.parallel),
        _fmt(c.base * scale),
        _fmt(c.head * scale),
        f"{c.ratio:.3f}",
        f"{c.speed:.3f}",
        ci,
        f"{c.p_holm:.2g}",
        str(c.blocks),
        verdict,
    ]


def table(speed: SpeedRun | None) -> str:
    if speed is None or not speed.cells:
        return ""
    return md_table(
        [_row(c, speed.stopped == "budget") for c in speed.cells],
        headers=[
            "cell",
            "base",
            "head",
            "head/base",
            "speed",
            "95% CI",
            "p (Holm)",
            "blocks",
            "verdict",
        ],
    )


def sweep_chart(speed: SpeedRun | None, metric: str = "decode_tok_s") -> str:
    """A mermaid xychart of the sweep (each side's median over blocks), or ''."""
    if speed is None:
        return ""
    cells = sorted((c for c in speed.cells if c.metric == metric), key=lambda c: c.parallel)
    if len(cells) < 2:
        cells = sorted(
            (c for c in speed.cells if c.metric == speed.cells[0].metric), key=lambda c: c.parallel
        )
        if len(cells) < 2:
            return ""
        metric = cells[0].metric
    m = METRICS.get(metric)
    scale = m.scale if m else 1.0
    base = [c.base * scale for c in cells]
    head = [c.head * scale for c in cells]
    top = max(base + head) * 1.15
    xs = ", ".join(str(c.parallel) for c in cells)
    name = f"{m.label} ({m.unit})" if m else metric
    return "\n".join(
        [
            "```mermaid",
            "xychart-beta",
            f'    title "{name} by stream count: base (first line) and head"',
            f'    x-axis "streams" [{xs}]',
            f'    y-axis "{name}" 0 --> {_plain(top)}',
            f"    line [{', '.join(_plain(v) for v in base)}]",
            f"    line [{', '.join(_plain(v) for v in head)}]",
            "```",
        ]
    )


def summary_line(speed: SpeedRun | None) -> str:
    """'4 cells: 3 equivalent, 1 inconclusive: budget; 1 of them unstable': each cell
    counted once, by its verdict; *unstable* is a flag on some of them, not a verdict."""
    if speed is None or not speed.cells:
        return ""
    parts = []
    for v, n in sorted(speed.verdicts().items()):
        budget = v is Verdict.INCONCLUSIVE and speed.stopped == "budget"
        parts.append(f"{n} {v}" + (": budget" if budget else ""))
    n = len(speed.cells)
    line = f"{n} cell{'s' * (n != 1)}: {', '.join(parts)}"
    unstable = sum(1 for c in speed.cells if c.unstable)
    if unstable:
        line += f"; {unstable} of them unstable"
    return line
