"""Every process the gate runner starts (engine run, engine serve, bench) goes through
``spawn``: its own process group (a new session), registered until it is reaped, and tied
to the runner's life with ``PR_SET_PDEATHSIG`` (Linux), so it is killed even when the
runner itself is killed with SIGKILL. ``own_children`` turns SIGTERM and SIGHUP into an
exception in the main thread (as SIGINT already is), so the runner's ``finally`` blocks kill
every group; ``reap_all`` kills what is still registered (at exit, too).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

PR_SET_PDEATHSIG = 1
_LIVE: set[subprocess.Popen] = set()
_LOCK = threading.Lock()


def _prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up once in the parent (the child only calls it)."""
    if not sys.platform.startswith("linux"):
        return None
    with contextlib.suppress(OSError, AttributeError):
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    return None


_PRCTL = _prctl()


def _child_setup(parent: int, cpu: int | None) -> Callable[[], None]:
    prctl = _PRCTL

    def setup() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # the runner died before the line above
                os._exit(137)
        if cpu is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {cpu})

    return setup


def spawn(argv: list[str], cpu: int | None = None, **kw: Any) -> subprocess.Popen:
    """Popen in a new process group, killed with the runner (``cpu``: pin it there)."""
    kw.pop("start_new_session", None)
    proc = subprocess.Popen(
        argv,
        start_new_session=True,
        preexec_fn=_child_setup(os.getpid(), cpu),  # only prctl and affinity: no locks
        **kw,
    )
    with _LOCK:
        _LIVE.add(proc)
    return proc


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL the process's whole group (the process leads it: ``spawn``)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def forget(proc: subprocess.Popen) -> None:
    """The process was reaped: nothing left to kill."""
    with _LOCK:
        _LIVE.discard(proc)


def reap_all() -> None:
    """Kill every group still registered and wait for its leader."""
    with _LOCK:
        procs = list(_LIVE)
        _LIVE.clear()
    for p in procs:
        kill(p)
    for p in procs:
        with contextlib.suppress(Exception):
            p.wait(timeout=5)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP reached the runner: unwind like Ctrl-C, killing the groups."""


def _raise(signum: int, _frame: Any) -> None:
    raise Terminated(signal.Signals(signum).name)


_OWNING: list[bool] = []


def own_children() -> None:
    """In the main thread of a runner: SIGTERM/SIGHUP unwind it, and exit reaps its
    children. Idempotent."""
    if _OWNING or threading.current_thread() is not threading.main_thread():
        return
    _OWNING.append(True)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, _raise)
    atexit.register(reap_all)
