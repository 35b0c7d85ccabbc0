"""The linear layers of a model's shape on the GPU: cuBLAS at the fixed row tile against the
backend's own GEMMs (ENGINE_CUPY_GEMM=own and =mma), per weight and row count, in GPU time (CUDA
events over 20 calls captured in one CUDA graph: launches from Python do not count), with the
weight bytes read per second (docs/cupy.md).

    python bench/cupy_gemm.py --model synthetic:qwen3-0.6b --rows 1 8 64 512 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cupy_speed's timer


def shapes(spec: str) -> dict[str, tuple[int, int]]:
    """(N, K) of each linear weight of one layer, and the head, from the model's config."""
    from engine.model.synthetic import SHAPES, parse

    h, inter, _, heads, kv, d, vocab, _ = SHAPES[parse(spec)[0]]
    return {
        "qkv": ((heads + 2 * kv) * d, h),
        "o": (h, heads * d),
        "gate_up": (2 * inter, h),
        "down": (h, inter),
        "lm_head": (vocab, h),
    }


def main() -> None:
    import cupy as cp
    from cupy_speed import _gpu_ms

    from engine.ops.cupy_ops import CupyOps
    from engine.ops.cupy_options import CupyOptions

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="synthetic:qwen3-0.6b")
    p.add_argument("--rows", type=int, nargs="+", default=[1, 8, 64, 512])
    p.add_argument("--json")
    a = p.parse_args()
    sides = {g: CupyOps(CupyOptions(gemm=g)) for g in ("cublas", "own", "mma")}
    rng = np.random.default_rng(0)
    out = []
    print(
        f"{'weight':8} {'N x K':>13} {'rows':>5} {'cublas us':>10} {'own us':>8} {'mma us':>8}"
        f" {'mma/cublas':>10} {'mma GB/s':>9} {'mma TFLOP/s':>11}"
    )
    for name, (n, k) in shapes(a.model).items():
        w_host = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
        ws = {s: ops.prepare_linear(w_host) for s, ops in sides.items()}
        for m in a.rows:
            x = cp.asarray(rng.standard_normal((m, k)).astype(np.float32))
            us = {}
            for s, ops in sides.items():
                call = lambda o=ops, w=ws[s], x=x: o.linear(x, w)  # noqa: E731
                us[s] = min(_gpu_ms(call) for _ in range(3)) * 1e3
            gbs = n * k * 2 / (us["mma"] * 1e-6) / 1e9
            tflops = 2 * m * n * k / (us["mma"] * 1e-6) / 1e12
            row = {
                "weight": name,
                "n": n,
                "k": k,
                "rows": m,
                **{f"{s}_us": v for s, v in us.items()},
            }
            out.append(row)
            print(
                f"{name:8} {f'{n}x{k}':>13} {m:5d} {us['cublas']:10.1f} {us['own']:8.1f}"
                f" {us['mma']:8.1f} {us['mma'] / us['cublas']:10.2f} {gbs:9.0f} {tflops:11.1f}"
            )
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
