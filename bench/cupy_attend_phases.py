"""Where a decode step's attention launch spends its time, phase by phase, inside the step's
CUDA graph: the attention kernels compiled with ENGINE_ATTEND_PHASES (cupy_attend_stage.cu)
write, per block, clock64() at each phase boundary, globaltimer at the block's start and end,
and whether it merged the pair, and the cycles of each phase of a chunk pass summed over the
passes; after a replay the step's last attention launch is read back.
What neither ncu (the kernel alone) nor the timeline (a kernel's interval) says: which part of
a block's work (its wait for the kernel before, its copies, scoring, the trees, the value pass,
the partial sums and election, the merge) the launch waits on.

    python bench/cupy_attend_phases.py --model synthetic:qwen3-0.6b --streams 1 8 --context 512

Per phase, over the launch's blocks and the replays: mean, median and max µs (cycles at the
SM clock that the blocks' own globaltimer spans give), then the launch's span (first block's
start to last block's end) and how far apart its blocks started. The kernels with the define
are not the engine's: each phase mark is one thread's clock read and store.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # cupy_speed, beside this file

PHASES = 14  # ATT_PHASES in cupy_attend_stage.cu (its comment says what each slot holds)
BLOCKS = 8192  # ATT_PHASE_BLOCKS
START_NS, END_NS, MERGED, PASSES = 8, 9, 10, 13
LOOP_FROM, LOOP_TO, LAPS = 12, 5, (2, 3, 4, 11)  # the chunk loop's marks, its laps' slots
OUTSIDE = -2  # the loop's cycles that no lap holds
# (from, to, label): clock64 marks, the interval between them (to == -1: slot `from` holds the
# cycles themselves, a phase summed over the chunk passes; OUTSIDE: the loop less its laps)
INTERVALS = (
    (0, 1, "start -> the wait for the kernel before ends"),
    (1, 12, "-> q read (the early copies' barrier before it)"),
    (12, 5, "-> the chunk loop's end, of which:"),
    (2, -1, "  keys' rows and copies (summed over passes)"),
    (3, -1, "  scores"),
    (4, -1, "  max and sum trees"),
    (11, -1, "  value pass"),
    (12, OUTSIDE, "  outside the laps"),
    (5, 6, "-> partial sums out, election (split)"),
    (6, 7, "-> merge (merging blocks) / exit (split)"),
    (0, 7, "a block, start to end"),
)


def blocks_of(log: np.ndarray) -> np.ndarray:
    """The rows [block, PHASES] of the blocks that wrote a start and an end (the log is cleared
    to -1 before a replay; the launch's grid is a prefix of its rows)."""
    rows = log.reshape(BLOCKS, PHASES)
    return rows[(rows[:, 0] >= 0) & (rows[:, 7] >= 0)]


def cycles_per_ns(rows: np.ndarray) -> float:
    """The SM clock the blocks ran at: clock64 cycles over globaltimer ns, start to end, summed
    over blocks (globaltimer may tick coarsely; the sums average it out)."""
    ns = float((rows[:, END_NS] - rows[:, START_NS]).sum())
    cycles = float((rows[:, 7] - rows[:, 0]).sum())
    if ns <= 0:
        raise ValueError("globaltimer did not advance over the blocks: no clock to read cycles by")
    return cycles / ns


def summarize(logs: list[np.ndarray]) -> dict[str, Any]:
    """Per interval of INTERVALS its mean, median and max µs over every block of every replay
    (a block without both marks is left out of that interval: the pair form writes no copy or
    election marks), the launches' mean span and start spread (µs), blocks, merging blocks;
    and under "by_passes" the intervals of the blocks of each count of chunk passes."""
    runs = [blocks_of(log) for log in logs]
    if not any(len(r) for r in runs):
        raise ValueError("no attention block wrote its marks (was the define compiled in?)")
    rate = statistics.fmean(cycles_per_ns(r) for r in runs if len(r))
    out: dict[str, Any] = {"cycles_per_ns": rate, "intervals": _intervals(runs, rate)}
    counts = sorted({int(c) for r in runs for c in r[:, PASSES] if c >= 0})
    out["by_passes"] = {c: _intervals([r[r[:, PASSES] == c] for r in runs], rate) for c in counts}
    spans = [float(r[:, END_NS].max() - r[:, START_NS].min()) / 1e3 for r in runs if len(r)]
    spread = [float(r[:, START_NS].max() - r[:, START_NS].min()) / 1e3 for r in runs if len(r)]
    out["span_us"], out["start_spread_us"] = statistics.fmean(spans), statistics.fmean(spread)
    out["blocks"] = statistics.fmean(len(r) for r in runs)
    out["merging"] = statistics.fmean(int((r[:, MERGED] == 1).sum()) for r in runs)
    return out


def _intervals(runs: list[np.ndarray], rate: float) -> list[dict[str, Any]]:
    """INTERVALS' rows (interval, mean, median, max µs, blocks) over these blocks."""
    rows = []
    for a, b, label in INTERVALS:
        us = [float(x) / rate / 1e3 for r in runs for x in _cycles(r, a, b)]
        if us:
            row = {"interval": label, "mean": statistics.fmean(us), "median": statistics.median(us)}
            rows.append({**row, "max": max(us), "blocks": len(us)})
    return rows


def _cycles(rows: np.ndarray, a: int, b: int) -> np.ndarray:
    """Each block's cycles from mark a to mark b, or those summed in slot a (b == -1), or the
    chunk loop's less its laps (b == OUTSIDE); blocks without the marks left out."""
    if b == OUTSIDE:
        cols = (LOOP_FROM, LOOP_TO, *LAPS)
        have = np.all(rows[:, cols] >= 0, axis=1)
        loop = rows[:, LOOP_TO] - rows[:, LOOP_FROM]
        return (loop - rows[:, list(LAPS)].sum(axis=1))[have]
    if b < 0:
        return rows[:, a][rows[:, a] >= 0]
    return (rows[:, b] - rows[:, a])[(rows[:, a] >= 0) & (rows[:, b] >= 0)]


def table(s: dict[str, Any]) -> str:
    counts = sorted(s.get("by_passes", {}))
    head = "| phase | mean µs | median µs | max µs |"
    head += "".join(f" mean, {c} pass{'es' if c != 1 else ''} |" for c in counts)
    lines = [head, "| --- " * (4 + len(counts)) + "|"]
    for r in s["intervals"]:
        cells = f"| {r['interval']} | {r['mean']:.2f} | {r['median']:.2f} | {r['max']:.2f} |"
        for c in counts:
            got = [x for x in s["by_passes"][c] if x["interval"] == r["interval"]]
            cells += f" {got[0]['mean']:.2f} |" if got else " |"
        lines.append(cells)
    lines.append(
        f"\nlaunch span {s['span_us']:.2f} µs, blocks started over {s['start_spread_us']:.2f} µs;"
        f" {s['blocks']:.0f} blocks, {s['merging']:.0f} merging; SM clock"
        f" {s['cycles_per_ns']:.2f} GHz"
    )
    return "\n".join(lines)


def measure(spec: str, streams: int, context: int, kind: str, replays: int) -> dict[str, Any]:
    import cupy as cp
    import cupy_speed

    keep: dict[str, Any] = {}
    cupy_speed.ours(spec, streams, context, 3, kind, True, keep)
    # each module its own log: the main one's and an option's (the _tail kernels', the store's)
    shape = (BLOCKS * PHASES,)
    arrays = [
        cp.ndarray(shape, dtype=cp.int64, memptr=m.get_global("attend_phase_log"))
        for m in keep["ops"].modules
    ]
    logs = []
    for _ in range(replays):
        for log in arrays:
            log.fill(-1)
        cp.cuda.Device().synchronize()  # the graph replays on a stream of its own
        keep["graph"].replay_ms(1)  # one replay to warm, one timed: the log keeps the last
        # the step's launches take one form a shape: the module whose kernels ran, the last
        # with a mark where an option's ran too
        got = [cp.asnumpy(log) for log in arrays]
        logs.append(next((g for g in reversed(got) if (g != -1).any()), got[0]))
    return summarize(logs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="synthetic:qwen3-0.6b")
    p.add_argument("--streams", type=int, nargs="+", default=[1, 8])
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--kv", default="bf16", choices=["bf16", "fp8"])
    p.add_argument("--replays", type=int, default=20)
    args = p.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
    from engine.ops import cupy_modules

    cupy_modules.DIAGNOSTIC_DEFINES.append("-DENGINE_ATTEND_PHASES")
    for streams in args.streams:
        s = measure(args.model, streams, args.context, args.kv, args.replays)
        print(f"## {streams} stream(s), context {args.context}, {args.kv} KV\n\n{table(s)}\n")


if __name__ == "__main__":
    main()
