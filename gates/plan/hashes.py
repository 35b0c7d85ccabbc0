"""Content hashes of the plan's inputs (a matrix, a prompt set, a model directory): a
result's key and a shard's identity name the exact bytes they were made from."""

from __future__ import annotations

import hashlib
from pathlib import Path


def hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def hash_dir(path: Path) -> str:
    """Content hash of a directory (relative names and bytes of every file)."""
    h = hashlib.sha256()
    if path.is_file():
        return hash_file(path)
    for p in sorted(q for q in path.rglob("*") if q.is_file() and "__pycache__" not in q.parts):
        h.update(str(p.relative_to(path)).encode() + b"\0" + hash_file(p).encode() + b"\n")
    return h.hexdigest()
