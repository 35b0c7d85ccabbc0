"""The gates' own bare repository, where their worktrees are registered.

``git worktree add`` in the user's repository lists every cached checkout in the user's
``git worktree list`` (and in their IDE). Instead each repository gets a bare *mirror* under
the cache, ``<cache>/mirrors/<repo id>.git``, whose object store is the user's own
(``objects/info/alternates``): nothing is copied or fetched, a WORKTREE snapshot (an object
written to the user's store) is there at once, and the user's repository is never written
to except for those snapshot objects. The mirror never runs ``gc`` (its store is empty).

A run killed inside ``git worktree add`` leaves a worktree half made (locked
"initializing", files missing); the next run that takes the repository's lock removes every
such worktree no running gate holds (``drop_stale``), as well as checkouts an older gates
registered in the user's repository (their registration there too).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import git

from gates.run.gitdirs import common_dir, repo_id


def ensure(repo: git.Repo, cache: Path) -> git.Repo:
    """The mirror of ``repo`` (made on first use); call with the repository's lock held."""
    path = cache / "mirrors" / f"{repo_id(repo)}.git"
    if not (path / "HEAD").is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        made = git.Repo.init(path, bare=True)
        made.git.config("gc.auto", "0")
        made.close()
    alt = path / "objects" / "info" / "alternates"
    want = f"{common_dir(repo) / 'objects'}\n"
    if not alt.is_file() or alt.read_text() != want:
        alt.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=alt.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            f.write(want)
        os.replace(tmp, alt)
    return git.Repo(path)


def _gitdir(path: Path) -> Path | None:
    """The admin folder a worktree's ``.git`` file names (None: no such file)."""
    try:
        text = (path / ".git").read_text()
    except OSError:
        return None
    if not text.startswith("gitdir:"):
        return None
    return Path(text.removeprefix("gitdir:").strip()).resolve()


def owns(mirror: git.Repo, path: Path) -> bool:
    gitdir = _gitdir(path)
    return gitdir is not None and gitdir.is_relative_to(Path(mirror.git_dir).resolve())


def unregister_elsewhere(mirror: git.Repo, path: Path) -> None:
    """A worktree at ``path`` registered in another repository (the user's, by an older
    gates): drop that registration, so it leaves their ``git worktree list``."""
    gitdir = _gitdir(path)
    if gitdir is None or owns(mirror, path) or gitdir.parent.name != "worktrees":
        return
    shutil.rmtree(gitdir, ignore_errors=True)


def stale(mirror: git.Repo, path: Path) -> bool:
    """Half made by a killed ``worktree add``, or not the mirror's."""
    if not owns(mirror, path):
        return True
    gitdir = _gitdir(path)
    assert gitdir is not None
    with contextlib.suppress(OSError):
        if (gitdir / "locked").read_text().strip() == "initializing":
            return True
    return not gitdir.is_dir()


def drop_stale(
    mirror: git.Repo, root: Path, remove_unused: Callable[[git.Repo, Path], bool], keep: Path
) -> list[Path]:
    """Remove the stale worktrees under ``root`` that no process holds (``remove_unused``
    checks); ``keep`` is the one this run just made. Returns those removed."""
    gone = []
    for p in sorted(q for q in root.iterdir() if q.is_dir() and q != keep):
        if stale(mirror, p) and remove_unused(mirror, p):
            gone.append(p)
    return gone
