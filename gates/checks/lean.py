"""``python -m gates lean``: ruff problems that are new on head against the merge base.

ruff runs in a worktree of each commit with that commit's own configuration. A problem is
identified by (file, rule, message, the text of its line), not by line number, so code
that merely moved is not new. Exit 0: no new problem; 1: new problems; 2: bad input.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from gates import EXIT_GATE_FAILED, EXIT_OK, BadInput, refs

Key = tuple[str, str, str, str]


def problems(worktree: Path) -> list[dict[str, Any]]:
    """ruff's JSON problems in a worktree (paths made relative to it)."""
    argv = [
        sys.executable,
        "-m",
        "ruff",
        "check",
        "--output-format",
        "json",
        "--no-cache",
        "--exit-zero",
        ".",
    ]
    try:
        out = subprocess.run(argv, cwd=worktree, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        raise BadInput(f"lean: cannot run ruff: {e}") from None
    if out.returncode != 0:
        if "No module named ruff" in out.stderr:
            raise BadInput("lean: ruff is not installed (pip install ruff)")
        raise BadInput(f"lean: ruff failed in {worktree}: {out.stderr.strip()[-400:]}")
    items = json.loads(out.stdout or "[]")
    for p in items:
        with contextlib.suppress(ValueError):
            p["filename"] = str(Path(p["filename"]).resolve().relative_to(worktree.resolve()))
    return items


def key(p: dict[str, Any], worktree: Path) -> Key:
    row = (p.get("location") or {}).get("row", 0)
    try:
        line = (worktree / p["filename"]).read_text(errors="replace").splitlines()[row - 1]
    except (OSError, IndexError):
        line = ""
    return p["filename"], str(p.get("code")), str(p.get("message")), line.strip()


def new_problems(base: Path, head: Path) -> tuple[list[dict[str, Any]], int, int]:
    """(problems on head beyond those on base, count on base, count on head)."""
    bp, hp = problems(base), problems(head)
    left = Counter(key(p, base) for p in bp)
    new = []
    for p in hp:
        k = key(p, head)
        if left[k] > 0:
            left[k] -= 1
        else:
            new.append(p)
    return new, len(bp), len(hp)


def main(repo_path: str, base: str, head: str) -> int:
    repo = refs.open_repo(repo_path)
    b = refs.side(repo, "base", base)
    h = refs.side(repo, "head", head)
    mb = refs.merge_base(repo, b.sha, h.sha)
    if mb is None:
        raise BadInput(f"lean: {base} and {head} have no merge base")
    new, n_base, n_head = new_problems(
        refs.ensure_worktree(repo, mb), refs.ensure_worktree(repo, h.sha)
    )
    mark = "✅" if not new else "❌"
    print(
        f"Lean: {mark} {len(new)} new problem{'s' * (len(new) != 1)} on head "
        f"{h.sha[:10]} against merge base {mb[:10]} (ruff: {n_base} there, {n_head} on head)"
    )
    for p in new:
        loc = p.get("location") or {}
        print(
            f"  {p['filename']}:{loc.get('row')}:{loc.get('column')}: {p.get('code')} "
            f"{p.get('message')}"
        )
    return EXIT_OK if not new else EXIT_GATE_FAILED
