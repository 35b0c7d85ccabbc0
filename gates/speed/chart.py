"""The receipt's speed section: a table per cell and a mermaid ``xychart-beta`` sweep."""

from __future__ import annotations

import math
from typing import Any

from gates.receipt.table import md_table
from gates.speed.schema import METRICS, label

ICON = {"slower": "❌ slower", "faster": "🚀 faster", "equivalent": "✅ equivalent"}


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


def table(speed: dict[str, Any] | None) -> str:
    cells = (speed or {}).get("cells") or []
    if not cells:
        return ""
    rows = []
    for c in cells:
        m = METRICS.get(c["metric"])
        scale = m.scale if m else 1.0
        ci = "—" if math.isnan(c["lo"]) else f"{c['lo']:.3f}–{c['hi']:.3f}"
        verdict = ICON.get(c["verdict"], c["verdict"])
        if c.get("unstable"):
            verdict += " ⚠️ unstable: " + ", ".join(c["unstable"])
        rows.append(
            [
                pretty(c["metric"], c["parallel"]),
                _fmt(c["base"] * scale),
                _fmt(c["head"] * scale),
                f"{c['ratio']:.3f}",
                ci,
                f"{c['p_holm']:.2g}",
                f"{c['n_base']}+{c['n_head']}",
                verdict,
            ]
        )
    return md_table(
        rows,
        headers=["cell", "base", "head", "head/base", "95% CI", "p (Holm)", "n", "verdict"],
    )


def sweep_chart(speed: dict[str, Any] | None, metric: str = "decode_tok_s") -> str:
    """A mermaid xychart of the sweep (median of each side by stream count), or ''."""
    cells = [c for c in (speed or {}).get("cells") or [] if c["metric"] == metric]
    if len(cells) < 2:
        return ""
    cells.sort(key=lambda c: c["parallel"])
    m = METRICS.get(metric)
    scale = m.scale if m else 1.0
    base = [c["base"] * scale for c in cells]
    head = [c["head"] * scale for c in cells]
    top = max(base + head) * 1.15
    xs = ", ".join(str(c["parallel"]) for c in cells)
    name = f"{m.label} ({m.unit})" if m else metric
    return "\n".join(
        [
            "```mermaid",
            "xychart-beta",
            f'    title "{name} by stream count: base (first line) and head"',
            f'    x-axis "streams" [{xs}]',
            f'    y-axis "{name}" 0 --> {top:.0f}',
            f"    line [{', '.join(f'{v:.1f}' for v in base)}]",
            f"    line [{', '.join(f'{v:.1f}' for v in head)}]",
            "```",
        ]
    )


def summary_line(speed: dict[str, Any]) -> str:
    cells = speed.get("cells") or []
    counts: dict[str, int] = {}
    for c in cells:
        counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
    parts = [f"{n} {v}" for v, n in sorted(counts.items())]
    unstable = sum(1 for c in cells if c.get("unstable"))
    if unstable:
        parts.append(f"{unstable} unstable")
    return ", ".join(parts)
