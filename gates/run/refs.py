"""Refs, merge base and worktrees (GitPython).

``WORKTREE`` names the uncommitted tree: it is snapshotted as a commit object built with a
temporary index (tracked and untracked, non-ignored files; the user's index and branch are
never touched), so it gets a SHA and an engine tree hash like any commit. The same dirty
tree always gives the same snapshot SHA, so its worktree and results are reused.

Each commit is checked out as a detached git worktree under the cache folder
(``$GATES_CACHE`` or ``~/.cache/exact-gates``), reused across runs. The worktrees belong to a
bare *mirror* under the cache whose objects are the user's (``objects/info/alternates``), so
they never show in the user's ``git worktree list``; a worktree a killed run left half made
is removed by the next run (``gates/run/mirror.py``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import git

from gates import BadInput
from gates.run import mirror
from gates.run.gitdirs import repo_id, repo_root

WORKTREE = "WORKTREE"
KEEP_WORKTREES = 12  # per repository; the least recently used beyond this are removed
_SNAPSHOT_ENV = {
    "GIT_AUTHOR_NAME": "gates",
    "GIT_AUTHOR_EMAIL": "gates@localhost",
    "GIT_COMMITTER_NAME": "gates",
    "GIT_COMMITTER_EMAIL": "gates@localhost",
    "GIT_AUTHOR_DATE": "@0 +0000",
    "GIT_COMMITTER_DATE": "@0 +0000",
}


@dataclass
class Side:
    name: str  # "base" or "head"
    ref: str  # as the user gave it
    sha: str
    worktree: Path | None = None
    engine_tree: str | None = None  # git tree hash of engine/ (None: no engine/)
    snapshot_of: str | None = None  # for WORKTREE: the HEAD sha the snapshot sits on
    subject: str = ""


def cache_root() -> Path:
    env = os.environ.get("GATES_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "exact-gates"


def open_repo(path: str | Path) -> git.Repo:
    try:
        return git.Repo(path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise BadInput(f"{path}: not inside a git repository") from None


def resolve(repo: git.Repo, ref: str) -> str:
    """The commit SHA of a ref; BadInput for a ref that does not exist or looks like an option."""
    if not ref or ref.startswith("-"):
        raise BadInput(f"bad ref {ref!r}: a ref may not be empty or start with '-'")
    try:
        return repo.git.rev_parse("--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    except git.GitCommandError:
        raise BadInput(f"ref {ref!r} does not exist in {repo_root(repo)}") from None


def snapshot(repo: git.Repo) -> tuple[str, str]:
    """Commit the working tree (with untracked files) without touching the user's index.

    Returns (snapshot sha, HEAD sha)."""
    head = resolve(repo, "HEAD")
    index = Path(repo.git.rev_parse("--git-path", "index"))
    if not index.is_absolute():
        index = repo_root(repo) / index
    with tempfile.TemporaryDirectory(prefix="gates-index-") as d:
        tmp = Path(d) / "index"
        if index.exists():
            shutil.copyfile(index, tmp)
        env = {**os.environ, **_SNAPSHOT_ENV, "GIT_INDEX_FILE": str(tmp)}
        repo.git.add("-A", "--", ".", env=env)
        tree = repo.git.write_tree(env=env)
        sha = repo.git.commit_tree(tree, "-p", head, "-m", "gates: WORKTREE snapshot", env=env)
    return sha, head


def side(repo: git.Repo, name: str, ref: str) -> Side:
    if ref == WORKTREE:
        sha, head = snapshot(repo)
        s = Side(name, ref, sha, snapshot_of=head, subject="uncommitted changes")
    else:
        sha = resolve(repo, ref)
        s = Side(name, ref, sha, subject=repo.commit(sha).summary)
    s.engine_tree = engine_tree(repo, s.sha)
    return s


def engine_tree(repo: git.Repo, sha: str) -> str | None:
    try:
        return repo.git.rev_parse("--verify", "--quiet", f"{sha}:engine")
    except git.GitCommandError:
        return None


def merge_base(repo: git.Repo, a: str, b: str) -> str | None:
    try:
        return repo.git.merge_base(a, b)
    except git.GitCommandError:
        return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive flock on ``path``; retried if the file was unlinked (``clean``) while
    this process waited, so two processes never each hold a lock on another file."""
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                same = os.stat(path).st_ino == os.fstat(f.fileno()).st_ino
            except FileNotFoundError:
                same = False
            if same:
                try:
                    yield
                finally:
                    fcntl.flock(f, fcntl.LOCK_UN)
                return


# Worktree locks. Each worktree ``<sha>`` has a lock file ``<sha>.lock`` beside it. A process
# that uses the worktree holds a shared flock on it until it calls ``release`` or exits (the
# kernel drops the flocks of a killed process). An exclusive flock (to make, repair or remove
# the worktree) is only ever tried while holding the repository's lock (``<repo id>.lock``),
# so the lock files may be made and unlinked under it without racing.
_HELD: dict[Path, IO[str]] = {}


def _try_exclusive(f: IO[str]) -> bool:
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def worktrees_dir(repo: git.Repo) -> Path:
    return cache_root() / "worktrees" / repo_id(repo)


def ensure_worktree(repo: git.Repo, sha: str) -> Path:
    """A detached worktree of ``sha`` in the cache, made once and reused, and held (shared)
    by this process until ``release``: no other gate run removes it meanwhile."""
    root = worktrees_dir(repo)
    path = root / sha
    if path in _HELD:
        return path
    with _locked(root.with_suffix(".lock")):
        root.mkdir(parents=True, exist_ok=True)
        wt_repo = mirror.ensure(repo, cache_root())
        f = open(root / f"{sha}.lock", "a")  # noqa: SIM115 - held past this function
        try:
            if _try_exclusive(f):  # no other run uses it: make or repair it, then share
                _make(wt_repo, path, sha)
                mirror.drop_stale(wt_repo, root, _remove_unused, keep=path)
                _prune_old(wt_repo, root, keep=KEEP_WORKTREES)
            fcntl.flock(f, fcntl.LOCK_SH)  # another run uses it: it is whole, share it
        except BaseException:
            f.close()
            raise
    _HELD[path] = f
    with contextlib.suppress(OSError):
        os.utime(path)
    return path


def release() -> None:
    """Let other gate runs prune or remove the worktrees this process used."""
    while _HELD:
        _HELD.popitem()[1].close()


def _make(repo: git.Repo, path: Path, sha: str) -> None:
    """Make (or repair) the worktree of ``sha`` at ``path``; ``repo`` is the mirror."""
    if path.exists():
        try:
            wt = git.Repo(path)
            if (
                mirror.owns(repo, path)
                and wt.head.commit.hexsha == sha
                and not wt.is_dirty(untracked_files=True)
            ):
                return
        except (git.InvalidGitRepositoryError, git.NoSuchPathError, ValueError):
            pass
        _remove(repo, path)
    repo.git.worktree("prune")
    # --force twice: a run killed inside `worktree add` leaves the path registered and locked
    repo.git.worktree("add", "--detach", "--force", "--force", str(path), sha)


def _remove(repo: git.Repo, path: Path) -> None:
    mirror.unregister_elsewhere(repo, path)  # a worktree an older gates made in the user's repo
    with contextlib.suppress(git.GitCommandError):
        repo.git.worktree("remove", "--force", "--force", str(path))
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)


def _remove_unused(repo: git.Repo, path: Path) -> bool:
    """Remove a worktree no process holds (call with the repository's lock held)."""
    lock = path.with_name(f"{path.name}.lock")
    with open(lock, "a") as f:
        if not _try_exclusive(f):
            return False
        _remove(repo, path)
        lock.unlink()
    return True


def _prune_old(repo: git.Repo, root: Path, keep: int) -> None:
    trees = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    for p in trees[:-keep] if len(trees) > keep else []:
        _remove_unused(repo, p)
    repo.git.worktree("prune")


def clean(repo: git.Repo | None, everything: bool = True) -> list[str]:
    """Remove this repository's worktrees (and, with ``everything``, the whole cache), but
    none that a running gate run holds: BadInput names them, after the rest are removed."""
    release()  # this process is done with its own
    removed: list[str] = []
    busy: list[str] = []
    if repo is not None:
        root = worktrees_dir(repo)
        if root.exists():
            with _locked(root.with_suffix(".lock")):
                wt_repo = mirror.ensure(repo, cache_root())
                for p in sorted(q for q in root.iterdir() if q.is_dir()):
                    (removed if _remove_unused(wt_repo, p) else busy).append(str(p))
                wt_repo.git.worktree("prune")
    cache = cache_root()
    if everything and cache.exists() and not busy:
        with contextlib.ExitStack() as held:  # every worktree lock, so none is taken meanwhile
            for lock in sorted((cache / "worktrees").glob("*.lock")):
                held.enter_context(_locked(lock))
                trees = sorted(q for q in lock.with_suffix("").glob("*") if q.is_dir())
                for tree in trees:
                    f = held.enter_context(open(tree.with_name(f"{tree.name}.lock"), "a"))
                    if not _try_exclusive(f):
                        busy.append(str(tree))
            if not busy:
                shutil.rmtree(cache, ignore_errors=True)
                removed.append(str(cache))
    if busy:
        raise BadInput(
            f"{len(busy)} worktree(s) in use by a running gate run, kept: {', '.join(busy)}"
            + (f"; {cache} kept" if everything else "")
            + "; run clean again when it ends"
        )
    return removed
