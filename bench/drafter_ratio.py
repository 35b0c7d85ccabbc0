"""Drafted against plain decoding in one process, runs alternated, as ratios.

    python bench/drafter_ratio.py --backend cupy --model fixtures/models/tiny-qwen3 \
        --drafter mtp --parallel 1 8 --pairs 9 [--draft-tokens 4] [--gen-tokens 256]
    python bench/drafter_ratio.py ... --drafter block \
        --drafter-model fixtures/models/tiny-qwen3-block

A separate `engine bench` per side puts each side on its own process, machine state and
minute: on a shared GPU host the plain rate moved 2.4k-3.4k tok/s between invocations (H200,
tiny fixture). Here both sides share one loaded model and alternate run by run (each keeps its
own KV memory, drafter and captured graphs: engine/cli/bench_run.py `Reuse`, warmed first);
the figure is the median over pairs of drafted / plain decode tok/s, with its range.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from engine.__main__ import build_parser
from engine.cli.bench_run import Reuse, measure
from engine.cli.common import load


def bench_args(args: argparse.Namespace, drafter: str) -> argparse.Namespace:
    argv = ["bench", "--backend", args.backend, "--model", args.model, "--drafter", drafter]
    argv += ["--prompt-tokens", str(args.prompt_tokens), "--gen-tokens", str(args.gen_tokens)]
    argv += ["--draft-tokens", str(args.draft_tokens)]
    if args.drafter_model and drafter != "none":
        argv += ["--drafter-model", args.drafter_model]
    return build_parser().parse_args(argv)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="numpy")
    p.add_argument("--model", required=True)
    p.add_argument("--drafter", default="mtp")
    p.add_argument("--parallel", type=int, nargs="+", default=[1, 8])
    p.add_argument("--pairs", type=int, default=9)
    p.add_argument("--drafter-model", default=None, help="the block drafter's directory")
    p.add_argument("--draft-tokens", type=int, default=4)
    p.add_argument("--prompt-tokens", type=int, default=16)
    p.add_argument("--gen-tokens", type=int, default=256)
    args = p.parse_args()
    sides = {"plain": bench_args(args, "none"), "drafted": bench_args(args, args.drafter)}
    model, _ = load(sides["plain"])
    for n in args.parallel:
        reuse = {side: Reuse() for side in sides}
        for side, a in sides.items():  # warm: graphs captured, caches filled
            measure(model, a, n, args.gen_tokens, reuse[side])
        rates: dict[str, list[float]] = {side: [] for side in sides}
        tpr = 0.0
        for i in range(args.pairs):
            order = list(sides) if i % 2 == 0 else list(reversed(sides))
            for side in order:
                row = measure(model, sides[side], n, args.gen_tokens, reuse[side])
                rates[side].append(row["decode_tok_s"])
                tpr = row["tokens_per_round"] if side == "drafted" else tpr
            print(f"  n={n} pair {i + 1}/{args.pairs}", file=sys.stderr)
        ratios = [d / p for d, p in zip(rates["drafted"], rates["plain"], strict=True)]
        print(
            json.dumps(
                {
                    "parallel": n,
                    "drafter": args.drafter,
                    "draft_tokens": args.draft_tokens,
                    "pairs": args.pairs,
                    "plain_tok_s": round(statistics.median(rates["plain"]), 1),
                    "drafted_tok_s": round(statistics.median(rates["drafted"]), 1),
                    "ratio_median": round(statistics.median(ratios), 3),
                    "ratio_min": round(min(ratios), 3),
                    "ratio_max": round(max(ratios), 3),
                    "tokens_per_round": round(tpr, 2),
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
