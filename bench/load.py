"""Load test of `engine serve`: many concurrent streaming clients beside idle sockets.

    python bench/load.py [--clients 4096] [--tokens 32] [--idle 256] [--parallel 64]

Starts `python -m engine serve` on the model, opens ``--idle`` sockets that send half a
request's headers and never finish them, then starts ``--clients`` streaming completions
at once (``--tokens`` each, ``ignore_eos``; ``--unique`` distinct requests, client i sends
request i % unique). Every stream must complete with no error, its token ids equal to the
same request run alone (`engine run --serial`), and every idle socket must still be open
at the end (the server held them; --header-timeout is set past the run). Prints time to
first token (p50/p99), tokens/s and the counts; exit 0 only when all of that holds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
URL = re.compile(r"http://[^\s/]+:(\d+)/v1")


def request_lines(unique: int, tokens: int) -> list[dict[str, Any]]:
    """Distinct prompts of 1..24 ids, every third one sampled (temperature 0.8, a seed)."""
    lines = []
    for i in range(unique):
        ids = [3 + (i * 37 + k * 11) % 900 for k in range(1 + i % 24)]
        line = {"id": f"r{i}", "prompt_ids": ids, "max_tokens": tokens, "ignore_eos": True}
        if i % 3 == 0:
            line.update(temperature=0.8, seed=i)
        lines.append(line)
    return lines


def solo_ids(model: str, lines: list[dict[str, Any]], work: Path) -> dict[str, list[int]]:
    (work / "in.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    argv = [sys.executable, "-m", "engine", "run", "--model", model, "--serial"]
    argv += ["--requests", str(work / "in.jsonl"), "--out", str(work / "solo.jsonl")]
    subprocess.run(argv, cwd=ROOT, check=True)
    replies = [json.loads(x) for x in (work / "solo.jsonl").read_text().splitlines()]
    return {r["id"]: r["ids"] for r in replies}


def start_server(args: argparse.Namespace, err: Path) -> tuple[subprocess.Popen, int]:
    argv = [sys.executable, "-m", "engine", "serve", "--model", args.model, "--port", "0"]
    argv += ["--parallel", str(args.parallel), "--context", str(args.context)]
    argv += ["--header-timeout", "3600"]
    proc = subprocess.Popen(argv, cwd=ROOT, stderr=err.open("w"), stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        found = URL.search(err.read_text())
        if found:
            return proc, int(found.group(1))
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"the server did not start: {err.read_text()[-2000:]}")


async def idle_socket(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: load\r\nContent-Type: appl")
    await writer.drain()
    return reader, writer


async def one_client(
    session: aiohttp.ClientSession, url: str, line: dict[str, Any]
) -> dict[str, Any]:
    body = {k: line[k] for k in line if k not in ("id", "prompt_ids")}
    body.update(prompt=line["prompt_ids"], stream=True)
    t0, first, ids, finish = time.monotonic(), None, [], None
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                return {"error": f"HTTP {resp.status}: {(await resp.text())[:200]}"}
            async for raw in resp.content:
                if not raw.startswith(b"data: {"):
                    continue
                choice = json.loads(raw[6:])["choices"][0]
                if choice["token_ids"] and first is None:
                    first = time.monotonic() - t0
                ids += choice["token_ids"]
                finish = choice["finish_reason"] or finish
    except (TimeoutError, aiohttp.ClientError) as exc:
        return {"error": repr(exc)[:200]}
    if finish is None:
        return {"error": "the stream ended without a finish_reason"}
    return {"ids": ids, "ttft": first, "done": time.monotonic()}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


async def drive(args: argparse.Namespace, port: int, lines: list[dict[str, Any]]) -> dict:
    idle = [await idle_socket(port) for _ in range(args.idle)]
    url = f"http://127.0.0.1:{port}/v1/completions"
    conn = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        t0 = time.monotonic()
        jobs = [one_client(session, url, lines[i % len(lines)]) for i in range(args.clients)]
        got = await asyncio.gather(*jobs)
        wall = time.monotonic() - t0
    held = 0
    for reader, writer in idle:
        held += not reader.at_eof() and not writer.is_closing()
        writer.close()
    return {"results": got, "wall_s": wall, "idle_held": held}


def summary(args: argparse.Namespace, run: dict, solo: dict[str, list[int]], lines: list) -> dict:
    got = run["results"]
    errors = [r["error"] for r in got if "error" in r]
    wrong = [
        i for i, r in enumerate(got) if "ids" in r and r["ids"] != solo[lines[i % len(lines)]["id"]]
    ]
    ttft = [r["ttft"] for r in got if r.get("ttft") is not None]
    tokens = sum(len(r.get("ids", [])) for r in got)
    return {
        "clients": args.clients,
        "tokens_each": args.tokens,
        "idle_sockets": args.idle,
        "idle_held": run["idle_held"],
        "parallel": args.parallel,
        "errors": len(errors),
        "first_errors": errors[:3],
        "not_equal_to_solo": len(wrong),
        "ttft_p50_s": round(pct(ttft, 0.50), 3),
        "ttft_p99_s": round(pct(ttft, 0.99), 3),
        "tokens": tokens,
        "tokens_per_s": round(tokens / run["wall_s"], 1),
        "wall_s": round(run["wall_s"], 2),
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(ROOT / "fixtures" / "models" / "tiny-qwen3"))
    p.add_argument("--clients", type=int, default=4096)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--idle", type=int, default=256)
    p.add_argument("--parallel", type=int, default=64)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--unique", type=int, default=64)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--json", type=Path, help="write the summary here too")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # server and clients: many fds
    lines = request_lines(args.unique, args.tokens)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        solo = solo_ids(args.model, lines, work)
        proc, port = start_server(args, work / "serve.err")
        try:
            run = asyncio.run(drive(args, port, lines))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    out = summary(args, run, solo, lines)
    out["command"] = "python bench/load.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    ok = not out["errors"] and not out["not_equal_to_solo"] and out["idle_held"] == args.idle
    return 0 if ok and out["tokens"] == args.clients * args.tokens else 1


if __name__ == "__main__":
    sys.exit(main())
