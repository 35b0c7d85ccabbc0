"""Where a repository lives: its working tree, its common git directory (shared by its
worktrees), and the short id the cache names it by (worktrees, mirror, locks)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import git


def repo_root(repo: git.Repo) -> Path:
    assert repo.working_tree_dir is not None
    return Path(repo.working_tree_dir)


def common_dir(repo: git.Repo) -> Path:
    common = Path(repo.git.rev_parse("--git-common-dir"))
    if not common.is_absolute():
        common = repo_root(repo) / common
    return common.resolve()


def repo_id(repo: git.Repo) -> str:
    return hashlib.sha256(str(common_dir(repo)).encode()).hexdigest()[:12]
