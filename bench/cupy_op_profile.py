"""Where an eager forward's time goes on the cupy backend, by Ops method: a prompt of
`context` tokens and one decode step at each stream count (docs/cupy.md).

    python bench/cupy_op_profile.py --model synthetic:qwen3-0.6b --context 512 --streams 1 8

Each outermost Ops call is timed with CUDA events around it and a synchronize after it, so
a figure is the GPU time of that call's kernels plus the host time of launching them (small
calls read mostly launch time; a long prompt step's calls are mostly GPU time). With
`--gpu-only`, a kernel that spins for `--hold-us` is queued before each call, so the call's
launches are all queued before the GPU reaches them and the events read its kernels' GPU
time alone (a call that waits on the host inside, a copy back, reads its host time too).
Graph replays are off: every step runs eagerly.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

UNTIMED = {"asarray", "to_numpy", "new_kv", "new_lanes", "step_graph", "run_graph"}
UNTIMED |= {"graph_rows", "memory_available", "split_counters", "moe_in_graph"}


SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}
"""


def _key(name: str, args: tuple[Any, ...]) -> str:
    """linear calls apart by their weight's K x N (qkv, o, gate/up, down, the head)."""
    w = args[2] if len(args) > 2 else None
    if name.startswith("linear") and hasattr(w, "k") and hasattr(w, "n"):
        return f"{name} {w.k}x{w.n}"
    return name


class OpTimer:
    """Wraps every public method of the ops class; `stats` maps name -> [calls, ms]. hold_us:
    where > 0, a spinning kernel of about that long goes before each timed call."""

    def __init__(self, cls: type, hold_us: float = 0.0) -> None:
        import cupy as cp

        self.cp = cp
        self.stats: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
        self.depth = 0
        self.hold = None
        if hold_us > 0:
            # cudaDevAttrClockRate, kHz (an H200's 1,980 MHz where the runtime gives none)
            rate = cp.cuda.runtime.deviceGetAttribute(13, cp.cuda.Device().id) or 1_980_000
            self.cycles = np.int64(hold_us * rate / 1e3)
            self.hold = cp.RawKernel(SPIN, "spin")
        for name in dir(cls):
            fn = getattr(cls, name)
            if not name.startswith("_") and callable(fn) and name not in UNTIMED:
                setattr(cls, name, self._wrap(name, fn))

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kw: Any) -> Any:
            if self.depth:
                return fn(*args, **kw)
            self.depth += 1
            start, end = self.cp.cuda.Event(), self.cp.cuda.Event()
            if self.hold is not None:
                self.hold((1,), (1,), (self.cycles,))
            start.record()
            try:
                return fn(*args, **kw)
            finally:
                end.record()
                end.synchronize()
                self.depth -= 1
                entry = self.stats[_key(name, args)]
                entry[0] += 1
                entry[1] += self.cp.cuda.get_elapsed_time(start, end)

        return timed

    def report(self, title: str, wall_ms: float) -> None:
        total = sum(ms for _, ms in self.stats.values())
        print(f"{title}: wall {wall_ms:.2f} ms, timed calls {total:.2f} ms")
        for name, (calls, ms) in sorted(self.stats.items(), key=lambda kv: -kv[1][1]):
            print(f"  {name:20} {int(calls):5} calls {ms:9.3f} ms")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="synthetic:qwen3-0.6b")
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--streams", type=int, nargs="+", default=[1, 8])
    p.add_argument("--kv", default="bf16")
    p.add_argument("--gpu-only", action="store_true", help="queue each call behind a spin")
    p.add_argument("--hold-us", type=float, default=300.0, help="the spin's length, µs")
    p.add_argument(
        "--profile-range",
        choices=["prompt", "decode"],
        help="run the reported prompt or decode step between cudaProfilerStart and Stop "
        "(for `ncu --profile-from-start off`: that step's kernels alone)",
    )
    args = p.parse_args()
    import cupy as cp

    from engine.model.loader import load_model
    from engine.model.qwen3 import Segment
    from engine.ops import cupy_ops

    model = load_model(args.model, "cupy")
    model.ops.graphs = False
    timer = OpTimer(cupy_ops.CupyOps, args.hold_us if args.gpu_only else 0.0)
    page_rows, ctx, vocab = 16, args.context, model.config.vocab_size
    rng = np.random.default_rng(0)

    def run(segs: list[Any], kv: Any, profile: bool = False) -> float:
        timer.stats.clear()
        cp.cuda.Device().synchronize()
        if profile:
            cp.cuda.profiler.start()
        t = time.perf_counter()
        model.forward(segs, kv)
        cp.cuda.Device().synchronize()
        if profile:
            cp.cuda.profiler.stop()
        return (time.perf_counter() - t) * 1e3

    for streams in args.streams:
        per_lane = -(-(ctx + 8) // page_rows)
        kv = model.new_kv(streams * per_lane, page_rows, args.kv, lanes=streams)
        lanes = [list(range(i * per_lane, (i + 1) * per_lane)) for i in range(streams)]
        for j, i in enumerate([0, *range(streams)]):  # the first warms; the last is reported
            toks = rng.integers(0, vocab, ctx)
            segs = [Segment(toks, 0, lanes[i], np.asarray([ctx - 1]), lane=i)]
            wall = run(segs, kv, args.profile_range == "prompt" and j == streams)
        timer.report(f"prompt of {ctx} tokens (the last of {streams} streams)", wall)
        for step in range(3):
            segs = [
                Segment(rng.integers(0, vocab, 1), ctx + step, lanes[i], np.asarray([0]), lane=i)
                for i in range(streams)
            ]
            wall = run(segs, kv, args.profile_range == "decode" and step == 2)
        timer.report(f"decode step at {streams} streams (the third)", wall)


if __name__ == "__main__":
    main()
