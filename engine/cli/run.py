"""python -m engine run: an offline batch of requests from JSONL (the gate runner's arm)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from engine.cli.common import add_engine_flags, add_model_flags, engine_config, load, make_drafter
from engine.cli.trace import TraceWriter
from engine.errors import InputError
from engine.lanes.clock import VirtualClock
from engine.lanes.engine import Engine
from engine.lanes.metrics import COUNTER_KEYS, counters
from engine.lanes.replies import reply
from engine.lanes.request import Request, parse_request

# what --metrics writes: the engine's counters, then this run's own
RUN_METRICS_KEYS = (*COUNTER_KEYS, "wall_s", "drafted", "accepted", "errors", "config", "flags")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a JSONL batch of requests")
    add_model_flags(p)
    p.add_argument("--requests", required=True, help="input JSONL, one request a line")
    p.add_argument("--out", required=True, help="output JSONL, one reply a line")
    p.add_argument("--serial", action="store_true", help="every request alone, in order")
    p.add_argument("--metrics", default=None, help="write metrics JSON here")
    p.add_argument(
        "--virtual-clock",
        action="store_true",
        help="deterministic time: arrivals and a fixed cost per action (docs/contract.md)",
    )
    p.add_argument("--trace", default=None, help="write one JSONL row per engine action here")
    add_engine_flags(p)
    p.set_defaults(func=run)


def read_requests(path: str, tokenizer: Any) -> list[Request]:
    src = Path(path)
    if not src.is_file():
        raise InputError(f"{path}: not found")
    try:
        text = src.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        line = src.read_bytes()[: exc.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: not UTF-8 (byte {exc.object[exc.start]:#04x})") from None
    requests, seen = [], set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc.msg})") from None
        req = parse_request(obj, where, tokenizer)
        if req.id in seen:
            raise InputError(f"{where}: duplicate id '{req.id}'")
        seen.add(req.id)
        requests.append(req)
    if not requests:
        raise InputError(f"{path}: no requests")
    return requests


def writable(path: str | None, flag: str) -> None:
    """Refuse an output path whose folder does not exist before any work is done."""
    if path is None:
        return
    folder = Path(path).parent
    if not folder.is_dir():
        raise InputError(f"{flag} {path}: the folder {folder} does not exist")
    if Path(path).is_dir():
        raise InputError(f"{flag} {path}: is a folder")


def run(args: argparse.Namespace) -> int:
    for path, flag in ((args.out, "--out"), (args.metrics, "--metrics"), (args.trace, "--trace")):
        writable(path, flag)
    model, tokenizer = load(args)
    requests = read_requests(args.requests, tokenizer)
    cfg = engine_config(args)
    order = list(requests)  # replies go out in the order of the requests file
    if cfg.serial:  # alone and in order: arrival times do not apply
        requests = sorted(requests, key=lambda r: r.arrival)
        for r in requests:
            r.arrival = 0.0
    clock = VirtualClock() if args.virtual_clock else None
    engine = Engine(model, cfg, clock=clock, drafter=make_drafter(cfg, model))
    t0 = time.perf_counter()
    total = len(requests)
    streams = {r.id: engine.submit(r) for r in requests}
    with ExitStack() as stack:
        if args.trace:
            trace = stack.enter_context(open(args.trace, "w"))
            engine.on_event = TraceWriter(trace, list(streams.values()))
        last_report = t0
        while engine.step():
            if sys.stderr.isatty() and time.perf_counter() - last_report > 0.5:
                last_report = time.perf_counter()
                print(f"\r{len(engine.finished)}/{total} done", end="", file=sys.stderr)
    wall = time.perf_counter() - t0
    with open(args.out, "w") as f:
        for r in order:
            f.write(json.dumps(reply(streams[r.id], tokenizer)) + "\n")
    if args.metrics:
        metrics = {
            **counters(engine),
            "wall_s": round(wall, 4),
            "drafted": sum(s.drafted for s in streams.values()),
            "accepted": sum(s.accepted for s in streams.values()),
            "errors": sum(1 for s in streams.values() if s.finish_reason == "error"),
            "config": {k: v for k, v in vars(cfg).items() if k != "flags"},
            "flags": cfg.flags,
        }
        Path(args.metrics).write_text(json.dumps(metrics, indent=1) + "\n")
    return 0
