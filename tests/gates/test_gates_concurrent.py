"""Two gate runs at once on one cache, and a cache entry that is not a result."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import git, hangs, run_gates, wait_until
from gates.run import refs

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "fixtures" / "models" / "tiny-qwen3"
TINY_MATRIX = """
model: fixtures/models/tiny-qwen3
backend: numpy
prompts: t
max_tokens: 6
timeout: 300
axes:
  kv: [bf16, fp8]
  parallel: [4]
  paging: [on]
gates:
  - name: flags unset == main
    across_commits: {}
  - name: concurrent == solo
    within_commit: {vary: parallel, reference: serial}
  - name: no pages at idle
    resource: {pages_in_use: 0, unplanned_allocations: 0}
"""


def gates_cmd(repo: Path, out: Path, base: str = "main~1", head: str = "main") -> list[str]:
    return [
        sys.executable,
        "-m",
        "gates",
        "run",
        "--repo",
        str(repo),
        "--base",
        base,
        "--head",
        head,
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


@pytest.fixture
def tiny_repo(tmp_path: Path) -> Path:
    """A repository with this tree's real engine, the bundled tiny model and 4 chat prompts;
    main~1..main differ in engine/ (a note), so base and head arms are distinct results."""
    root = tmp_path / "tiny"
    shutil.copytree(REPO / "engine", root / "engine", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(TINY, root / "fixtures" / "models" / "tiny-qwen3")
    chats = (REPO / "fixtures" / "prompts" / "chats.jsonl").read_text().splitlines()[:4]
    (root / "fixtures" / "prompts").mkdir(parents=True)
    (root / "fixtures" / "prompts" / "t.jsonl").write_text("\n".join(chats) + "\n")
    (root / "matrices").mkdir()
    (root / "matrices" / "small.yaml").write_text(TINY_MATRIX)
    (root / ".gitignore").write_text("__pycache__/\nreceipts/\n")
    git(root, "init", "-q", "-b", "main")
    for msg in ("base", "head"):
        if msg == "head":
            (root / "engine" / "NOTE.md").write_text("a note: the engine tree differs\n")
        git(root, "add", "-A")
        git(root, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", msg)
    return root


@pytest.mark.skipif(not TINY.is_dir(), reason="no bundled tiny model in this tree")
def test_two_real_runs_at_once_share_the_work_and_agree(tiny_repo, tmp_path):
    """Two `python -m gates run` of one matrix at once on one GATES_CACHE, with the real engine:
    both exit 0 with equal verdicts and tokens, and every arm runs once in all (its result key
    is locked while it runs; the other run waits for it or takes another arm)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "GATES_CACHE": str(tmp_path / "cache")}
    outs = [tmp_path / "a", tmp_path / "b"]
    procs = [
        subprocess.Popen(gates_cmd(tiny_repo, o), env=env, cwd=REPO, stderr=subprocess.PIPE)
        for o in outs
    ]
    errs = [p.communicate(timeout=600)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    mans = [json.loads(next(o.glob("*.json")).read_text()) for o in outs]
    verdicts = [[(g["name"], g["status"], g["matched"]) for g in m["gates"]] for m in mans]
    assert verdicts[0] == verdicts[1]
    tokens = [
        sorted((a["key"], [r["token_sha"] for r in a["replies"]]) for a in m["arms"]) for m in mans
    ]
    assert tokens[0] == tokens[1]
    keys = {a["key"] for m in mans for a in m["arms"]}
    assert sum(m["matrix"]["ran"] for m in mans) == len(keys), [m["matrix"] for m in mans]


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
    stub_repo.hang_on(flag)
    stub_repo.commit("hangs while the flag file exists")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        gates_cmd(stub_repo.root, tmp_path / "killed"),
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    # arms are running: worktrees made, scratch folders in use, two arms hanging
    wait_until(lambda: hangs(flag) == 2, proc, "2 hangs")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    flag.unlink()
    code, man, _ = run_gates(stub_repo)
    assert code == 0
    assert all(a["status"] == "ok" for a in man["arms"])


def test_worktrees_in_use_are_neither_pruned_nor_cleaned(stub_repo, tmp_path, monkeypatch):
    """While one run's arms run, another process prunes every worktree it may (keep 0) and
    runs `gates clean`: the running run's worktrees stay, clean exits 2 naming them, and
    the run ends with every arm ok; clean then removes everything."""
    flag = tmp_path / "hang"
    stub_repo.hang_on(flag)
    stub_repo.commit("hangs while the flag file exists")
    other = stub_repo.commit("a third commit, for a worktree of its own")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = tmp_path / "a"
    proc = subprocess.Popen(
        gates_cmd(stub_repo.root, out, base="main~2", head="main~1"),
        env=env,
        cwd=REPO,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: hangs(flag) == 2, proc, "2 hangs")
        repo = refs.open_repo(stub_repo.root)
        in_use = sorted(p for p in refs.worktrees_dir(repo).iterdir() if p.is_dir())
        assert len(in_use) == 2
        monkeypatch.setattr(refs, "KEEP_WORKTREES", 1)
        refs.ensure_worktree(repo, other)  # makes one, prunes all but the newest it may
        refs.release()
        clean = [sys.executable, "-m", "gates", "clean", "--repo", str(stub_repo.root)]
        done = subprocess.run(clean, env=env, cwd=REPO, capture_output=True, text=True)
        assert done.returncode == 2, done.stderr
        assert "in use by a running gate run" in done.stderr
        assert all(str(p) in done.stderr for p in in_use)
        assert all((p / "engine" / "__main__.py").is_file() for p in in_use)
    finally:
        flag.unlink()
    err = proc.communicate(timeout=120)[1].decode()
    assert proc.returncode == 0, err
    man = json.loads(next(out.glob("*.json")).read_text())
    assert all(a["status"] == "ok" for a in man["arms"]), man["arms"]
    done = subprocess.run(clean, env=env, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not Path(os.environ["GATES_CACHE"]).exists()


def test_a_worktree_left_half_made_is_made_again(stub_repo):
    """A run killed inside `git worktree add` leaves the worktree registered and locked
    ("initializing"), its files half checked out or not there at all."""
    repo = refs.open_repo(stub_repo.root)
    sha = refs.resolve(repo, "main")
    path = refs.ensure_worktree(repo, sha)
    refs.release()
    admin = Path(git(path, "rev-parse", "--git-dir"))
    for lost in ("engine/__main__.py", None):
        (admin / "locked").write_text("initializing")
        if lost:
            (path / lost).unlink()
        else:
            shutil.rmtree(path)
        assert refs.ensure_worktree(repo, sha) == path
        refs.release()
        assert (path / "engine" / "__main__.py").is_file()
        assert git(path, "status", "--porcelain") == ""


def test_a_run_killed_while_another_waits_for_its_arms(stub_repo, tmp_path):
    """Run A is SIGKILLed while it holds the keys of hanging arms that run B waits for: the
    kernel drops A's locks, B runs those arms itself and ends all ok, and so does a third."""
    flag = tmp_path / "hang"
    stub_repo.hang_on(flag)
    stub_repo.commit("hangs while the flag file exists")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    a = subprocess.Popen(
        gates_cmd(stub_repo.root, tmp_path / "a"),
        env=env,
        cwd=REPO,
        start_new_session=True,
        **quiet,
    )
    wait_until(lambda: hangs(flag) == 2, a, "A's 2 hangs")
    b = subprocess.Popen(gates_cmd(stub_repo.root, tmp_path / "b"), env=env, cwd=REPO, **quiet)
    time.sleep(3)  # B takes what A does not hold and waits for the rest (not a verdict: B
    # cannot end while the flag is there, and runs the arms itself if it comes late)
    assert b.poll() is None
    os.killpg(a.pid, signal.SIGKILL)
    a.wait(timeout=120)
    wait_until(lambda: hangs(flag) == 4, b, "B's 2 hangs")  # B runs A's arms itself
    flag.unlink()
    assert b.wait(timeout=120) == 0
    man = json.loads(next((tmp_path / "b").glob("*.json")).read_text())
    assert all(x["status"] == "ok" for x in man["arms"])
    code, man, _ = run_gates(stub_repo)
    assert code == 0
    assert all(x["status"] == "ok" for x in man["arms"])
    assert man["matrix"]["ran"] == 0  # all published by B
