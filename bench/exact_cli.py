"""Exactness through the command line, as the gates compare it: `python -m engine run` with
one set of requests under several arms, every reply's ids, margins and logit hashes bit for
bit equal to the serial arm's.

    python bench/exact_cli.py --model synthetic:qwen3-0.6b --backend cupy --out /tmp/exact
    python bench/exact_cli.py ... --arms parallel1 parallel8 --kv bf16   (a subset)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ARMS = {
    "serial": ["--serial"],
    "parallel1": ["--parallel", "1"],
    "parallel2": ["--parallel", "2"],
    "parallel4": ["--parallel", "4"],
    "parallel8": ["--parallel", "8"],
    "paging8": ["--parallel", "8", "--kv-pages", "400"],
    "steps16": ["--parallel", "3", "--step-rows", "16"],
}
KEYS = ("ids", "margins", "logit_hashes", "finish_reason")


def requests(n: int, vocab: int) -> list[dict]:
    rng = np.random.default_rng(11)
    lengths = [1, 15, 16, 17, 63, 64, 65, 130, 200, 7][:n]
    return [
        {
            "id": f"r{i}",
            "prompt_ids": [int(x) for x in rng.integers(0, vocab, length)],
            "max_tokens": 12,
            "temperature": 0.8 if i % 2 else 0.0,
            "seed": 3 + i,
            "ignore_eos": True,
        }
        for i, length in enumerate(lengths)
    ]


def run_arm(args: argparse.Namespace, kv: str, arm: str, flags: list[str], req: Path) -> dict:
    out = Path(args.out) / f"{kv}-{arm}.jsonl"
    cmd = [sys.executable, "-m", "engine", "run", "--model", args.model, "--backend", args.backend]
    cmd += ["--requests", str(req), "--out", str(out), "--kv", kv, "--context", "400", *flags]
    subprocess.run(cmd, check=True)
    return {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--backend", default="cupy")
    p.add_argument("--out", required=True)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--arms", nargs="+", choices=[a for a in ARMS if a != "serial"])
    p.add_argument("--kv", nargs="+", choices=["bf16", "fp8"], default=["bf16", "fp8"])
    args = p.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    req = Path(args.out) / "requests.jsonl"
    req.write_text("".join(json.dumps(r) + "\n" for r in requests(10, args.vocab)))
    bad = 0
    arms = args.arms or [a for a in ARMS if a != "serial"]
    for kv in args.kv:
        ref = run_arm(args, kv, "serial", ARMS["serial"], req)
        for arm in arms:
            flags = ARMS[arm]
            got = run_arm(args, kv, arm, flags, req)
            diff = [i for i in ref if any(ref[i][k] != got[i][k] for k in KEYS)]
            bad += len(diff)
            print(f"{kv:5} {arm:10} == serial: {'yes' if not diff else 'NO ' + str(diff)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
