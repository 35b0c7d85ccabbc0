"""The gates' worktrees live in a bare mirror under the cache: never in the user's
`git worktree list`; a half-made one a killed run left is removed by the next run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from gates.run import refs
from tests.gates.conftest import git

REPO = Path(__file__).resolve().parents[2]

KILLED = """
import os, signal, sys
from pathlib import Path
from gates.run import refs
repo = refs.open_repo(sys.argv[1])
path = refs.ensure_worktree(repo, sys.argv[2])
gitdir = Path((path / ".git").read_text().removeprefix("gitdir:").strip())
(gitdir / "locked").write_text("initializing")  # as if killed inside `git worktree add`
(path / "engine" / "__main__.py").unlink()
os.kill(os.getpid(), signal.SIGKILL)
"""


def _user_list(root: Path) -> list[str]:
    return git(root, "worktree", "list").splitlines()


def test_worktrees_stay_out_of_the_users_list(stub_repo):
    first = refs.resolve(refs.open_repo(stub_repo.root), "main")
    second = stub_repo.commit("second", BATCH_BUG=True)
    repo = refs.open_repo(stub_repo.root)
    paths = [refs.ensure_worktree(repo, sha) for sha in (first, second)]
    try:
        assert _user_list(stub_repo.root) == [f"{stub_repo.root}  {second[:7]} [main]"]
        assert all((p / "engine" / "knobs.py").is_file() for p in paths)
        assert "BATCH_BUG = True" in (paths[1] / "engine" / "knobs.py").read_text()
        assert git(paths[0], "rev-parse", "HEAD") == first
        assert git(paths[0], "status", "--porcelain") == ""
    finally:
        refs.release()
    # a WORKTREE snapshot is an object of the user's store: the mirror sees it at once
    (stub_repo.root / "new.txt").write_text("uncommitted\n")
    snap = refs.side(repo, "head", refs.WORKTREE)
    path = refs.ensure_worktree(repo, snap.sha)
    refs.release()
    assert (path / "new.txt").read_text() == "uncommitted\n"
    assert len(_user_list(stub_repo.root)) == 1


def test_a_worktree_a_killed_run_left_half_made_is_removed_by_the_next_run(stub_repo):
    first = refs.resolve(refs.open_repo(stub_repo.root), "main")
    second = stub_repo.commit("second")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", KILLED, str(stub_repo.root), first], env=env, cwd=REPO
    )
    assert done.returncode == -signal.SIGKILL
    repo = refs.open_repo(stub_repo.root)
    stale = refs.worktrees_dir(repo) / first
    assert stale.is_dir() and not (stale / "engine" / "__main__.py").exists()
    refs.ensure_worktree(repo, second)  # the next run: its lock is free, so it is dropped
    refs.release()
    assert not stale.exists()
    assert len(_user_list(stub_repo.root)) == 1
    assert refs.ensure_worktree(repo, first) == stale  # and made whole when asked for
    refs.release()
    assert (stale / "engine" / "__main__.py").is_file()


def test_a_worktree_in_the_users_list_from_an_older_gates_moves_to_the_mirror(stub_repo):
    repo = refs.open_repo(stub_repo.root)
    sha = refs.resolve(repo, "main")
    path = refs.worktrees_dir(repo) / sha
    path.parent.mkdir(parents=True)
    git(stub_repo.root, "worktree", "add", "--detach", str(path), sha)
    assert len(_user_list(stub_repo.root)) == 2
    assert refs.ensure_worktree(repo, sha) == path
    refs.release()
    assert len(_user_list(stub_repo.root)) == 1
    assert (path / "engine" / "knobs.py").is_file()
    assert git(path, "status", "--porcelain") == ""
