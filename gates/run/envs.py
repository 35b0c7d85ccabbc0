"""Per-commit environments, as asv has them.

A commit's *dependency spec* is its ``pyproject.toml``'s ``[project] dependencies`` plus the
optional dependencies of the backends the matrix runs (``mlx``: extra ``mlx``; ``cupy``:
extra ``cuda``). When base and head have the same spec, both run on the gate runner's own
interpreter (one shared environment). When the specs differ, each side's arms, capabilities
and bench samples run in a virtualenv of its own, made once and cached under
``$GATES_CACHE/envs/<key>`` with key = hash of (Python version, spec); the engine itself
still comes from the commit's worktree (``PYTHONPATH``), so only the packages are installed.
The receipt says which (manifest key ``environments``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import platform
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import git

from gates.jsontypes import JsonObject
from gates.run import refs

BACKEND_EXTRAS = {"mlx": "mlx", "cupy": "cuda"}
INSTALL_TIMEOUT = 1800.0


@dataclass
class Env:
    side: str
    kind: str  # "shared" (the gate runner's interpreter) or "own" (a cached virtualenv)
    python: str
    key: str = ""  # of an own environment
    spec: list[str] = field(default_factory=list)
    reason: str = ""  # why an own environment could not be made ("" when it was)


class EnvError(Exception):
    pass


def spec(repo: git.Repo, sha: str, backends: list[str]) -> list[str]:
    """A commit's dependency spec, sorted; ``[]`` for a commit without pyproject.toml."""
    try:
        text = repo.git.show(f"{sha}:pyproject.toml")
    except git.GitCommandError:
        return []
    try:
        project = tomllib.loads(text).get("project", {})
    except tomllib.TOMLDecodeError as e:
        return [f"# unreadable pyproject.toml: {e}"]
    deps = list(project.get("dependencies", []))
    extras = project.get("optional-dependencies", {})
    for b in backends:
        deps += extras.get(BACKEND_EXTRAS.get(b, ""), [])
    return sorted(set(deps))


def env_key(deps: list[str]) -> str:
    blob = json.dumps({"python": platform.python_version(), "spec": deps}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def python_of(path: Path) -> Path:
    return path / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure(root: Path, deps: list[str]) -> Path:
    """The virtualenv of ``deps`` under ``root`` (made once; two runs at once wait on a lock)."""
    path = root / env_key(deps)
    with _lock(root / f"{path.name}.lock"):
        if (path / ".ready").is_file():
            return python_of(path)
        shutil.rmtree(path, ignore_errors=True)
        steps = [[sys.executable, "-m", "venv", "--without-pip", str(path)]]
        if deps:
            pip = [sys.executable, "-m", "pip", "--python", str(python_of(path)), "install"]
            steps.append([*pip, "--quiet", "--disable-pip-version-check", *deps])
        for argv in steps:
            try:
                out = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
            except (OSError, subprocess.SubprocessError) as e:
                raise EnvError(f"{argv[2]}: {e}") from None
            if out.returncode != 0:
                last = (out.stderr.strip().splitlines() or ["(no stderr)"])[-1]
                raise EnvError(f"{' '.join(argv[1:4])} exited {out.returncode}: {last[:300]}")
        (path / ".ready").write_text(json.dumps(deps) + "\n")
    return python_of(path)


def resolve(repo: git.Repo, sides: dict[str, refs.Side], backends: list[str]) -> dict[str, Env]:
    """Each side's environment: shared when the specs agree, else an own cached virtualenv."""
    specs = {name: spec(repo, s.sha, backends) for name, s in sides.items()}
    if specs["base"] == specs["head"]:
        return {name: Env(name, "shared", sys.executable, spec=specs[name]) for name in sides}
    out = {}
    for name, s in sides.items():
        deps, key = specs[name], env_key(specs[name])
        if s.engine_tree is None:  # nothing of this side runs
            out[name] = Env(name, "own", "", key, deps, "the commit has no engine/")
            continue
        try:
            python = ensure(refs.cache_root() / "envs", deps)
            out[name] = Env(name, "own", str(python), key, deps)
        except EnvError as e:
            out[name] = Env(name, "own", "", key, deps, str(e))
    return out


def to_json(envs: dict[str, Env]) -> JsonObject:
    """The manifest's ``environments``: each side's Env as it is."""
    return {name: asdict(e) for name, e in envs.items()}


def describe(envs: dict[str, Env] | None) -> str:
    """The receipt's line on environments (the manifest's ``environments``, read back)."""
    if not envs:
        return ""
    if all(e.kind == "shared" for e in envs.values()):
        return "one environment for both sides (the gate runner's: same dependency spec)"
    parts = []
    for name in ("base", "head"):
        e = envs[name]
        what = f"`{e.key}`" + (f" (could not be made: {e.reason})" if e.reason else "")
        parts.append(f"{name} in its own virtualenv {what}")
    return "; ".join(parts) + " — the dependency specs differ"


def key_vars(e: Env | None) -> dict[str, str]:
    """What an own environment adds to a result-store key (nothing for the shared one)."""
    return {"GATES_ENV": e.key} if e is not None and e.kind == "own" else {}
