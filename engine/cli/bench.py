"""python -m engine bench: prefill and decode speed, CPU time per token, the 1..N sweep.

``--json`` prints one object of the bench schema (``bench_schema``, docs/contract.md,
section *bench*): one sweep row per stream count, each the best of ``--repeats`` timed
runs after ``--warmup`` untimed ones of that count (runs of one count share its KV memory,
drafter and captured graphs), and the facts of the machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any

import numpy as np

from engine.cli.bench_run import Reuse, TimedRun, measure
from engine.cli.common import add_engine_flags, add_model_flags, load
from engine.config import env_flags
from engine.errors import InputError

BENCH_SCHEMA = 2  # 2: --lockstep and per-action samples
# per sweep row: the best of the repeats, field by field (rates: the highest; costs: the lowest)
HIGHER = ("decode_tok_s", "prefill_tok_s")
LOWER = (
    "ttft_ms",
    "cpu_s_per_token",
    "decode_cpu_s_per_token",
    "prefill_cpu_s_per_token",
    "wall_s",
    "cpu_s",
)
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure prefill and decode speed")
    add_model_flags(p)
    add_engine_flags(p, parallel=False)
    p.add_argument("--parallel", default="1", help="stream counts to sweep, e.g. 1,2,4,8")
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--gen-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3, help="best of this many timed runs")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs before the sweep")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--lockstep",
        action="store_true",
        help="after the warm-up, run one timed run per stream count read from stdin (JSON lines)",
    )
    p.add_argument("--ops", action="store_true", help="cost of exactness: tiled vs plain matmul")
    p.set_defaults(func=run)


def best_of(runs: list[dict[str, float]]) -> dict[str, Any]:
    """Field by field: the highest rate, the lowest cost; the rest from the first run."""
    out: dict[str, Any] = {k: v for k, v in runs[0].items() if k != "actions"}
    for k in HIGHER:
        out[k] = max(r[k] for r in runs)
    for k in LOWER:
        out[k] = min(r[k] for r in runs)
    out["repeats"] = len(runs)
    return out


def machine() -> dict[str, Any]:
    """Facts of the machine and process a bench ran in."""
    try:
        affinity = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "affinity": affinity,
        "threads": {k: os.environ.get(k) for k in THREAD_VARS},
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "pid": os.getpid(),
    }


def header(args: argparse.Namespace) -> dict[str, Any]:
    """What a bench ran: the schema version, model, engine settings, flags and machine."""
    return {
        "bench_schema": BENCH_SCHEMA,
        "model": args.model,
        "backend": args.backend,
        "kv": args.kv,
        "drafter": args.drafter,
        "prompt_tokens": args.prompt_tokens,
        "gen_tokens": args.gen_tokens,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "flags": env_flags(),
        "machine": machine(),
    }


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def run(args: argparse.Namespace) -> int:
    try:
        counts = [int(x) for x in args.parallel.split(",")]
    except ValueError:
        raise InputError(
            f"--parallel: expected counts like 1,2,4,8, got '{args.parallel}'"
        ) from None
    if any(n < 1 for n in counts) or args.repeats < 1 or args.warmup < 0:
        raise InputError("--parallel, --repeats: expected positive counts; --warmup >= 0")
    load_start = _loadavg()
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    model, _ = load(args)
    if args.ops:
        return _ops(model, args)
    reuse = Reuse()  # each count's KV memory and drafter (and the graphs captured on them)
    if args.lockstep:
        from engine.cli.bench_lockstep import serve_units

        for _ in range(args.warmup):  # page faults, allocator and caches; not timed
            measure(model, args, max(counts), min(4, args.gen_tokens), reuse)
        return serve_units(
            lambda n: measure(model, args, n, args.gen_tokens, reuse),
            lambda n: TimedRun(model, args, n, args.gen_tokens, reuse),
            header(args),
        )
    results = []
    for n in counts:
        reuse.only(n)
        for _ in range(args.warmup):  # page faults, allocator, caches, graphs; not timed
            measure(model, args, n, min(4, args.gen_tokens), reuse)
        best = best_of(
            [measure(model, args, n, args.gen_tokens, reuse) for _ in range(args.repeats)]
        )
        results.append(best)
        print(
            f"parallel {n}: decode {best['decode_tok_s']:.1f} tok/s, prefill "
            f"{best['prefill_tok_s']:.1f} tok/s, ttft {best['ttft_ms']:.1f} ms, "
            f"{best['cpu_s_per_token'] * 1000:.2f} ms CPU/token",
            file=sys.stderr,
        )
    out = {
        **header(args),
        "process": {
            "cpu_s": time.process_time() - cpu_start,
            "wall_s": time.perf_counter() - wall_start,
            "loadavg_start": load_start,
            "loadavg_end": _loadavg(),
        },
        "sweep": results,
    }
    if args.json:
        print(json.dumps(out))
    else:
        for r in results:
            print(
                f"{r['parallel']:>3} streams  decode {r['decode_tok_s']:9.1f} tok/s  "
                f"prefill {r['prefill_tok_s']:9.1f} tok/s  ttft {r['ttft_ms']:7.1f} ms  "
                f"cpu {r['cpu_s_per_token'] * 1000:6.2f} ms/token"
            )
    return 0


def _ops(model: Any, args: argparse.Namespace) -> int:
    """``bench --ops``: the cost of exactness per op shape, tiled against plain."""
    from engine.cli.bench_ops import exactness_cost

    rows = exactness_cost(model)
    if args.json:
        print(json.dumps({"model": args.model, "backend": args.backend, "ops": rows}))
    for r in rows:
        print(
            f"{r['rows']:>4} rows  tiled {r['tiled_ms']:8.3f} ms  plain "
            f"{r['plain_ms']:8.3f} ms  x{r['ratio']:.2f}",
            file=sys.stderr,
        )
    return 0
