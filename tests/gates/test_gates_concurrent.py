"""Two gate runs at once on one cache, and a cache entry that is not a result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import run_gates

REPO = Path(__file__).resolve().parents[2]


def gates_cmd(repo: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gates",
        "run",
        "--repo",
        str(repo),
        "--base",
        "main~1",
        "--head",
        "main",
        "--matrix",
        "matrices/small.yaml",
        "--quiet",
        "--out",
        str(out),
    ]


def test_two_runs_at_once_on_one_cache_both_hold_with_equal_results(stub_repo, tmp_path):
    stub_repo.commit("head", OUTPUT_SALT="")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    outs = [tmp_path / "a", tmp_path / "b"]
    procs = [
        subprocess.Popen(gates_cmd(stub_repo.root, o), env=env, cwd=REPO, stderr=subprocess.PIPE)
        for o in outs
    ]
    errs = [p.communicate(timeout=300)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    manifests = [json.loads(next(o.glob("*.json")).read_text()) for o in outs]
    verdicts = [[(g["name"], g["status"], g["matched"]) for g in m["gates"]] for m in manifests]
    assert verdicts[0] == verdicts[1]
    assert all(a["status"] in ("ok",) for m in manifests for a in m["arms"])


def test_a_corrupt_cache_entry_is_a_miss_and_is_reported(stub_repo):
    stub_repo.commit("head", OUTPUT_SALT="")
    code, man, _ = run_gates(stub_repo)
    assert code == 0
    results = Path(os.environ["GATES_CACHE"]) / "results"
    keys = [a["key"] for a in man["arms"] if a.get("key")]
    victim = results / keys[0][:2] / f"{keys[0]}.json"
    victim.write_text("{}")
    code, man, md = run_gates(stub_repo)
    assert code == 0
    assert man["matrix"]["ran"] >= 1
    assert "unreadable entr" in md
    assert json.loads(victim.read_text()).get("status") == "ok"


def test_a_killed_run_leaves_nothing_that_breaks_the_next(stub_repo, tmp_path):
    flag = tmp_path / "hang"
    flag.write_text("")
    stub_repo.commit("hangs while the flag file exists", HANG_KV="fp8", HANG_FILE=str(flag))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        gates_cmd(stub_repo.root, tmp_path / "killed"),
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    runs = Path(os.environ["GATES_CACHE"]) / "runs"
    deadline = time.monotonic() + 60
    while not (runs.exists() and any(runs.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.05)  # arms are running: worktrees made, scratch folders in use
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    flag.unlink()
    code, man, _ = run_gates(stub_repo)
    assert code == 0
    assert all(a["status"] == "ok" for a in man["arms"])
