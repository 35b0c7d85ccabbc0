"""An interrupted run kills the arms it started, also one whose process started just before
the interrupt but was registered in `live` just after it (a loaded machine stretches that
gap). Red with run_all's old single sweep of `live`: the run waited for the arm to end."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gates.run.execute import ArmJob, run_all
from gates.run.procs import forget, spawn
from gates.run.results import ArmRun, Status
from tests.gates.conftest import arm_config


def test_a_process_registered_after_the_interrupt_is_killed(tmp_path: Path) -> None:
    started, interrupted = threading.Event(), threading.Event()
    procs: list[subprocess.Popen] = []

    def late(job: ArmJob, live: set, device: str | None) -> ArmRun:
        proc = spawn([sys.executable, "-c", "import time; time.sleep(45)"])
        procs.append(proc)
        started.set()
        interrupted.wait(30)
        time.sleep(0.3)  # the interrupt has been handled: its one sweep of `live` is over
        live.add(proc)
        try:
            proc.wait(timeout=60)
        finally:
            forget(proc)
            live.discard(proc)
        return ArmRun(status=Status.CRASHED, reason="killed")

    def interrupt(job: ArmJob, live: set, device: str | None) -> ArmRun:
        started.wait(30)
        interrupted.set()
        raise KeyboardInterrupt

    def job(name: str, runner) -> ArmJob:  # type: ignore[no-untyped-def]
        return ArmJob(name, name, tmp_path, arm_config(), tmp_path, b"", 120, tmp_path / name,
                      runner=runner)  # fmt: skip

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_all([job("interrupt", interrupt), job("late", late)], 2, lambda *a: None)
    took = time.monotonic() - t0
    try:
        assert procs and procs[0].poll() is not None, "the late arm's process lives on"
        assert took < 20, f"the interrupted run waited {took:.0f} s for the late arm to end"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def test_an_arm_killed_by_the_stop_has_no_outcome(tmp_path: Path) -> None:
    """The interrupt kills a running arm, whose run then reads as a crash (exit -9): it gets
    no result, so the receipt counts it as not run, never as crashed. An arm that ended
    before the interrupt keeps its result. Red without the stop's flag in run_all: the
    killed arm reached on_done as CRASHED."""
    started, finished = threading.Event(), threading.Event()

    def ok(job: ArmJob, live: set, device: str | None) -> ArmRun:
        finished.set()
        return ArmRun(status=Status.OK)

    def killed(job: ArmJob, live: set, device: str | None) -> ArmRun:
        proc = spawn([sys.executable, "-c", "import time; time.sleep(45)"])
        live.add(proc)
        started.set()
        try:
            code = proc.wait(timeout=60)
        finally:
            forget(proc)
            live.discard(proc)
        return ArmRun(status=Status.CRASHED, reason=f"engine exited {code}")

    def interrupt(job: ArmJob, live: set, device: str | None) -> ArmRun:
        started.wait(30)
        finished.wait(30)
        raise KeyboardInterrupt

    def job(name: str, runner) -> ArmJob:  # type: ignore[no-untyped-def]
        return ArmJob(name, name, tmp_path, arm_config(), tmp_path, b"", 120, tmp_path / name,
                      runner=runner)  # fmt: skip

    outcomes: dict[str, Status] = {}
    # the pool's results are read in this order: the interrupt's surfaces while `killed` runs
    jobs = [job("ok", ok), job("interrupt", interrupt), job("killed", killed)]
    with pytest.raises(KeyboardInterrupt):
        run_all(jobs, 3, lambda j, run, cached: outcomes.__setitem__(j.key, run.status))
    assert outcomes == {"ok": Status.OK}
