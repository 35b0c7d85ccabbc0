"""python -m engine bench: prefill and decode speed, CPU time per token, the 1..N sweep.

``--json`` prints one object of the bench schema (``bench_schema``, docs/contract.md,
section *bench*): one sweep row per stream count, each the best of ``--repeats`` timed
runs after one untimed warm-up run, and the facts of the machine it ran on.
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

from engine.cli.common import add_engine_flags, add_model_flags, engine_config, load, make_drafter
from engine.config import env_flags
from engine.errors import InputError
from engine.lanes.engine import Engine, Event
from engine.lanes.request import Request

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


def _requests(n: int, prompt_tokens: int, gen_tokens: int, vocab: int) -> list[Request]:
    rng = np.random.default_rng(1234)
    hi = min(vocab, 1000)
    return [
        Request(
            id=f"b{i}",
            prompt_ids=rng.integers(1, hi, prompt_tokens).tolist(),
            max_tokens=gen_tokens,
            ignore_eos=True,
        )
        for i in range(n)
    ]


def _measure(model: Any, args: argparse.Namespace, n: int, gen_tokens: int) -> dict[str, Any]:
    """One timed run of ``n`` streams: wall rates, TTFT, CPU seconds of this process, and
    ``actions``: per engine action its kind, CPU and wall seconds, rows fed and tokens made."""
    cfg = engine_config(args, parallel=n)
    engine = Engine(model, cfg, drafter=make_drafter(cfg, model))
    reqs = _requests(n, args.prompt_tokens, gen_tokens, model.config.vocab_size)
    streams = [engine.submit(r) for r in reqs]
    actions: dict[str, list[Any]] = {k: [] for k in ("kind", "cpu_s", "wall_s", "rows", "tokens")}
    last = [time.process_time(), 0]

    def on_event(_: Engine, e: Event) -> None:  # CPU from the previous event's end to this one's
        now, made = time.process_time(), sum(len(s.generated) for s in streams)
        got = (e.kind, now - last[0], e.seconds, e.rows, made - last[1])
        for k, v in zip(actions, got, strict=True):
            actions[k].append(v)
        last[0], last[1] = now, made

    engine.on_event = on_event
    cpu0, t0 = time.process_time(), time.perf_counter()
    last[0] = cpu0
    engine.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    rounds = [i for i, k in enumerate(actions["kind"]) if k == "round"]
    steps = [i for i, k in enumerate(actions["kind"]) if k != "round"]
    prefill_s = sum(actions["wall_s"][i] for i in steps)
    round_s = sum(actions["wall_s"][i] for i in rounds)
    generated = sum(len(s.generated) for s in streams)
    decoded = sum(max(0, len(s.generated) - 1) for s in streams)  # the first comes with prefill
    prompt_rows = engine.stats["prefill_tokens"]
    firsts = {
        sid: e.start + e.seconds for e in engine.events for sid in e.first_token if sid is not None
    }
    ttft = sum(firsts.values()) / len(firsts) if firsts else 0.0
    round_cpu = sum(actions["cpu_s"][i] for i in rounds)
    step_cpu = sum(actions["cpu_s"][i] for i in steps)
    return {
        "parallel": n,
        "decode_tok_s": decoded / round_s if round_s else 0.0,
        "prefill_tok_s": prompt_rows / prefill_s if prefill_s else 0.0,
        "ttft_ms": ttft * 1000,
        "cpu_s_per_token": cpu / generated if generated else 0.0,
        "decode_cpu_s_per_token": round_cpu / decoded if decoded else 0.0,
        "prefill_cpu_s_per_token": step_cpu / prompt_rows if prompt_rows else 0.0,
        "wall_s": wall,
        "cpu_s": cpu,
        "generated_tokens": generated,
        "prompt_tokens": prompt_rows,
        "tokens_per_round": decoded / max(1, sum(s.rounds for s in streams)),
        "acceptance": sum(s.accepted for s in streams) / max(1, sum(s.drafted for s in streams)),
        "actions": actions,
    }


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
    for _ in range(args.warmup):  # page faults, allocator and caches; not timed
        _measure(model, args, max(counts), min(4, args.gen_tokens))
    if args.lockstep:
        from engine.cli.bench_lockstep import serve_units

        return serve_units(lambda n: _measure(model, args, n, args.gen_tokens), header(args))
    results = []
    for n in counts:
        best = best_of([_measure(model, args, n, args.gen_tokens) for _ in range(args.repeats)])
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
