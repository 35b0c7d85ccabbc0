"""python -m engine generate: one prompt, greedy by default."""

from __future__ import annotations

import argparse
import json
import math
import sys

from engine.cli.common import (
    add_engine_flags,
    add_model_flags,
    engine_config,
    load,
    make_drafter,
    parse_ids,
)
from engine.errors import InputError
from engine.lanes.engine import Engine
from engine.lanes.replies import reply
from engine.lanes.request import Request


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="generate from one prompt")
    add_model_flags(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompt-ids", help="comma-separated prompt token ids")
    p.add_argument("--chat", action="store_true", help="wrap --prompt in the chat template")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_engine_flags(p, parallel=False)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.max_tokens < 1:
        raise InputError("--max-tokens: must be >= 1")
    model, tokenizer = load(args)
    if args.prompt_ids is not None:
        ids = parse_ids(args.prompt_ids, "--prompt-ids")
    else:
        if tokenizer is None:
            raise InputError(f"{args.model}: no tokenizer.json, use --prompt-ids")
        text = args.prompt
        if args.chat:
            text = tokenizer.apply_chat_template([{"role": "user", "content": text}])
        ids = tokenizer.encode(text)
        if not ids:
            raise InputError("--prompt: encodes to no tokens")
    limit = model.config.max_position_embeddings
    if len(ids) + args.max_tokens > limit:
        raise InputError(
            f"--prompt: {len(ids)} prompt tokens + --max-tokens {args.max_tokens} exceed "
            f"max_position_embeddings {limit} of {args.model}/config.json"
        )
    if not 0 <= args.temperature < math.inf:
        raise InputError(f"--temperature: must be a finite number >= 0, got {args.temperature}")
    context = max(args.context, len(ids) + args.max_tokens)
    cfg = engine_config(args, context=context)
    engine = Engine(model, cfg, drafter=make_drafter(cfg, model))
    engine.submit(
        Request(
            id="0",
            prompt_ids=ids,
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            seed=args.seed,
        )
    )
    (stream,) = engine.run()
    out = reply(stream, tokenizer)
    if stream.finish_reason == "error":
        raise InputError(f"generate: {stream.error}")
    if cfg.drafter != "none":  # the demo's point: how many drafted tokens were kept
        share = f" ({100 * stream.accepted / stream.drafted:.0f} %)" if stream.drafted else ""
        print(
            f"drafter {cfg.drafter}: {stream.accepted} of {stream.drafted} drafted tokens "
            f"accepted{share}, {len(stream.generated)} tokens in {stream.rounds} rounds",
            file=sys.stderr,
        )
    if args.json:
        out.pop("margins")
        print(json.dumps(out))
    else:
        print(out["text"])
    return 0
