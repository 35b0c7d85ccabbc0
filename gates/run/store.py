"""The result store: one JSON file per finished arm, keyed by everything its tokens depend on.

Key = engine tree hash + arm config + request bytes + fixtures (model dir hash, prompt file
hash) + harness version + machine fingerprint. A second run whose engine tree did not
change runs no arm again, and an interrupted run keeps every arm that had finished,
because each result is written (atomically) as soon as its arm ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import subprocess
import tempfile
from collections.abc import Iterator
from functools import cache
from importlib import metadata
from pathlib import Path

from gates import HARNESS_VERSION
from gates.jsontypes import JsonObject
from gates.run.refs import cache_root

FINGERPRINT_PACKAGES = (
    "numpy",
    "ml_dtypes",
    "tokenizers",
    "safetensors",
    "mlx",
    "cupy-cuda12x",
    "cupy-cuda13x",
    "nvidia-cublas",  # the cuBLAS that cupy-cuda13x loads: its kernels make the bits
    "nvidia-cublas-cu12",
)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            return subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"],
                capture_output=True,
                text=True,
                timeout=5,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine()


def _nvidia_smi(field: str) -> list[str]:
    """One value of ``field`` per GPU (empty without nvidia-smi or a GPU)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    return [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]


@cache
def gpus() -> list[str]:
    """NVIDIA GPU names, one per device (empty without nvidia-smi)."""
    return _nvidia_smi("name")


@cache
def nvidia_driver() -> str:
    """The NVIDIA driver's version ("" without nvidia-smi): part of the fingerprint where
    there are GPUs, since a driver update can change what the GPU computes."""
    return next(iter(_nvidia_smi("driver_version")), "")


@cache
def machine() -> JsonObject:
    pkgs = {}
    for name in FINGERPRINT_PACKAGES:
        try:
            pkgs[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {
        "cpu": cpu_name(),
        "cores": os.cpu_count() or 1,
        "arch": platform.machine(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "packages": pkgs,
        "gpus": gpus(),
        # only where there are GPUs, so that CPU machines keep their fingerprint
        **({"nvidia_driver": nvidia_driver()} if gpus() else {}),
    }


def fingerprint(m: JsonObject | None = None) -> str:
    m = m or machine()
    # Core count is left out: arms run single-threaded on CPU, so it does not change bits.
    keyed = {k: v for k, v in m.items() if k != "cores"}
    return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:16]


def arm_key(
    engine_tree: str,
    config: JsonObject,
    requests_sha: str,
    fixtures: dict[str, str],
    machine_fp: str,
    env: dict[str, str],
) -> str:
    blob = json.dumps(
        {
            "engine_tree": engine_tree,
            "config": config,
            "requests": requests_sha,
            "fixtures": fixtures,
            "harness": HARNESS_VERSION,
            "machine": machine_fp,
            "env": env,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def write_atomic(path: Path, text: str) -> None:
    """Write a file so that a reader sees the old or the new text, never a part."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a receipt is for others to read
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)  # a failed write (a full disk) leaves no .tmp- file
        raise


class Store:
    def __init__(self, root: Path | None = None, enabled: bool = True) -> None:
        self.root = root or cache_root() / "results"
        self.enabled = enabled
        self.corrupt: list[str] = []  # keys whose entries were unreadable (re-run)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def read(self, key: str, must_have: str | None = None) -> JsonObject | None:
        """The stored value, or None. An entry that is not a JSON object (or lacks
        ``must_have``) is corrupt: it is removed, counted, and read as a miss."""
        if not self.enabled:
            return None
        path = self._path(key)
        try:
            value = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            value = None
        if isinstance(value, dict) and (must_have is None or must_have in value):
            return value
        self.drop(key)
        return None

    def drop(self, key: str) -> None:
        """Count ``key``'s entry as corrupt and remove it: the next read is a miss."""
        self.corrupt.append(key)
        with contextlib.suppress(OSError):
            self._path(key).unlink()

    def write(self, key: str, value: JsonObject) -> None:
        """Publish a result: written to a temporary file, then renamed over the entry, so a
        reader (another run, or the next one after a kill) sees all of it or nothing."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(value, f)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    @contextlib.contextmanager
    def claim(self, key: str, wait: bool) -> Iterator[bool]:
        """Hold the lock of one result key (an flock, so a killed holder releases it) while
        its arm runs and its result is published; another run of the same arm on this cache
        waits for it (``wait``) or is told it is taken (yields False) and does other work.
        With the store disabled (--no-cache) there is nothing to share: always yields True."""
        if not self.enabled:
            yield True
            return
        path = self._path(key).with_suffix(".lock")
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
