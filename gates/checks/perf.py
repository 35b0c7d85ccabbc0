"""Speed gates: alternating base/head runs of ``python -m engine bench --json``.

Runs go base, head, base, head, ... so drift of the machine (heat, other load) hits both
sides alike. Each metric (decode tok/s at each parallel, prefill tok/s) gets the ratio
head/base of the means and a 95% confidence interval from the paired log ratios. A metric
is *slower* only when the whole interval lies below ``1 - max_ratio_drop``: noise alone
does not fail the gate.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from gates.execute import _run, base_env, has_engine, tail

# two-sided 95% t quantiles by degrees of freedom (1..10); larger use 1.96
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23}


def rates(obj: Any, prefix: str = "") -> dict[str, float]:
    """Every throughput number in a bench JSON (keys mentioning tok_s / tok/s / per_s)."""
    out: dict[str, float] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(rates(v, f"{prefix}{k}" if not prefix else f"{prefix}.{k}"))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            key = str(v.get("parallel", i)) if isinstance(v, dict) else str(i)
            out.update(rates(v, f"{prefix}[{key}]"))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        low = prefix.lower()
        if any(s in low for s in ("tok_s", "tok/s", "tokens_per_s", "per_s", "tps")) and obj > 0:
            out[prefix] = float(obj)
    return out


def bench_argv(model: Path, backend: str, spec: dict[str, Any]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "engine",
        "bench",
        "--json",
        "--model",
        str(model),
        "--backend",
        backend,
        "--parallel",
        ",".join(map(str, spec["parallel"])),
        "--prompt-tokens",
        str(spec["prompt_tokens"]),
        "--gen-tokens",
        str(spec["gen_tokens"]),
        "--repeats",
        str(spec["repeats"]),
    ]


def bench_once(
    worktree: Path, argv: list[str], cache: Path, backend: str, timeout: float
) -> tuple[dict[str, float] | None, str]:
    if not has_engine(worktree):
        return None, "the commit has no engine"
    env = base_env(worktree, backend, {}, cache)
    code, out, err = _run(argv, worktree, env, timeout)
    if code is None:
        return None, f"bench timed out after {timeout:.0f}s"
    if code != 0:
        return None, f"engine has no bench --json (exit {code}: {tail(err, 200)})"
    try:
        vals = rates(json.loads(out))
    except json.JSONDecodeError:
        return None, "engine has no bench --json (no JSON printed)"
    if not vals:
        return None, "engine bench --json printed no tok/s numbers"
    return vals, ""


def pretty(metric: str) -> str:
    """``sweep[4].decode_tok_s`` -> ``decode tok/s at 4 streams``."""
    m = re.fullmatch(r"\w+\[(\d+)\]\.(\w+?)_tok_s", metric)
    if m:
        return f"{m.group(2)} tok/s at {m.group(1)} stream{'s' * (m.group(1) != '1')}"
    return metric


def ratio_ci(base: list[float], head: list[float]) -> tuple[float, float, float]:
    """Ratio of means and a 95% interval from paired log ratios."""
    ratio = statistics.fmean(head) / statistics.fmean(base)
    logs = [math.log(h / b) for b, h in zip(base, head, strict=False)]
    if len(logs) < 2:
        return ratio, float("nan"), float("nan")
    half = T95.get(len(logs) - 1, 1.96) * statistics.stdev(logs) / math.sqrt(len(logs))
    centre = statistics.fmean(logs)
    return ratio, math.exp(centre - half), math.exp(centre + half)


def verdict(lo: float, hi: float, ratio: float, max_drop: float) -> str:
    if math.isnan(lo):
        return "slower" if ratio < 1 - max_drop else "flat (1 run: no interval)"
    if hi < 1 - max_drop:
        return "slower"
    if lo > 1 + max_drop:
        return "faster"
    return "flat"


def run_speed(
    sides: dict[str, Path],
    model: Path,
    backend: str,
    spec: dict[str, Any],
    cache: Path,
    log: Any = None,
) -> dict[str, Any]:
    """Alternate bench runs of base and head; return per-metric ratio, interval, verdict."""
    samples: dict[str, list[dict[str, float]]] = {"base": [], "head": []}
    for r in range(spec["runs"]):
        for side in ("base", "head"):
            argv = bench_argv(model, backend, spec)
            vals, why = bench_once(sides[side], argv, cache, backend, spec["timeout"])
            if vals is None:
                return {"status": "not_comparable", "reason": f"{side}: {why}", "metrics": []}
            samples[side].append(vals)
            if log:
                log(f"[gates] speed run {r + 1}/{spec['runs']} {side} done")
    names = sorted(set.intersection(*(set(s) for s in samples["base"] + samples["head"])))
    if not names:
        return {
            "status": "not_comparable",
            "reason": "base and head bench report no common metric",
            "metrics": [],
        }
    rows = []
    for name in names:
        b = [s[name] for s in samples["base"]]
        h = [s[name] for s in samples["head"]]
        ratio, lo, hi = ratio_ci(b, h)
        rows.append(
            {
                "metric": name,
                "base": statistics.fmean(b),
                "head": statistics.fmean(h),
                "ratio": ratio,
                "lo": lo,
                "hi": hi,
                "verdict": verdict(lo, hi, ratio, spec["max_ratio_drop"]),
            }
        )
    status = "fail" if any(r["verdict"] == "slower" for r in rows) else "pass"
    return {"status": status, "reason": "", "metrics": rows, "runs": spec["runs"]}
