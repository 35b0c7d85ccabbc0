"""Host time of `model.forward` on cupy, by function: a decode step at N streams (graph and
eager) and one prompt step, under cProfile, after warm-up steps. For finding what a change
costs on the host when the device work is the same.

    python bench/cupy_host.py --model synthetic:qwen3-0.6b --streams 8 --steps 50
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout


def main() -> None:
    from engine.model.loader import load_model
    from engine.model.qwen3 import Segment

    p = argparse.ArgumentParser()
    p.add_argument("--model", default="synthetic:qwen3-0.6b")
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--context", type=int, default=128)
    args = p.parse_args()
    model = load_model(args.model, "cupy")
    page_rows, n = 16, args.streams
    per_lane = -(-(args.context + 2 * args.steps + 8) // page_rows)
    rng = np.random.default_rng(0)
    for graphs in (True, False):
        model.ops.graphs = graphs
        kv = model.new_kv(n * per_lane, page_rows, "bf16", lanes=n)
        lanes = [list(range(i * per_lane, (i + 1) * per_lane)) for i in range(n)]
        for i in range(n):
            toks = rng.integers(0, 1000, args.context)
            model.forward([Segment(toks, 0, lanes[i], np.asarray([args.context - 1]), i)], kv)
        pos = args.context

        def step(pos: int, kv: object = kv, lanes: list = lanes) -> None:
            segs = [
                Segment(rng.integers(0, 1000, 1), pos, lanes[i], np.asarray([0]), lane=i)
                for i in range(n)
            ]
            model.forward(segs, kv)

        for _ in range(5):  # warm: capture, pools
            step(pos)
            pos += 1
        steps = args.steps if graphs else max(5, args.steps // 5)
        t = time.perf_counter()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(steps):
            step(pos)
            pos += 1
        prof.disable()
        ms = (time.perf_counter() - t) / steps * 1e3
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
        print(f"=== {'graph' if graphs else 'eager'} decode, {n} streams: {ms:.3f} ms/step "
              f"(profiled) ===")  # fmt: skip
        print("\n".join(s.getvalue().splitlines()[6:]))


if __name__ == "__main__":
    main()
