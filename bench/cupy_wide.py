"""GPU time of the mma GEMM's two kernels at a prompt step's row counts (the same bits):

    python bench/cupy_wide.py --rows 64 128 256 512 1024 [--shape K N ...] [--calls 40]

For each weight shape (default: the qwen3-0.6b projections; gate/up with its SiLU-mul) and
row count, the 8-row-tile kernel (mma_gemm_T / mma_silu_T) and the wide one (cupy_mma_wide.cu)
take turns: `calls` launches between two CUDA events, queued behind a spinning kernel so the
events read GPU time, not the host's launches (as cupy_op_profile.py --gpu-only); five turns
each, the median; the outputs are compared bit for bit once. Prints microseconds a call
(its bf16 input conversion included) and TFLOP/s.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

# (name, K, N): qkv, o, gate/up (fused with SiLU-mul), down of qwen3-0.6b
SHAPES = [("qkv", 1024, 4096), ("o", 2048, 1024), ("gate_up", 1024, 6144), ("down", 3072, 1024)]


def _call(ops, base, name: str, x, w, n: int, wide_from: int):  # type: ignore[no-untyped-def]
    ops.options = dataclasses.replace(base, wide_from=wide_from)
    if name == "gate_up":
        return ops.linear_silu(x, w, n // 2)
    return ops.linear(x, w)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    ap.add_argument("--calls", type=int, default=40)
    args = ap.parse_args()
    import cupy as cp
    from cupy_op_profile import SPIN

    from engine.ops.cupy_ops import CupyOps

    ops = CupyOps(probe=False)
    spin = cp.RawKernel(SPIN, "spin")
    rate = cp.cuda.runtime.deviceGetAttribute(13, cp.cuda.Device().id) or 1_980_000  # kHz
    hold = np.int64(args.calls * 60 * rate / 1e3)  # 60 us a call: the host's launches fit
    base = ops.options
    rng = np.random.default_rng(0)
    print(f"{'weight':8} {'rows':>5} {'tiles us':>9} {'wide us':>9} {'tiles TF/s':>10} "
          f"{'wide TF/s':>10} {'speedup':>8}  bits")  # fmt: skip
    for name, k, n in SHAPES:
        w = ops.prepare_linear(rng.standard_normal((n, k)).astype(np.float32) / np.sqrt(k))
        for m in args.rows:
            x = ops.asarray(rng.standard_normal((m, k)).astype(np.float32))
            got = [_call(ops, base, name, x, w, n, f).tobytes() for f in (0, 1)]
            times: dict[int, list[float]] = {0: [], 1: []}
            for _ in range(5):
                for wide_from in (0, 1):
                    _call(ops, base, name, x, w, n, wide_from)
                    a, b = cp.cuda.Event(), cp.cuda.Event()
                    spin((1,), (1,), (hold,))
                    a.record()
                    for _ in range(args.calls):
                        _call(ops, base, name, x, w, n, wide_from)
                    b.record()
                    b.synchronize()
                    times[wide_from].append(cp.cuda.get_elapsed_time(a, b) * 1e3 / args.calls)
            t0, t1 = statistics.median(times[0]), statistics.median(times[1])
            tf0, tf1 = 2e-6 * m * n * k / t0, 2e-6 * m * n * k / t1
            bits = "same" if got[0] == got[1] else "DIFFER"
            print(f"{name:8} {m:5d} {t0:9.1f} {t1:9.1f} {tf0:10.1f} {tf1:10.1f} "
                  f"{t0 / t1:7.2f}x  {bits}")  # fmt: skip
    ops.options = base


if __name__ == "__main__":
    main()
