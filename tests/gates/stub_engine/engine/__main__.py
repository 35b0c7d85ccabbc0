"""python -m engine capabilities --json | run ... (the stub)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time
import traceback
from pathlib import Path

from engine import knobs

KV = ["bf16", "fp8", "f32"]
FLAGS = [
    "--parallel",
    "--context",
    "--kv",
    "--kv-pages",
    "--page-rows",
    "--step-rows",
    "--share",
    "--serial",
    "--metrics",
    "--backend",
    "--drafter",
    "--drafter-model",
    "--draft-tokens",
    "--seed",
]


def capabilities() -> int:
    if knobs.FAIL_CAPABILITIES:
        try:
            raise RuntimeError("capabilities: broken")
        except RuntimeError:
            traceback.print_exc()  # a multi-line reason for the receipt
        return 3
    print(
        json.dumps(
            {
                "contract": knobs.CONTRACT,
                "backends": ["numpy", "fake", "cupy"],
                "kv": [k for k in KV if k not in knobs.NO_KV],
                "drafters": ["none", "oracle", "noisy"],
                "paging": True,
                "serial": True,
                "kinds": ["complete"],
                "flags": FLAGS,
                "env_flags": ["ENGINE_SALT"],
                "backend_info": {"cupy": knobs.CUPY_INFO} if knobs.CUPY_INFO else {},
                **({"architectures": knobs.ARCHITECTURES} if knobs.ARCHITECTURES else {}),
            }
        )
    )
    return 0


def h(*parts: object) -> int:
    return int(hashlib.sha256(repr(parts).encode()).hexdigest()[:12], 16)


def tokenize(req: dict, vocab: int) -> list[int]:
    if "prompt_ids" in req:
        return list(req["prompt_ids"])
    if "messages" in req:
        text = "".join(f"<{m['role']}>{m['content']}" for m in req["messages"]) + "<assistant>"
    else:
        text = req["prompt"]
    return [b % vocab for b in text.encode()]


def run(a: argparse.Namespace) -> int:
    import importlib
    import os

    if knobs.REQUIRE_MODULE:  # crashes where the commit's dependencies are not installed
        importlib.import_module(knobs.REQUIRE_MODULE)
    cfg = json.loads((Path(a.model) / "config.json").read_text())
    vocab = int(cfg.get("vocab_size", 1000))
    if a.drafter in ("oracle", "noisy") and not (
        a.drafter_model and Path(a.drafter_model).exists()
    ):
        print(f"error: --drafter {a.drafter}: needs --drafter-model REPLIES.jsonl", file=sys.stderr)
        return 2
    if a.parallel > knobs.MAX_PARALLEL:
        print(
            f"error: --parallel: at most {knobs.MAX_PARALLEL} lanes, got {a.parallel}",
            file=sys.stderr,
        )
        return 2
    if knobs.REFUSE_KV and a.kv == knobs.REFUSE_KV:
        print(f"error: --kv {a.kv}: not with this model", file=sys.stderr)
        return 2
    if knobs.CRASH_KV and a.kv == knobs.CRASH_KV:
        print("Traceback: stub crash on kv " + a.kv, file=sys.stderr)
        return 3
    if knobs.RAISE_KV and a.kv == knobs.RAISE_KV:
        raise RuntimeError(f"stub raise on kv {a.kv}; a fence in the message:\n```\nstill stderr")
    if knobs.HANG_KV and a.kv == knobs.HANG_KV:
        if knobs.HANG_FILE:  # a mark beside the flag: a test waits for it, not for a clock
            Path(f"{knobs.HANG_FILE}.hanging.{os.getpid()}").write_text("")
        while not knobs.HANG_FILE or Path(knobs.HANG_FILE).exists():
            time.sleep(0.05)
    reqs = []
    for n, line in enumerate(Path(a.requests).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            reqs.append(json.loads(line))
        except json.JSONDecodeError:
            print(f"{a.requests}:{n}: not JSON", file=sys.stderr)
            return 2
    salt = knobs.OUTPUT_SALT + os.environ.get("ENGINE_SALT", "")
    concurrent = a.parallel > 1 and not a.serial and len(reqs) > 1
    seen_prompts: list[list[int]] = []
    out = []
    for i, req in enumerate(reqs):
        prompt = tokenize(req, vocab)
        cached = a.kv_pages > 0 and any(
            len(p) >= 16 and prompt[: len(p)] == p for p in seen_prompts
        )
        seen_prompts.append(prompt)
        hist = list(prompt)
        ids, margins = [], []
        for pos in range(int(req.get("max_tokens", 16))):
            t = h(salt, hist) % vocab
            if knobs.BATCH_BUG and concurrent and i % 2 == 1 and pos == 3:
                t = (t + 1) % vocab
            if knobs.MOE_BUG and cfg.get("num_experts") and concurrent and i % 2 == 0 and pos == 4:
                t = (t + 5) % vocab
            if knobs.DRAFT_BUG and a.drafter != "none" and pos == 2:
                t = (t + 7) % vocab
            if knobs.RESUME_BUG and cached and pos == 1:
                t = (t + 3) % vocab
            ids.append(t)
            margins.append((h("m", hist) % 1000) / 100)
            hist.append(t)
        out.append(
            {
                "id": req["id"],
                "ids": ids,
                "text": " ".join(f"t{t}" for t in ids),
                "token_sha": hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:12],
                "finish_reason": "length",
                "prompt_tokens": len(prompt),
                "margins": margins,
                "min_margin": min(margins) if margins else None,
                "drafted": 0,
                "accepted": 0,
            }
        )
    Path(a.out).write_text("".join(json.dumps(r) + "\n" for r in out))
    if a.metrics:
        Path(a.metrics).write_text(
            json.dumps(
                {
                    "pages_in_use": knobs.LEAK_PAGES if a.kv_pages > 0 else 0,
                    "unplanned_allocations": 0,
                    "cached_pages": 0,
                    "wall_s": 0.01,
                    "prefill_tokens": 0,
                    "decode_tokens": sum(len(r["ids"]) for r in out),
                    "rounds": 0,
                    "steps": 0,
                    "drafted": 0,
                    "accepted": 0,
                    "device": os.environ.get("CUDA_VISIBLE_DEVICES"),
                    "threads": os.environ.get("OMP_NUM_THREADS"),
                }
            )
        )
    return 0


def _bench_run(n: int, cost: float) -> dict:
    """One timed run as bench schema 2 prints it: 2 prompt steps, 3 rounds per stream set."""
    kinds = ["short", "short", "round", "round", "round"]
    jitter = float(os.environ.get("STUB_PREFILL_JITTER", "0"))  # prompt steps only
    steps = [64 * 1e-4 * cost * (1 + jitter * (2 * random.random() - 1)) for _ in range(2)]
    acts = {"kind": kinds, "cpu_s": steps + [n * cost * 1e-3] * 3}
    acts.update(wall_s=acts["cpu_s"], rows=[64, 64, n, n, n], tokens=[0, n, n, n, n])
    row = {"parallel": n, "decode_tok_s": 1000.0 / cost, "prefill_tok_s": 1e4 / cost}
    row.update(ttft_ms=5.0 * cost, cpu_s_per_token=0.01 * cost)
    row.update(decode_cpu_s_per_token=1e-3 * cost, prefill_cpu_s_per_token=1e-4 * cost)
    return {**row, "actions": acts}


def bench(a: argparse.Namespace) -> int:
    """bench --json (schema 1 sweep) or --lockstep (schema 2); STUB_BENCH_COST scales costs."""
    cost = float(os.environ.get("STUB_BENCH_COST", "1"))
    cost *= 1 + float(os.environ.get("ENGINE_CALIBRATE_SLOWDOWN", "0"))
    if getattr(a, "lockstep", False):
        print(json.dumps({"bench_schema": 2, "ready": True, "machine": {}}), flush=True)
        turns = 0
        for line in sys.stdin:
            ask = json.loads(line)
            run = _bench_run(ask["parallel"], cost)
            if "turn" in ask:  # a run of 5 actions: not over before the turn that ends it
                turns += ask["turn"]
                if turns < 5:
                    print(json.dumps({"parallel": ask["parallel"], "done": False}), flush=True)
                    continue
                turns, run = 0, {**run, "done": True}
            print(json.dumps(run), flush=True)
        return 0
    sweep = [{k: v for k, v in _bench_run(n, cost).items() if k != "actions"} for n in (1, 2)]
    out = {"sweep": sweep} if os.environ.get("STUB_OLD_BENCH") else {"bench_schema": 1}
    print(json.dumps({**out, "sweep": sweep, "machine": {}, "process": {}}))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m engine")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capabilities")
    c.add_argument("--json", action="store_true")
    r = sub.add_parser("run")
    r.add_argument("--model", required=True)
    r.add_argument("--requests", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--metrics")
    r.add_argument("--backend", default="numpy")
    r.add_argument("--kv", default="bf16")
    r.add_argument("--parallel", type=int, default=1)
    r.add_argument("--kv-pages", type=int, default=0)
    r.add_argument("--drafter", default="none")
    r.add_argument("--draft-tokens", type=int, default=4)
    r.add_argument("--drafter-model")
    r.add_argument("--context", type=int, default=1024)
    r.add_argument("--page-rows", type=int, default=16)
    r.add_argument("--step-rows", type=int, default=64)
    r.add_argument("--share", type=float, default=1.0)
    r.add_argument("--serial", action="store_true")
    b = sub.add_parser("bench")
    b.add_argument("--json", action="store_true")
    if not os.environ.get("STUB_OLD_BENCH"):  # bench schema 1 had no --lockstep
        b.add_argument("--lockstep", action="store_true")
    for flag in ("--model", "--backend", "--parallel", "--prompt-tokens", "--gen-tokens"):
        b.add_argument(flag)
    b.add_argument("--repeats")
    a = p.parse_args()
    if a.cmd == "capabilities":
        return capabilities()
    if a.cmd == "bench":
        return bench(a)
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
