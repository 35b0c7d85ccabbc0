"""python -m engine serve: the engine behind an OpenAI-compatible HTTP API."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.cli.common import add_engine_flags, add_model_flags, engine_config, load, make_drafter
from engine.errors import InputError
from engine.lanes.engine import Engine
from engine.serve.httpd import Server
from engine.serve.worker import EngineWorker


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve an OpenAI-compatible HTTP API")
    add_model_flags(p)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--verbose", action="store_true", help="log every HTTP request")
    add_engine_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    model, tokenizer = load(args)
    cfg = engine_config(args)
    worker = EngineWorker(Engine(model, cfg, drafter=make_drafter(cfg, model)))
    worker.start()
    try:
        server = Server(
            (args.host, args.port), worker, tokenizer, Path(args.model).name, verbose=args.verbose
        )
    except OSError as exc:
        worker.stop()
        raise InputError(f"--host {args.host} --port {args.port}: {exc.strerror or exc}") from None
    host, port = server.server_address[:2]
    print(
        f"serving {args.model} on http://{host}:{port}/v1 (parallel {cfg.parallel})",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        worker.stop()
    return 0
