"""python -m engine capabilities: what this commit's engine supports."""

from __future__ import annotations

import argparse
import json

from engine.config import DRAFTERS, MAX_DRAFT_TOKENS, MAX_PARALLEL, flag_name, knobs
from engine.kv.codec import KV_DTYPES

# 2: logit_hashes, cancel_after_rows, --virtual-clock, --trace
# 3: "serve": what `engine serve` reads and returns (margins and logit_hashes per token)
# 4: "backend_info": per backend, the device and library versions behind it (provenance)
# 5: "architectures": the config.json architectures --model loads (Qwen3-MoE from here on)
# 6: serve reads `stop` strings; refuses unknown fields (400), unknown models (404);
#    "limits": the largest --parallel and --draft-tokens
# 7: logit_hashes are the order-free 64-bit sum hash (a GPU computes it in place), not blake2b
CONTRACT_VERSION = 7


def serve_capabilities() -> dict:
    from engine.serve import openai, worker

    return {
        "endpoints": [
            "/v1/completions",
            "/v1/chat/completions",
            "/v1/models",
            "/metrics",
            "/health",
        ],
        "request_keys": list(openai.REQUEST_KEYS),
        "choice_keys": list(openai.CHOICE_KEYS),
        "reply_keys": list(openai.REPLY_KEYS),
        "metrics_keys": list(worker.SERVE_METRICS_KEYS),
        "port_zero": True,
    }


def capabilities() -> dict:
    from engine.cli.run import RUN_METRICS_KEYS
    from engine.draft.registry import available
    from engine.lanes.replies import REPLY_KEYS
    from engine.lanes.request import REQUEST_KEYS
    from engine.model.config import SUPPORTED_ARCHITECTURES
    from engine.ops import available_backends, backend_info

    return {
        "contract": CONTRACT_VERSION,
        "backends": available_backends() + ["fake"],
        "kv": list(KV_DTYPES),
        "drafters": [d for d in DRAFTERS if d == "none" or d in available()],
        "paging": True,
        "serial": True,
        "kinds": ["complete", "embed"],
        "flags": [
            *(flag_name(f.name) for f in knobs()),
            *("--serial", "--metrics", "--backend", "--virtual-clock", "--trace"),
        ],
        "request_keys": list(REQUEST_KEYS),
        "reply_keys": list(REPLY_KEYS),
        "metrics_keys": list(RUN_METRICS_KEYS),
        "env_flags": ["ENGINE_CALIBRATE_SLOWDOWN"],
        "serve": serve_capabilities(),
        "backend_info": backend_info(),
        "architectures": list(SUPPORTED_ARCHITECTURES),
        "limits": {"parallel": MAX_PARALLEL, "draft_tokens": MAX_DRAFT_TOKENS},
    }


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("capabilities", help="print what this engine supports")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    caps = capabilities()
    if args.json:
        print(json.dumps(caps))
    else:
        for key, value in caps.items():
            print(f"{key}: {value}")
    return 0
