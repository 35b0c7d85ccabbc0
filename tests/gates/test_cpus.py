"""Speed sections that share a machine claim one CPU each (a flock per CPU under the cache)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from gates.run.speed import cpus

REPO = Path(__file__).resolve().parents[2]

HOLD = """
import sys, time
from pathlib import Path
from gates.run.speed import cpus
with cpus.claim(Path(sys.argv[1]), cpus=[1, 0]) as c:
    print(c.cpu, flush=True)
    time.sleep(600)
"""


def test_two_concurrent_claims_get_two_cpus(tmp_path):
    with cpus.claim(tmp_path, cpus=[1, 0]) as a, cpus.claim(tmp_path, cpus=[1, 0]) as b:
        assert (a.cpu, b.cpu) == (1, 0)
        assert a.note == "claimed: free of 2 allowed"
        assert b.note == "claimed: free of 2 allowed, 1 taken by other gate runs"
    with cpus.claim(tmp_path, cpus=[1, 0]) as c:  # both released
        assert c.cpu == 1


def test_a_claim_held_by_another_process_is_skipped_until_it_is_killed(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "1"
        with cpus.claim(tmp_path, cpus=[1, 0]) as c:
            assert c.cpu == 0
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with cpus.claim(tmp_path, cpus=[1, 0]) as c:  # the kernel dropped the killed run's lock
        assert c.cpu == 1


def test_every_cpu_claimed_waits_for_the_first_free(tmp_path, monkeypatch):
    monkeypatch.setattr(cpus, "POLL_S", 0.02)
    said: list[str] = []
    got: list[cpus.Claim] = []
    with cpus.claim(tmp_path, cpus=[0]):
        waiter = threading.Thread(
            target=lambda: got.append(cpus.claim(tmp_path, cpus=[0], log=said.append).__enter__())
        )
        waiter.start()
        deadline = time.monotonic() + 30
        while not said and not got and time.monotonic() < deadline:
            time.sleep(0.01)  # until it says it waits (or, broken, takes the CPU anyway)
        assert said and not got
    waiter.join(timeout=30)
    assert got and got[0].cpu == 0 and "waiting for one" in got[0].note
    assert said == ["[gates] speed: every CPU of 1 is claimed by a gate run; waiting"]
