"""The worker's side of a Ray arm: check the commit out from its bundle, unpack the fixtures,
run the arm as a local run would (``execute.run_arm`` or ``served.run_served``), and return
its ArmRun.

Everything is kept in the worker's own cache (``$GATES_CACHE/ray`` there, default
``~/.cache/exact-gates/ray``): one checkout per commit and one copy of each fixture per node,
each made once under a lock (several tasks of one node share them). The engine runs in its
own process group, as locally; a *watchdog* process (its own session, reading the engine's
process group ids on a pipe) kills those groups when the pipe closes without a ``done`` line,
which is what happens when the Ray worker dies by any means (``ray.cancel(force=True)``, a
runner gone, SIGKILL): no engine outlives the task that started it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gates
from gates.jsontypes import JsonObject
from gates.run import envs, refs, served, store
from gates.run.execute import ArmJob, base_env, capabilities, kill, run_arm
from gates.run.executors.ship import ArmPayload, Asset, Commit
from gates.run.results import ArmRun, Status

Get = Callable[[Any], bytes]  # ray.get

WATCHDOG = """
import os, signal, sys
groups = []
for line in sys.stdin:
    if line.strip() == "done":
        sys.exit(0)
    groups.append(int(line))
for g in groups:
    try:
        os.killpg(g, signal.SIGKILL)
    except OSError:
        pass
"""


@contextlib.contextmanager
def local_signals() -> Iterator[None]:
    """SIGINT unblocked in this thread while it starts engines, as in a local run.

    A Ray task's thread has SIGINT blocked, and a blocked signal stays blocked across fork
    and exec: an ``engine serve`` started from it never got the SIGINT of its clean stop,
    so each served arm waited 10 s for it and was then SIGKILLed (exit -9; seen on the quick
    matrix through local Ray, 2026-12-02). Restored afterwards."""
    old = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def cache() -> Path:
    return refs.cache_root() / "ray"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True, text=True)


def checkout(commit: Commit, get: Get) -> Path:
    """The commit's worktree on this node, made once from its bundle."""
    sha = commit.sha
    path = cache() / "checkouts" / sha
    ready = path.with_name(f"{sha}.ready")
    with _locked(path.with_name(f"{sha}.lock")):
        if ready.is_file() and path.is_dir():
            return path
        shutil.rmtree(path, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="gates-bundle-") as d:
            b = Path(d) / "commit.bundle"
            b.write_bytes(get(commit.bundle))
            _git("init", "-q", str(path))
            _git("-C", str(path), "fetch", "-q", str(b), "refs/gates/arm")
            _git("-C", str(path), "-c", "advice.detachedHead=false", "checkout", "-q", sha)
        ready.write_text(sha + "\n")
    return path


def unpack(asset: Asset, get: Get) -> Path:
    """A fixture (a model directory, a file) on this node, unpacked once by content hash."""
    root = cache() / "assets" / asset.hash
    ready = root.with_name(f"{asset.hash}.ready")
    with _locked(root.with_name(f"{asset.hash}.lock")):
        if not ready.is_file():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            with tarfile.open(fileobj=io.BytesIO(get(asset.archive))) as tar:
                tar.extractall(root, filter="data")
            ready.write_text(asset.name + "\n")
    return root if asset.dir else root / asset.name


def python_for(env_spec: list[str] | None) -> str:
    """This worker's interpreter, or (a side with its own environment) one made here."""
    if not env_spec:
        return sys.executable
    return str(envs.ensure(refs.cache_root() / "envs", env_spec))


class Watched(set):
    """The ``live`` set of ``run_arm``: each engine process added is told to the watchdog."""

    def __init__(self, pipe: Any) -> None:
        super().__init__()
        self.pipe = pipe

    def add(self, proc: subprocess.Popen) -> None:  # type: ignore[override]
        super().add(proc)
        self.pipe.write(f"{proc.pid}\n")
        self.pipe.flush()


@contextlib.contextmanager
def watchdog() -> Iterator[Watched]:
    dog = subprocess.Popen(
        [sys.executable, "-c", WATCHDOG],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        text=True,
    )
    assert dog.stdin is not None
    live = Watched(dog.stdin)
    try:
        yield live
    except BaseException:  # cancelled (KeyboardInterrupt in the task): end the engine now
        for p in list(live):
            kill(p)
        raise
    finally:
        with contextlib.suppress(OSError):
            dog.stdin.write("done\n")
            dog.stdin.close()
        dog.wait()


def where(device: str | None) -> str:
    """This node and GPU, as the receipt names them: ``host · GPU 3 (NVIDIA H200)``."""
    host = socket.gethostname()
    if device is None:
        return f"{host} · CPU"
    names = store.gpus()
    first = device.split(",")[0]
    name = names[int(first)] if first.isdigit() and int(first) < len(names) else "?"
    return f"{host} · GPU {device} ({name})"


def run(payload: ArmPayload, get: Get, device: str | None) -> ArmRun:
    """Run one arm on this worker (never raises for an engine failure)."""
    cfg = payload.config
    try:
        wt = checkout(payload.commit, get)
        model = unpack(payload.model, get)
        extra = [str(unpack(a, get)) if isinstance(a, Asset) else a for a in payload.extra_args]
        python = python_for(payload.env_spec)
    except (OSError, subprocess.CalledProcessError, tarfile.TarError, envs.EnvError) as e:
        why = getattr(e, "stderr", "") or str(e)
        reason = f"the worker could not prepare the arm: {str(why).strip()[-300:]}"
        return ArmRun(Status.CRASHED, reason=reason, device=where(device))
    job = ArmJob(
        key=payload.key,
        label=payload.label,
        worktree=wt,
        config=cfg,
        model=model,
        requests=payload.requests,
        timeout=payload.timeout,
        workdir=cache() / "runs" / f"{payload.key[:20]}-{os.getpid()}",
        env=base_env(wt, cfg.backend, cfg.flags, refs.cache_root()),
        extra_args=extra,
        trace=payload.trace,
        runner=served.run_served if payload.served else None,
        python=python,
    )
    with local_signals(), watchdog() as live:
        result = (job.runner or run_arm)(job, live, device)
    return dataclasses.replace(result, device=where(device))


def probe_capabilities(commit: Commit, env_spec: list[str] | None, get: Get) -> tuple:
    """``engine capabilities --json`` of the commit, as this worker's machine answers it."""
    try:
        wt = checkout(commit, get)
        python = python_for(env_spec)
    except (OSError, subprocess.CalledProcessError, envs.EnvError) as e:
        return None, f"a Ray worker could not check the commit out: {e}"
    with local_signals():
        return capabilities(wt, refs.cache_root(), python=python)


@dataclass(frozen=True)
class NodeFacts:
    """A node as the runner sorts nodes into kinds: its host, machine and fingerprint, and
    the gates package it runs (the one the runner shipped, or a stale install)."""

    host: str
    machine: JsonObject
    fp: str
    gates: str = ""


def facts() -> NodeFacts:
    """This node's facts."""
    return NodeFacts(socket.gethostname(), store.machine(), store.fingerprint(), gates.__file__)
