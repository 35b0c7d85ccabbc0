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
