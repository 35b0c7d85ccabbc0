"""Issue 28's speed bars against one machine's figures, as a Markdown table (docs/peers.md).

    python bench/cupy_speed.py --streams 1 8 --transformers eager static --json speed.json
    python -m engine bench --backend cupy --model synthetic:qwen3-0.6b --parallel 1,8 \
        --prompt-tokens 16 --gen-tokens 64 --repeats 3 --json > bench.json
    python bench/drafter_ratio.py --backend cupy --model fixtures/models/tiny-qwen3 \
        --drafter mtp --parallel 1 8 --pairs 21 --draft-tokens 4 > mtp.jsonl
    python bench/cupy_bars.py --speed speed.json --bench bench.json --mtp mtp.jsonl

(bench/cupy_bars.sh runs the last three, ours alone in the first, then transformers' arms in
what is left of its budget.) A figure that is missing (a step that failed or was not
run) reads "not run" and does not hold; the exit code is 0 either way: this reports.
"""

from __future__ import annotations

import argparse
import json
import operator
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple


class Bar(NamedTuple):
    name: str
    unit: str
    holds: Callable[[float, float], bool]
    sign: str
    target: float


BARS = {
    "step_1": Bar("decode step, 1 stream (graph replay)", "ms", operator.le, "<=", 1.0),
    "step_8": Bar("decode step, 8 streams (graph replay)", "ms", operator.le, "<=", 1.2),
    "batching": Bar("8 / 1 streams, `engine bench` decode tok/s", "x", operator.ge, ">=", 6.5),
    "prefill": Bar("prefill, 512-token prompt", "tok/s", operator.ge, ">=", 50_000.0),
    "mtp_1": Bar("MTP / plain, 1 stream (median)", "x", operator.ge, ">=", 1.5),
    "mtp_8": Bar("MTP / plain, 8 streams (median)", "x", operator.gt, ">", 1.1),
}


def _ours(rows: list[dict[str, Any]], streams: int) -> dict[str, Any] | None:
    return next(
        (r for r in rows if r["engine"] == "ours (cupy, graph)" and r["streams"] == streams),
        None,
    )


def figures(
    speed: list[dict[str, Any]], bench: dict[str, Any] | None, mtp: list[dict[str, Any]]
) -> dict[str, float | None]:
    """Each bar's figure from the three tools' outputs (None where absent): replay ms and
    prefill from cupy_speed's graph rows (prefill: the lower of its stream counts), the
    decode ratio from the bench sweep, MTP medians by stream count."""
    one, eight = _ours(speed, 1), _ours(speed, 8)
    prefills = [r["prefill_tok_s"] for r in (one, eight) if r]
    sweep = {r["parallel"]: r["decode_tok_s"] for r in (bench or {}).get("sweep", [])}
    ratio = sweep[8] / sweep[1] if sweep.get(1) and 8 in sweep else None
    drafted = {r["parallel"]: r["ratio_median"] for r in mtp}
    return {
        "step_1": one["replay_ms"] if one else None,
        "step_8": eight["replay_ms"] if eight else None,
        "batching": ratio,
        "prefill": min(prefills) if prefills else None,
        "mtp_1": drafted.get(1),
        "mtp_8": drafted.get(8),
    }


def table(figs: dict[str, float | None], device: str) -> str:
    lines = [
        f"Issue 28's bars on {device}:",
        "",
        "| bar | target | measured | holds |",
        "| --- | --- | --- | --- |",
    ]
    for key, bar in BARS.items():
        got = figs.get(key)
        shown = "not run" if got is None else f"{got:,.3f}".rstrip("0").rstrip(".")
        held = got is not None and bar.holds(got, bar.target)
        target = f"{bar.sign} {bar.target:,g} {bar.unit}"
        lines.append(f"| {bar.name} | {target} | {shown} | {'yes' if held else 'no'} |")
    return "\n".join(lines)


def _json_lines(path: str | None) -> list[dict[str, Any]]:
    """The JSON objects of a file's lines that are one (others, progress, are skipped)."""
    if not path or not Path(path).exists():
        return []
    out = []
    for line in Path(path).read_text().splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--speed", help="bench/cupy_speed.py --json's file")
    p.add_argument("--bench", help="`python -m engine bench --json`'s output")
    p.add_argument("--mtp", help="bench/drafter_ratio.py's output")
    p.add_argument("--device", default="this machine")
    args = p.parse_args()
    found = args.speed and Path(args.speed).exists()
    speed = json.loads(Path(args.speed).read_text()) if found else []
    bench = next(iter(_json_lines(args.bench)), None)
    print(table(figures(speed, bench, _json_lines(args.mtp)), args.device))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
