"""CPU milliseconds per decoded token, counting only the engine's decoding rounds (drafting,
verification and absorbing included; prompt steps excluded), on the virtual clock so the
schedule is the same for every tree compared. A script, not part of the engine package.

    OPENBLAS_NUM_THREADS=1 python bench/decode_cpu.py MODEL STREAMS PROMPT NEW [DRAFTER]

Run it in two worktrees, interleaved and repeated, to compare commits (CPU time is steadier
than wall time on a shared machine, not immune to it).
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from engine.config import EngineConfig
from engine.draft import registry
from engine.lanes.clock import VirtualClock
from engine.lanes.engine import Engine
from engine.lanes.request import Request
from engine.model.loader import load_model


def main(argv: list[str]) -> int:
    if len(argv) not in (4, 5):
        usage = "usage: python bench/decode_cpu.py MODEL STREAMS PROMPT NEW [DRAFTER]"
        print(usage, file=sys.stderr)
        return 2
    model_dir, streams, prompt, new = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    drafter = argv[4] if len(argv) == 5 else "none"
    model = load_model(model_dir, "numpy")
    cfg = EngineConfig(parallel=streams, context=prompt + new + 16, drafter=drafter)
    engine = Engine(
        model,
        cfg,
        clock=VirtualClock(),
        drafter=registry.make(cfg, model) if drafter != "none" else None,
    )
    rng = np.random.default_rng(0)
    for i in range(streams):
        ids = [int(x) for x in rng.integers(0, 1000, prompt)]
        drafted = drafter != "none"
        engine.submit(Request(f"r{i}", ids, max_tokens=new, ignore_eos=True, draft=drafted))
    marks: list[tuple[str, float]] = []
    engine.on_event = lambda eng, ev: marks.append((ev.kind, time.process_time()))
    cpu, prev = 0.0, time.process_time()
    engine.run()
    for kind, t in marks:
        if kind == "round":
            cpu += t - prev
        prev = t
    tokens = sum(len(s.generated) for s in engine.finished) - streams  # first tokens: prefill
    rounds = sum(1 for kind, _ in marks if kind == "round")
    print(
        json.dumps(
            {
                "streams": streams,
                "prompt_tokens": prompt,
                "drafter": drafter,
                "rounds": rounds,
                "tokens": tokens,
                "round_cpu_s": round(cpu, 4),
                "cpu_ms_per_token": round(1e3 * cpu / max(tokens, 1), 4),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
