"""What travels to a worker with an arm: its commit as a git bundle, the fixtures it reads
(model directories, a drafter's truth file) as archives, and the arm itself as plain data.

Nothing assumes a shared filesystem: the runner puts each bundle and archive into the Ray
object store once (``put``) and every task names it; a worker unpacks each once into its
own cache (``gates/run/executors/worker.py``). A commit's bundle is made in a scratch bare
repository that borrows the runner's objects (git alternates), so the user's refs are never
touched, and a WORKTREE snapshot (a commit no ref names) travels like any commit.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gates.plan import hashes
from gates.plan.arm_config import ArmConfig
from gates.run.execute import ArmJob


def bundle(git_dir: Path, sha: str) -> bytes:
    """A git bundle of ``sha`` and its history, under the ref ``refs/gates/arm``."""
    with tempfile.TemporaryDirectory(prefix="gates-bundle-") as d:
        tmp = Path(d) / "repo.git"

        def git(*args: str) -> None:
            subprocess.run(["git", "--git-dir", str(tmp), *args], check=True, capture_output=True)

        git("init", "-q", "--bare")
        (tmp / "objects" / "info" / "alternates").write_text(str(git_dir / "objects") + "\n")
        git("update-ref", "refs/gates/arm", sha)
        git("bundle", "create", "-q", str(Path(d) / "b.bundle"), "refs/gates/arm")
        return (Path(d) / "b.bundle").read_bytes()


def archive(path: Path) -> bytes:
    """A directory's files (or one file, as ``file_name(path)``) as an uncompressed tar."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if path.is_file():
            tar.add(path, arcname=file_name(path))
        else:
            for p in sorted(q for q in path.rglob("*") if q.is_file()):
                if "__pycache__" not in p.parts:
                    tar.add(p, arcname=str(p.relative_to(path)))
    return buf.getvalue()


def file_name(path: Path) -> str:
    """A shipped file's name: its content names it (two files of one content are one asset),
    so only the suffix is kept."""
    return f"file{path.suffix}"


@dataclass(frozen=True)
class Commit:
    """A commit as it travels: its SHA and its bundle's object ref (Ray hands a task a ref
    inside an object as the ref, not the bytes: fetched only for a first checkout)."""

    sha: str
    bundle: Any  # ray.put of the bundle


@dataclass(frozen=True)
class Asset:
    """A fixture as it travels: content hash, name, whether a directory, archive ref."""

    hash: str
    name: str
    dir: bool
    archive: Any  # ray.put of the archive


@dataclass(frozen=True)
class ArmPayload:
    """An arm as a worker can run it anywhere: paths replaced by what they hold."""

    key: str
    label: str
    commit: Commit
    config: ArmConfig
    model: Asset
    requests: bytes
    timeout: float
    extra_args: tuple[str | Asset, ...]
    trace: bool
    served: bool
    env_spec: list[str] | None


@dataclass
class Shipper:
    """Puts each commit and fixture into the object store once; builds arm payloads."""

    git_dir: Path  # the runner's git common dir (its objects/)
    put: Callable[[bytes], Any]  # ray.put
    _refs: dict[str, object] = field(default_factory=dict)  # content -> its object ref

    def commit(self, sha: str) -> Commit:
        """The commit, its bundle in the object store."""
        if sha not in self._refs:
            self._refs[sha] = self.put(bundle(self.git_dir, sha))
        return Commit(sha, self._refs[sha])

    def asset(self, path: Path) -> Asset:
        """A fixture, its archive in the object store."""
        is_dir = path.is_dir()
        digest = hashes.hash_dir(path) if is_dir else hashes.hash_file(path)
        if digest not in self._refs:
            self._refs[digest] = self.put(archive(path))
        name = path.name if is_dir else file_name(path)
        return Asset(digest, name, is_dir, self._refs[digest])

    def arg(self, a: str) -> str | Asset:
        """An engine argument; a runner path (a drafter model, a truth file) as an asset."""
        p = Path(a)
        return self.asset(p) if os.path.isabs(a) and p.exists() else a

    def payload(self, job: ArmJob, sha: str, env_spec: list[str] | None) -> ArmPayload:
        """The arm as data a worker can run anywhere (paths replaced by what they hold)."""
        return ArmPayload(
            key=job.key,
            label=job.label,
            commit=self.commit(sha),
            config=job.config,
            model=self.asset(job.model),
            requests=job.requests,
            timeout=job.timeout,
            extra_args=tuple(self.arg(a) for a in job.extra_args),
            trace=job.trace,
            served=bool(job.config.served),
            env_spec=env_spec,
        )
