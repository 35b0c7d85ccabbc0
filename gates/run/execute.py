"""Run arms as subprocesses, each with the engine of its own commit's worktree.

``python -m engine run`` runs with cwd = the worktree, PYTHONPATH = the worktree and the
gate runner's own interpreter. Arms run in a local pool (single-threaded BLAS each, so
arms in parallel give the same bits as arms alone), or one arm per GPU with
CUDA_VISIBLE_DEVICES on a CUDA backend.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gates.plan.arm_config import ArmConfig
from gates.run.capabilities import Capabilities
from gates.run.contract import REPLY_KEYS, engine_args
from gates.run.procs import forget, kill, spawn
from gates.run.reply import Reply
from gates.run.results import ArmRun, Status, metrics_of
from gates.run.store import Store

THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
GPU_BACKENDS = ("cupy",)
STOP_POLL_S = 0.05  # an interrupted run kills its live processes this often until it returns
TAIL = 2000


def tail(text: str, n: int = TAIL) -> str:
    text = text.strip()
    return text if len(text) <= n else "…" + text[-n:]


def _run(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    timeout: float,
    stdout: Any = subprocess.PIPE,
    stderr: Any = subprocess.PIPE,
    live: set[subprocess.Popen] | None = None,
) -> tuple[int | None, str, str]:
    """Run a command in its own process group; kill the group on timeout.

    Returns (exit code or None on timeout, stdout, stderr) (text only for pipes)."""
    proc = spawn(
        argv, cwd=cwd, env=env, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, text=True
    )
    if live is not None:
        live.add(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out or "", err or ""
    except subprocess.TimeoutExpired:
        kill(proc)
        out, err = proc.communicate()
        return None, out or "", err or ""
    finally:
        forget(proc)
        if live is not None:
            live.discard(proc)


def base_env(worktree: Path, backend: str, flags: dict[str, str], cache: Path) -> dict[str, str]:
    """The environment of an engine subprocess: no ENGINE_* leaking in from the user."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ENGINE_") and k not in ("PYTHONPATH", "PYTHONHOME")
    }
    env["PYTHONPATH"] = str(worktree)
    env["PYTHONPYCACHEPREFIX"] = str(cache / "pycache")  # keep the worktree clean
    if backend in GPU_BACKENDS:
        env.pop("CUDA_VISIBLE_DEVICES", None)  # set per arm, one GPU each
    else:
        env.update(dict.fromkeys(THREAD_VARS, "1"))
    env.update(flags)
    return env


def has_engine(worktree: Path) -> bool:
    return (worktree / "engine" / "__main__.py").is_file()


def capabilities(
    worktree: Path, cache: Path, timeout: float = 120, python: str = sys.executable
) -> tuple[Capabilities | None, str]:
    """(capabilities, "") or (None, why this commit's engine can run nothing)."""
    if not has_engine(worktree):
        return None, "the commit has no engine (engine/__main__.py)"
    argv = [python, "-m", "engine", "capabilities", "--json"]
    code, out, err = _run(argv, worktree, base_env(worktree, "", {}, cache), timeout)
    if code is None:
        return None, f"`engine capabilities --json` timed out after {timeout:.0f}s"
    if code != 0:
        return None, f"`engine capabilities --json` exited {code}:\n{tail(err, 1200)}"
    try:
        caps = json.loads(out)
    except json.JSONDecodeError:
        return None, "`engine capabilities --json` printed no JSON object"
    if not isinstance(caps, dict):
        return None, "`engine capabilities --json` printed no JSON object"
    return Capabilities.from_json(caps), ""


@dataclass
class ArmJob:
    key: str
    label: str
    worktree: Path
    config: ArmConfig
    model: Path
    requests: bytes
    timeout: float
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)
    extra_args: list[str] = field(default_factory=list)
    trace: bool = False  # the engine writes a schedule trace (--trace, contract 2)
    runner: Callable[..., ArmRun] | None = None  # None: run_arm (`engine run`)
    python: str = sys.executable  # the side's interpreter (gates/run/envs.py)


def run_arm(
    job: ArmJob, live: set[subprocess.Popen] | None = None, device: str | None = None
) -> ArmRun:
    """Run one arm; never raises for an engine failure (the result says "crashed")."""
    wd = job.workdir
    shutil.rmtree(wd, ignore_errors=True)
    wd.mkdir(parents=True)
    (wd / "requests.jsonl").write_bytes(job.requests)
    argv = _argv(job, wd)
    env = dict(job.env)
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = device
    t0 = time.monotonic()
    with open(wd / "stderr.txt", "w") as ef:
        code, _, _ = _run(
            argv, job.worktree, env, job.timeout, stdout=subprocess.DEVNULL, stderr=ef, live=live
        )
    wall = time.monotonic() - t0
    stderr = (wd / "stderr.txt").read_text(errors="replace")
    shown = " ".join(a if " " not in a else repr(a) for a in ["python", *argv[1:]])
    crashed = ArmRun(
        status=Status.CRASHED,
        exit_code=code,
        wall_s=round(wall, 3),
        argv=shown,
        stderr_tail=tail(stderr),
        device=device,
    )
    if code is None:
        return dataclasses.replace(crashed, reason=f"timed out after {job.timeout:.0f}s")
    if code == 2:  # the contract's "bad input": this engine will not run this arm
        last = [ln for ln in stderr.strip().splitlines() if ln.strip()]
        why = "refused (exit 2)" + (f": {last[-1].strip()}" if last else "")
        return dataclasses.replace(crashed, status=Status.REFUSED, reason=why)
    if code != 0:
        return dataclasses.replace(crashed, reason=f"engine exited {code}")
    return _outputs(job, crashed)


def _argv(job: ArmJob, wd: Path) -> list[str]:
    """``engine run`` of the arm, its files in ``wd``."""
    argv = [job.python, "-m", "engine", "run", "--model", str(job.model)]
    argv += ["--requests", str(wd / "requests.jsonl"), "--out", str(wd / "out.jsonl")]
    argv += ["--metrics", str(wd / "metrics.json"), *engine_args(job.config), *job.extra_args]
    if job.trace:
        argv += ["--virtual-clock", "--trace", str(wd / "trace.jsonl")]
    return argv


def _outputs(job: ArmJob, crashed: ArmRun) -> ArmRun:
    """An arm that exited 0: its replies, metrics and trace, or why they do not read."""
    wd = job.workdir
    try:
        out, met = (wd / "out.jsonl").read_text(), wd / "metrics.json"
        replies = [json.loads(ln) for ln in out.splitlines() if ln.strip()]
        metrics = json.loads(met.read_text()) if met.exists() else None
        rows = (wd / "trace.jsonl").read_text().splitlines() if job.trace else []
        schedule = [json.loads(ln) for ln in rows if ln.strip()] if job.trace else None
    except (OSError, json.JSONDecodeError) as e:
        return dataclasses.replace(
            crashed, reason=f"engine exited 0 but its output is unreadable: {e}"
        )
    want = [json.loads(ln)["id"] for ln in job.requests.decode().splitlines()]
    got = [r.get("id") for r in replies if isinstance(r, dict)]
    if sorted(got) != sorted(want):
        why = (
            f"engine exited 0 but replied to {len(got)} of {len(want)} requests"
            if set(got) <= set(want)
            else "engine exited 0 but its reply ids differ from the request ids"
        )
        return dataclasses.replace(crashed, reason=why)
    shutil.rmtree(wd, ignore_errors=True)
    return dataclasses.replace(
        crashed,
        status=Status.OK,
        replies=[Reply.from_json({k: r[k] for k in REPLY_KEYS if k in r}) for r in replies],
        metrics=metrics_of(metrics),
        trace=schedule,
    )


class Progress:
    """Arms done and left, on stderr (one updating line on a terminal)."""

    def __init__(self, total: int, cached: int, stream: Any = None) -> None:
        self.total, self.done, self.cached, self.crashed = total, cached, cached, 0
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.t0 = time.monotonic()
        self.lock = threading.Lock()

    def update(self, label: str, result: ArmRun, cached: bool = False) -> None:
        with self.lock:
            self.done += 1
            self.cached += cached
            self.crashed += result.status is Status.CRASHED  # a refusal is no crash
            state = "ok" if result.ok else "CRASHED"
            if result.status is Status.REFUSED:  # exit 2: this engine will not run the arm
                state = "REFUSED"
            if cached:
                state = "ok (run by another gate run on this cache)"
            line = (
                f"[gates] arms {self.done}/{self.total} done, {self.total - self.done} left"
                f" ({self.cached} cached, {self.crashed} crashed, "
                f"{time.monotonic() - self.t0:.0f}s) · {label}: {state} "
                f"{result.wall_s:.1f}s{crash_note(result)}"
            )
            if self.tty:
                self.stream.write("\r\033[K" + line)
                if self.done == self.total:
                    self.stream.write("\n")
            else:
                self.stream.write(line + "\n")
            self.stream.flush()


def crash_note(result: ArmRun, width: int = 200) -> str:
    """Why an arm crashed or was refused, for its progress line (seen as it happens, before
    any receipt): its reason and the last line of its stderr."""
    if result.ok:
        return ""
    lines = [ln.strip() for ln in result.stderr_tail.splitlines() if ln.strip()]
    last = lines[-1] if lines and lines[-1] not in result.reason else ""  # a refusal has it
    why = "; ".join(x for x in (result.reason, last) if x)
    return f": {why[:width]}" if why else ""


def _started(job: ArmJob, live: set[subprocess.Popen], device: str | None) -> ArmRun:
    try:
        return (job.runner or run_arm)(job, live, device)
    except Exception as e:  # noqa: BLE001 - a harness error must not lose other arms
        return ArmRun(status=Status.CRASHED, reason=f"could not start the arm: {e!r}")


def stored_run(st: Store | None, key: str) -> ArmRun | None:
    """The store's ok run of ``key``, or None (an entry that does not read as an ArmRun is
    corrupt: counted and removed, as the store does for one that is not JSON)."""
    hit = st.read(key, must_have="replies") if st else None
    if hit is None or st is None:
        return None
    try:
        run = ArmRun.from_json(hit)
    except (ValueError, TypeError):
        st.drop(key)
        return None
    return run if run.ok else None


def _device_queue(devices: list[str] | None) -> queue.Queue[str] | None:
    """The GPUs free to take an arm (one arm per GPU), or None on a CPU backend."""
    if not devices:
        return None
    q: queue.Queue[str] = queue.Queue()
    for d in devices:
        q.put(d)
    return q


def _stop(pool: ThreadPoolExecutor, submitted: list[Future], live: set[subprocess.Popen]) -> None:
    """Cancel what has not started and kill what has, until every worker has returned: a
    worker may be between starting its process and registering it in `live` when the
    interrupt comes (a loaded machine stretches that gap), so one sweep is not enough."""
    for f in submitted:
        f.cancel()
    pool.shutdown(wait=False, cancel_futures=True)
    while not all(f.done() for f in submitted):
        for p in list(live):
            kill(p)
        time.sleep(STOP_POLL_S)


def run_all(
    jobs: list[ArmJob],
    workers: int,
    on_done: Callable[[ArmJob, ArmRun, bool], None],
    progress: Progress | None = None,
    devices: list[str] | None = None,
    st: Store | None = None,
) -> None:
    """Run jobs in a pool; ``on_done(job, result, cached)`` is called (in a worker thread,
    while the job's result key is claimed) as each one ends; not for an arm an interrupt's
    stop killed (it did not crash), as a Ray run's cancelled arms get none.

    With a store, each job claims its result key first (``Store.claim``): a job another gate
    run on this cache is running is put off to a second round, which waits for that run and
    takes its published result (``cached``) or, if it published none, runs the arm."""
    if not jobs:
        return
    live: set[subprocess.Popen] = set()
    stopping = threading.Event()
    dev_q = _device_queue(devices)
    workers = len(devices) if devices else workers

    def work(job: ArmJob, wait: bool) -> bool:
        """False: another run holds the job's key (only when not ``wait``)."""
        with st.claim(job.key, wait) if st else contextlib.nullcontext(True) as held:
            if not held:
                return False
            result = stored_run(st, job.key)
            cached = result is not None
            if result is None:
                device = dev_q.get() if dev_q is not None else None
                try:
                    result = _started(job, live, device)
                finally:
                    if dev_q is not None and device is not None:
                        dev_q.put(device)
            if stopping.is_set() and not result.ok:
                return True  # killed by the interrupt's stop: no outcome of its own
            on_done(job, result, cached)
        if progress:
            progress.update(job.label, result, cached)
        return True

    pool = ThreadPoolExecutor(max_workers=max(1, workers))
    submitted: list[Future] = []

    def submit(job: ArmJob, wait: bool) -> Future:
        submitted.append(pool.submit(work, job, wait))
        return submitted[-1]

    try:
        futures = [submit(j, False) for j in jobs]
        taken = [j for j, f in zip(jobs, futures, strict=True) if not f.result()]
        for f in as_completed([submit(j, True) for j in taken]):
            f.result()
    except BaseException:
        stopping.set()
        _stop(pool, submitted, live)
        raise
    pool.shutdown(wait=True)
