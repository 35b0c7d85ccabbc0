"""python -m engine serve: the engine behind an OpenAI-compatible HTTP API."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from engine.cli.common import add_engine_flags, add_model_flags, engine_config, load, make_drafter
from engine.errors import InputError
from engine.lanes.engine import Engine


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve an OpenAI-compatible HTTP API")
    add_model_flags(p)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=_port, default=8000, help="0..65535; 0 picks a free one")
    p.add_argument("--verbose", action="store_true", help="log every HTTP request")
    p.add_argument(
        "--header-timeout",
        type=_seconds,
        default=30.0,
        help="seconds a connection may take to send a request's headers (default 30)",
    )
    p.add_argument(
        "--body-timeout",
        type=_seconds,
        default=30.0,
        help="seconds a client may take to send a request's body (default 30)",
    )
    add_engine_flags(p)
    p.set_defaults(func=run)


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port 0..65535, got {text!r}")
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"expected seconds in (0, 3600], got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    from engine.serve.app import Settings  # aiohttp only where a server runs
    from engine.serve.runner import HttpServer
    from engine.serve.worker import EngineWorker

    model, tokenizer = load(args)
    cfg = engine_config(args)
    worker = EngineWorker(Engine(model, cfg, drafter=make_drafter(cfg, model)))
    settings = Settings(worker, tokenizer, Path(args.model).name, args.body_timeout)
    server = HttpServer(settings, args.host, args.port, args.header_timeout, args.verbose)

    def ready(srv: Any) -> None:
        print(
            f"serving {args.model} on http://{srv.host}:{srv.port}/v1 (parallel {cfg.parallel})",
            file=sys.stderr,
            flush=True,
        )

    worker.start()
    try:
        server.serve(ready)
    except OSError as exc:
        raise InputError(f"--host {args.host} --port {args.port}: {exc.strerror or exc}") from None
    finally:
        worker.stop()
    return 0
