"""One CPU per speed section: gate runs that share a machine do not queue on one core.

Each speed section holds an exclusive ``flock`` on ``<cache>/cpus/<n>.lock`` for the CPU it
pins both sides to, for as long as it measures; another run skips that CPU and claims the
next free one, from the last CPU this process may use downwards (the first ones are where
the OS and the arms' workers usually land). The kernel drops a killed run's lock, so a
stale claim never outlives its process. When every allowed CPU is claimed the run waits
for the first to come free, and says how long it waited. Runs with different caches
(``GATES_CACHE``) do not see each other's claims.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

POLL_S = 0.5


@dataclass
class Claim:
    cpu: int | None
    note: str  # for the receipt: how it was claimed


def allowed() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0), reverse=True)
    except (AttributeError, OSError):
        return []


def _try(folder: Path, cpu: int) -> IO[str] | None:
    f = open(folder / f"{cpu}.lock", "a")  # noqa: SIM115 - held by the caller
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        return None
    return f


@contextlib.contextmanager
def claim(cache: Path, cpus: list[int] | None = None, log: object = None) -> Iterator[Claim]:
    """Hold a free CPU of ``cpus`` (default: those this process may use, last first)."""
    order = allowed() if cpus is None else list(cpus)
    if not order:
        yield Claim(None, "no CPU affinity on this system: not pinned")
        return
    folder = cache / "cpus"
    folder.mkdir(parents=True, exist_ok=True)
    t0, warned = time.monotonic(), False
    while True:
        for cpu in order:
            f = _try(folder, cpu)
            if f is not None:
                break
        else:
            if log and not warned:
                log(f"[gates] speed: every CPU of {len(order)} is claimed by a gate run; waiting")
                warned = True
            time.sleep(POLL_S)
            continue
        break
    waited = time.monotonic() - t0
    skipped = order.index(cpu)
    note = f"claimed: free of {len(order)} allowed"
    if skipped:
        note += f", {skipped} taken by other gate runs"
    if waited >= POLL_S:
        note += f", after {waited:.0f} s waiting for one"
    try:
        yield Claim(cpu, note)
    finally:
        fcntl.flock(f, fcntl.LOCK_UN)
        f.close()
