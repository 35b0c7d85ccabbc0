"""Where `python -m engine bench` spends a run's rounds: each action's wall time by kind and
row count, and (with --profile) the top functions of one run by own time.

    python bench/cupy_rounds.py --model synthetic:qwen3-0.6b --backend cupy --parallel 1 8 \
        [--profile 8] [--json out.json]

The bench's decode rate is decoded tokens over the wall time of every round; a round of k
streams costs about as much as one of 8 on a GPU, so how many rounds run with fewer streams
(while prompts go in) and what a round costs beyond the device step are what this shows.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout


def table(row: dict[str, Any]) -> dict[str, Any]:
    """Per (kind, rows): count, median and total wall ms of the run's actions."""
    a = row["actions"]
    groups: dict[tuple[str, int], list[float]] = defaultdict(list)
    for kind, rows, wall in zip(a["kind"], a["rows"], a["wall_s"], strict=True):
        groups[kind, rows].append(wall * 1e3)
    return {
        f"{kind}:{rows}": {
            "n": len(w),
            "median_ms": float(np.median(w)),
            "total_ms": float(np.sum(w)),
        }
        for (kind, rows), w in sorted(groups.items())
    }


_ABSENT = object()


def host_parts() -> list[tuple[Any, str]]:
    """The engine's and the cupy backend's host steps of a round (cupy only)."""
    from engine.lanes import engine, policy
    from engine.model import qwen3
    from engine.ops import cupy_graph, cupy_kv, cupy_rows

    return [
        (engine.Engine, "_round"), (engine.Engine, "_emit"), (policy, "choose"),
        (qwen3, "graph_step"), (cupy_kv.CupyKV, "fixed_rows"),
        (cupy_graph.StepGraph, "fill"), (cupy_graph.StepGraph, "rows_to_host"),
        (cupy_rows, "scan_device"),
    ]  # fmt: skip


class Timers:
    """Wall time of each call of some functions: methods of an instance or a class, or a
    module's functions (looked up at call time), wrapped while installed."""

    def __init__(self, targets: list[tuple[Any, str]]) -> None:
        self.targets = targets
        self.ms: dict[str, list[float]] = defaultdict(list)
        self._saved: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        for obj, name in self.targets:
            real = getattr(obj, name)
            self._saved.append((obj, name, vars(obj).get(name, _ABSENT)))
            if isinstance(obj, type):  # a class: the wrapper binds as the method did
                real = vars(obj)[name]

            def timed(*args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
                t = time.perf_counter()
                out = _real(*args, **kw)
                self.ms[_name].append((time.perf_counter() - t) * 1e3)
                return out

            setattr(obj, name, timed)

    def remove(self) -> None:
        for obj, name, saved in reversed(self._saved):
            if saved is _ABSENT:
                delattr(obj, name)
            else:
                setattr(obj, name, saved)
        self._saved = []

    def summary(self) -> dict[str, Any]:
        return {
            k: {"n": len(v), "median_ms": float(np.median(v)), "total_ms": float(np.sum(v))}
            for k, v in self.ms.items()
        }


def main() -> None:
    from engine.cli.bench_run import measure
    from engine.cli.common import load

    p = argparse.ArgumentParser()
    p.add_argument("--model", default="synthetic:qwen3-0.6b")
    p.add_argument("--backend", default="cupy")
    p.add_argument("--parallel", type=int, nargs="+", default=[1, 8])
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--gen-tokens", type=int, default=32)
    p.add_argument("--step-rows", type=int, default=64)
    p.add_argument("--profile", type=int, default=0, help="cProfile a run of this many streams")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    ns = argparse.Namespace(
        model=args.model, backend=args.backend, context=1024, kv="bf16", kv_pages=0,
        page_rows=16, step_rows=args.step_rows, share=1.0, drafter="none", drafter_model=None,
        draft_tokens=4, prompt_tokens=args.prompt_tokens,
    )  # fmt: skip
    model, _ = load(ns)
    out = []
    for n in args.parallel:
        measure(model, ns, n, args.gen_tokens)  # warm-up: kernels, graphs of this engine
        row = measure(model, ns, n, args.gen_tokens)
        timers = Timers([(model, "forward"), (model.ops, "to_numpy")])
        if hasattr(model.ops, "run_graph"):
            timers.targets.append((model.ops, "run_graph"))
        if args.backend == "cupy":
            timers.targets.extend(host_parts())
        timers.install()
        measure(model, ns, n, args.gen_tokens)  # a third run, timed by parts
        timers.remove()
        t = table(row)
        print(f"parallel {n}: decode {row['decode_tok_s']:.1f} tok/s", flush=True)
        for key, v in {**t, **timers.summary()}.items():
            print(f"  {key:<10} n={v['n']:3d}  median {v['median_ms']:7.3f} ms  "
                  f"total {v['total_ms']:8.1f} ms")  # fmt: skip
        out.append({"parallel": n, "decode_tok_s": row["decode_tok_s"], "actions": t,
                    "parts": timers.summary()})  # fmt: skip
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        measure(model, ns, args.profile, args.gen_tokens)
        prof.disable()
        s = io.StringIO()
        stats = pstats.Stats(prof, stream=s)
        stats.sort_stats("tottime").print_stats(30)
        stats.sort_stats("cumulative").print_stats(45)
        print(s.getvalue())
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
