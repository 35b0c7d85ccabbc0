"""Served arms: `python -m engine serve` of the arm's commit, driven through the official
``openai`` client over loopback, so the server's request mapping, chat route, streaming and
cancel-on-disconnect are gated like ``engine run``.

A served arm starts the server of its commit's worktree with the arm's engine flags on a
free port (``--port 0``, contract 3), waits for ``/health``, sends the arm's request lines
as completions (``prompt``, ``prompt_ids``) or chat completions (``messages``), streamed or
plain, each at its ``arrival`` (a serial arm: one at a time, in arrival order), rebuilds a
``run``-shaped reply from what the server returns (token ids, margins, logit hashes), and
reads ``/metrics`` once the server is idle. ``cancel_after: N`` is a client that closes its
stream after N tokens. The engine's own request fields go in ``extra_body``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gates.jsontypes import JsonObject
from gates.plan.arm_config import ArmConfig
from gates.plan.request import PromptRequest
from gates.run.capabilities import Serve
from gates.run.contract import REPLY_KEYS, SERVE_CHOICE_KEYS, engine_args
from gates.run.execute import ArmJob, tail
from gates.run.procs import forget, kill, spawn
from gates.run.reply import Reply
from gates.run.results import ArmRun, Metrics, Status, metrics_of

CLIENT_VERSION = 2  # in a served arm's store key: bump when the client's mapping changes
EXTRA_BODY = ("stop_ids", "priority", "draft", "ignore_eos")  # engine fields, in extra_body
CLIENT_KEYS = ("id", "prompt", "prompt_ids", "messages", "max_tokens", "kind", "arrival")
CLIENT_KEYS += ("cancel_after", "temperature", "seed", *EXTRA_BODY)
URL = re.compile(r"http://([0-9A-Za-z.\-\[\]:]+):(\d+)/v1")
IDLE_WAIT_S = 10.0  # how long a server may take to free what cancelled clients held
POLL_S = 0.05
SERVED_KEYS = ("served", "usage", "stream_problems")  # what the client read (checks/client)


class ServedError(Exception):
    """The server broke the contract or went away: the arm crashed, with this reason."""


def unservable(line: PromptRequest, serve: Serve | None) -> str | None:
    """Why a request line cannot be sent through the served API (None: it can)."""
    if line.kind != "complete":
        return f"the served API has no {line.kind} kind"
    other = sorted(set(line.keys) - set(CLIENT_KEYS))
    if other:
        return f"a client cannot send {other[0]} (the server has no such field)"
    known = set(serve.request_keys or ()) if serve is not None else set()
    for k in ("temperature", "seed", *EXTRA_BODY):
        if k in line.keys and k not in known:
            return f"the server reads no {k}"
    return None


def read(url: str, timeout: float = 10) -> JsonObject:
    """A server's JSON answer to a GET."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def _start(
    job: ArmJob, err_path: Path, live: set[subprocess.Popen] | None, device: str | None
) -> tuple[subprocess.Popen, str, str]:
    argv = [job.python, "-m", "engine", "serve", "--model", str(job.model)]
    argv += ["--host", "127.0.0.1", "--port", "0"]
    argv += [a for a in engine_args(job.config) if a != "--serial"] + job.extra_args
    env = dict(job.env)
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = device
    with open(err_path, "w") as ef:
        proc = spawn(
            argv,
            cwd=job.worktree,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=ef,
        )
    if live is not None:
        live.add(proc)
    shown = " ".join(a if " " not in a else repr(a) for a in ["python", *argv[1:]])
    deadline = time.monotonic() + job.timeout
    while time.monotonic() < deadline:
        found = URL.search(err_path.read_text(errors="replace"))
        if found:
            base = f"http://127.0.0.1:{found.group(2)}"
            while time.monotonic() < deadline and proc.poll() is None:
                with contextlib.suppress(OSError, ValueError):
                    if read(base + "/health", 2).get("status") == "ok":
                        return proc, base, shown
                time.sleep(POLL_S)
        if proc.poll() is not None:
            return proc, "", shown
        time.sleep(POLL_S)
    return proc, "", shown


def parse(rid: str, d: JsonObject, chat: bool) -> Reply:
    """A server's answer (one completion, or a stream's chunks joined) -> a reply shaped
    like `engine run`'s, with what the client read beside it."""
    ch = d["choices"][0]
    lack = [k for k in SERVE_CHOICE_KEYS if not isinstance(ch.get(k), list)]
    if lack:
        raise ServedError(f"request {rid}: the server's reply has no {', '.join(lack)}")
    text = (ch.get("message") or {}).get("content") if chat else ch.get("text")
    margins = ch["margins"]
    usage = d.get("usage")
    reply = {
        "id": rid,
        "ids": ch["token_ids"],
        "text": text or "",
        "token_sha": d.get("token_sha"),
        "finish_reason": ch.get("finish_reason"),
        "prompt_tokens": (usage or {}).get("prompt_tokens"),
        "margins": margins,
        "min_margin": min(margins) if margins else None,
        "logit_hashes": ch["logit_hashes"],
        "drafted": d.get("drafted"),
        "accepted": d.get("accepted"),
        "served": "plain",
        "usage": usage if isinstance(usage, dict) else None,
    }
    return Reply.from_json({k: v for k, v in reply.items() if k in (*REPLY_KEYS, *SERVED_KEYS)})


def _chunk_problem(d: JsonObject, first_id: Any, n: int, ended: bool) -> str | None:
    """What is out of order or shape in chunk ``n`` of a stream (None: nothing)."""
    ch = (d.get("choices") or [{}])[0]
    if d.get("id") != first_id:
        return f"chunk {n} has id {d.get('id')!r}, chunk 0 {first_id!r}"
    if ended:
        return f"chunk {n} came after the chunk with the finish_reason"
    if ch.get("index", 0) != 0:
        return f"chunk {n} is for choice {ch.get('index')}"
    sizes = {k: len(ch[k]) for k in SERVE_CHOICE_KEYS}
    if len(set(sizes.values())) > 1:
        return f"chunk {n}: token_ids, margins and logit_hashes of other lengths {sizes}"
    if ch.get("finish_reason") and sizes["token_ids"]:
        return f"chunk {n}: the last chunk carries tokens"
    return None


def _streamed(rid: str, events: Any, chat: bool, cancel: int | None) -> Reply:
    """Join a stream's chunks into one reply; close it after ``cancel`` tokens (a client
    that disconnects mid-stream: the server must cancel the request and free its lane)."""
    got: dict[str, list[Any]] = {k: [] for k in SERVE_CHOICE_KEYS}
    text, last, finish, problems, first_id = "", {}, None, [], None
    try:
        for n, ev in enumerate(events if cancel != 0 else ()):
            d = ev.model_dump()
            ch = d["choices"][0]
            for k in SERVE_CHOICE_KEYS:
                if not isinstance(ch.get(k), list):
                    raise ServedError(f"request {rid}: a streamed chunk has no {k}")
            if n == 0:
                first_id = d.get("id")
            problems += filter(None, [_chunk_problem(d, first_id, n, finish is not None)])
            for k in SERVE_CHOICE_KEYS:
                got[k] += ch[k]
            text += ((ch.get("delta") or {}).get("content") if chat else ch.get("text")) or ""
            if ch.get("finish_reason"):
                last, finish = d, ch["finish_reason"]
            if cancel is not None and len(got["token_ids"]) >= cancel:
                break
    finally:
        events.close()
    cut = cancel is not None and finish is None  # the client hung up: its text is partial
    if cut:
        got = {k: v[:cancel] for k, v in got.items()}
        finish = "cancelled"
    elif finish is None:
        raise ServedError(f"request {rid}: the stream ended without a finish_reason")
    d = {**last, "choices": [{**got, "text": text, "finish_reason": finish}]}
    reply = parse(rid, d, False)
    return dataclasses.replace(
        reply,
        served="stream",
        stream_problems=tuple(problems),
        text=None if cut else reply.text,
    )


def send(client: Any, model: str, line: PromptRequest, stream: bool) -> Reply:
    """One request line through the openai client -> a reply shaped like `engine run`'s.
    What the client sends is the line's JSON: its fields go out as they are."""
    import openai

    rid, chat, cancel = line.id, line.is_chat, line.cancel_after
    body = line.to_json()
    kw = {"model": model, **{k: body[k] for k in ("temperature", "seed") if k in body}}
    extra = {k: body[k] for k in EXTRA_BODY if k in body}
    if extra:
        kw["extra_body"] = extra
    if chat:
        call = client.chat.completions.create
        kw.update(messages=body["messages"], max_completion_tokens=line.max_tokens)
    else:
        call = client.completions.create
        kw.update(prompt=body[line.prompt_key], max_tokens=line.max_tokens)
    try:
        if stream or cancel is not None:
            return _streamed(rid, call(stream=True, **kw), chat, cancel)
        return parse(rid, call(**kw).model_dump(), chat)
    except openai.BadRequestError as exc:
        return Reply(rid, finish_reason="error", error=str(exc.message))


def drive(
    base: str, model: str, lines: list[PromptRequest], cfg: ArmConfig, timeout: float
) -> list[Reply]:
    """Every line through the API: all at once (each at its arrival), or one at a time."""
    import openai

    client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=timeout)
    stream = cfg.served == "stream"
    try:
        if cfg.serial:
            order = sorted(lines, key=lambda r: r.arrival)
            got = {r.id: send(client, model, r, stream) for r in order}
        else:
            t0 = time.monotonic()

            def one(r: PromptRequest) -> Reply:
                time.sleep(max(0.0, t0 + r.arrival - time.monotonic()))
                return send(client, model, r, stream)

            with ThreadPoolExecutor(max_workers=max(1, len(lines))) as pool:
                got = {r.id: x for r, x in zip(lines, pool.map(one, lines), strict=True)}
    finally:
        client.close()
    return [got[r.id] for r in lines]


def idle_metrics(base: str) -> Metrics:
    """/metrics once no stream is live or waiting (or after IDLE_WAIT_S: then as it is)."""
    deadline = time.monotonic() + IDLE_WAIT_S
    while True:
        m = metrics_of(read(base + "/metrics")) or {}
        busy = m.get("live_streams") or m.get("waiting_streams")
        if not busy or time.monotonic() > deadline:
            return m
        time.sleep(POLL_S)


def _stop(proc: subprocess.Popen, live: set[subprocess.Popen] | None) -> None:
    try:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)  # the server's own clean stop
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                kill(proc)
                proc.wait()
    finally:
        forget(proc)
        if live is not None:
            live.discard(proc)


def run_served(
    job: ArmJob, live: set[subprocess.Popen] | None = None, device: str | None = None
) -> ArmRun:
    """Run one served arm; never raises for an engine failure (the result says "crashed")."""
    wd = job.workdir
    shutil.rmtree(wd, ignore_errors=True)
    wd.mkdir(parents=True)
    err = wd / "stderr.txt"
    lines = [
        PromptRequest.from_json(json.loads(ln))
        for ln in job.requests.decode().splitlines()
        if ln.strip()
    ]
    if importlib.util.find_spec("openai") is None:
        why = "the gate runner has no openai package (pip install 'openai>=1.40')"
        return ArmRun(Status.CRASHED, reason=why)
    t0 = time.monotonic()
    proc, base, shown = _start(job, err, live, device)
    run = ArmRun(Status.CRASHED, argv=shown, device=device)
    try:
        run = _talk(job, proc, base, lines, err, run)
    finally:
        _stop(proc, live)
    run = dataclasses.replace(
        run,
        wall_s=round(time.monotonic() - t0, 3),
        exit_code=run.exit_code if not base else proc.returncode,
        stderr_tail=tail(err.read_text(errors="replace")) if err.exists() else "",
    )
    if run.ok:
        shutil.rmtree(wd, ignore_errors=True)
    return run


def _talk(
    job: ArmJob,
    proc: subprocess.Popen,
    base: str,
    lines: list[PromptRequest],
    err: Path,
    crashed: ArmRun,
) -> ArmRun:
    """run_served's work once the server is started (or not): the arm's outcome, before
    its wall time, exit code and stderr are known."""
    if not base:
        code = proc.poll()
        run = dataclasses.replace(crashed, exit_code=code)
        if code == 2:
            last = [ln for ln in err.read_text(errors="replace").splitlines() if ln.strip()]
            why = "refused (exit 2)" + (f": {last[-1].strip()}" if last else "")
            return dataclasses.replace(run, status=Status.REFUSED, reason=why)
        if code is None:
            return dataclasses.replace(
                run, reason=f"the server did not answer /health in {job.timeout:.0f}s"
            )
        return dataclasses.replace(
            run, reason=f"the server exited {code} before it answered /health"
        )
    try:
        replies = drive(base, Path(job.model).name, lines, job.config, job.timeout)
        metrics = idle_metrics(base)
    except ServedError as exc:
        return dataclasses.replace(crashed, reason=str(exc))
    except Exception as exc:  # noqa: BLE001 - a dead or hung server is a crashed arm
        alive = proc.poll() is None
        why = f"the server {'failed' if alive else 'died'}: {exc!r}"[:300]
        return dataclasses.replace(crashed, reason=why)
    return dataclasses.replace(crashed, status=Status.OK, replies=replies, metrics=metrics)
