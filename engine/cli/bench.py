"""python -m engine bench: prefill and decode tokens/s, and the 1..N stream sweep."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from engine.cli.common import add_engine_flags, add_model_flags, engine_config, load, make_drafter
from engine.errors import InputError
from engine.lanes.engine import Engine
from engine.lanes.request import Request


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure prefill and decode speed")
    add_model_flags(p)
    add_engine_flags(p, parallel=False)
    p.add_argument("--parallel", default="1", help="stream counts to sweep, e.g. 1,2,4,8")
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--gen-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    p.add_argument("--json", action="store_true")
    p.add_argument("--ops", action="store_true", help="cost of exactness: tiled vs plain matmul")
    p.set_defaults(func=run)


def _requests(n: int, args: argparse.Namespace, vocab: int, tag: str) -> list[Request]:
    rng = np.random.default_rng(1234)
    hi = min(vocab, 1000)
    return [
        Request(
            id=f"{tag}{i}",
            prompt_ids=rng.integers(1, hi, args.prompt_tokens).tolist(),
            max_tokens=args.gen_tokens,
            ignore_eos=True,
        )
        for i in range(n)
    ]


def _measure(model: Any, args: argparse.Namespace, n: int) -> dict[str, float]:
    cfg = engine_config(args, parallel=n)
    engine = Engine(model, cfg, drafter=make_drafter(cfg, model))
    streams = [engine.submit(r) for r in _requests(n, args, model.config.vocab_size, "b")]
    t0 = time.perf_counter()
    engine.run()
    wall = time.perf_counter() - t0
    prefill_s = sum(e.seconds for e in engine.events if e.kind != "round")
    round_s = sum(e.seconds for e in engine.events if e.kind == "round")
    decoded = sum(len(s.generated) - 1 for s in streams)
    first = min((e.start + e.seconds for e in engine.events if e.kind != "round"), default=0)
    return {
        "parallel": n,
        "prefill_tok_s": engine.stats["prefill_tokens"] / prefill_s if prefill_s else 0.0,
        "decode_tok_s": decoded / round_s if round_s else 0.0,
        "ttft_s": first,
        "wall_s": wall,
        "tokens_per_round": decoded / max(1, sum(s.rounds for s in streams)),
        "acceptance": sum(s.accepted for s in streams) / max(1, sum(s.drafted for s in streams)),
    }


def run(args: argparse.Namespace) -> int:
    try:
        counts = [int(x) for x in args.parallel.split(",")]
    except ValueError:
        raise InputError(
            f"--parallel: expected counts like 1,2,4,8, got '{args.parallel}'"
        ) from None
    model, _ = load(args)
    if args.ops:
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
    results = []
    for n in counts:
        best = None
        for _ in range(args.repeats):
            r = _measure(model, args, n)
            if best is None or r["decode_tok_s"] > best["decode_tok_s"]:
                best = r
        results.append(best)
        print(
            f"parallel {n}: decode {best['decode_tok_s']:.1f} tok/s, prefill "
            f"{best['prefill_tok_s']:.1f} tok/s, ttft {best['ttft_s'] * 1000:.1f} ms",
            file=sys.stderr,
        )
    out = {
        "model": args.model,
        "backend": args.backend,
        "kv": args.kv,
        "drafter": args.drafter,
        "prompt_tokens": args.prompt_tokens,
        "gen_tokens": args.gen_tokens,
        "sweep": results,
    }
    if args.json:
        print(json.dumps(out))
    else:
        for r in results:
            print(
                f"{r['parallel']:>3} streams  decode {r['decode_tok_s']:9.1f} tok/s  "
                f"prefill {r['prefill_tok_s']:9.1f} tok/s  ttft {r['ttft_s'] * 1000:7.1f} ms"
            )
    return 0
