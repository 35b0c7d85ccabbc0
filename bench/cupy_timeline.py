"""Where a decode step's GPU time goes inside its CUDA graph: every kernel's start and end on
the device, read by CUPTI through torch.profiler while the step's graph replays, summed per
kernel name. What ncu cannot give (it times each kernel alone, caches flushed, no overlap
between launches) and the eager profile cannot either (no graph, no programmatic dependent
launch):

    python bench/cupy_timeline.py --model synthetic:qwen3-0.6b --streams 1 8 --context 512

Per kernel name, a step's: launches, mean duration on the device, and "exposed" time, the
part of its interval that no earlier kernel of the step still covers. The exposed times and
the idle gaps add up to the step's span, so they say which kernels the step waits on; a
kernel that runs under its predecessor's tail (PDL) shows its duration but little exposure.
CUPTI's tracing may add to each launch: compare the span it reads with the plain replay
printed beside it. Whether CUPTI reports graph-launched kernels on a given driver is not yet
seen here (an empty trace says so).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # cupy_speed, beside this file

Kernel = tuple[str, float, float]  # name, start, end (µs on the device's clock)


def short_name(name: str) -> str:
    """A kernel's name without its template arguments or parameter list."""
    return re.split(r"[<(]", name, maxsplit=1)[0].strip() or name


def steps_of(kernels: list[Kernel], reps: int) -> list[list[Kernel]]:
    """The trace's kernels (any order) cut into `reps` replays of one step each."""
    ordered = sorted(kernels, key=lambda k: (k[1], k[2]))
    if not ordered:
        raise ValueError("the trace holds no kernels (does this CUPTI trace graph launches?)")
    if not reps or len(ordered) % reps:
        raise ValueError(f"{len(ordered)} kernels do not cut into {reps} replays")
    per = len(ordered) // reps
    return [ordered[i * per : (i + 1) * per] for i in range(reps)]


def exposure(step: list[Kernel]) -> tuple[list[float], float]:
    """Each kernel's exposed µs (its interval past every earlier kernel's end) and the
    step's idle µs (no kernel running between its first start and last end)."""
    frontier = step[0][1]
    exposed, idle = [], 0.0
    for _, start, end in step:
        idle += max(0.0, start - frontier)
        exposed.append(max(0.0, end - max(start, frontier)))
        frontier = max(frontier, end)
    return exposed, idle


def summarize(kernels: list[Kernel], reps: int) -> dict[str, Any]:
    """Per kernel name, a step's launches, mean µs and exposed µs (means over the replays),
    with the step's span, idle time and period (start to next start)."""
    steps = steps_of(kernels, reps)
    per: dict[str, dict[str, float]] = defaultdict(lambda: {"launches": 0, "us": 0.0, "exposed": 0})
    spans, idles = [], []
    for step in steps:
        exposed, idle = exposure(step)
        idles.append(idle)
        spans.append(max(e for _, _, e in step) - step[0][1])
        for (name, start, end), ex in zip(step, exposed, strict=True):
            row = per[short_name(name)]
            row["launches"] += 1 / reps
            row["us"] += (end - start) / reps
            row["exposed"] += ex / reps
    starts = [s[0][1] for s in steps]
    periods = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    return {
        "kernels_a_step": len(steps[0]),
        "span_us": sum(spans) / len(spans),
        "idle_us": sum(idles) / len(idles),
        "period_us": sum(periods) / len(periods) if periods else None,
        "by_name": dict(sorted(per.items(), key=lambda kv: -kv[1]["exposed"])),
    }


def table(summary: dict[str, Any]) -> str:
    """The summary as Markdown, the most exposed kernel first."""
    span = summary["span_us"]
    lines = [
        f"span {span:.1f} µs a step ({summary['kernels_a_step']} kernels), idle "
        f"{summary['idle_us']:.1f} µs, period {summary['period_us'] or 0:.1f} µs",
        "",
        "| kernel | launches | µs (sum) | exposed µs | share of span |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, r in summary["by_name"].items():
        lines.append(
            f"| {name} | {r['launches']:.0f} | {r['us']:.1f} | {r['exposed']:.1f} | "
            f"{r['exposed'] / span:.1%} |"
        )
    return "\n".join(lines)


def trace(graph: Any, reps: int) -> list[Kernel]:
    """The kernels of `reps` replays of a StepGraph, from CUPTI (torch.profiler)."""
    try:
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        print("cupy_timeline: torch (its profiler reads CUPTI) is not installed", file=sys.stderr)
        raise SystemExit(2) from None
    graph.replay_ms(5)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            graph.graph.launch(graph.stream)
        graph.stream.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f).get("traceEvents", [])
    return [
        (e["name"], float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in events
        if e.get("cat") == "kernel" and e.get("ph") == "X"
    ]


def main() -> None:
    import cupy_speed

    p = argparse.ArgumentParser()
    p.add_argument("--model", default="synthetic:qwen3-0.6b")
    p.add_argument("--streams", type=int, nargs="+", default=[1, 8])
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--kv", default="bf16")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    out = []
    for streams in args.streams:
        keep: dict[str, Any] = {}
        row = cupy_speed.ours(args.model, streams, args.context, 6, args.kv, True, keep)
        summary = summarize(trace(keep["graph"], args.reps), args.reps)
        summary |= {"streams": streams, "replay_ms": row["replay_ms"]}
        print(f"\n## {streams} stream(s): replay {row['replay_ms']:.3f} ms without tracing")
        print(table(summary), flush=True)
        out.append(summary)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
