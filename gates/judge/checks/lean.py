"""Lean: ruff problems that are new on head against the merge base.

ruff runs in a worktree of each commit with that commit's own configuration. A problem is
fingerprinted by (file, rule, normalised message): the message with every number replaced by
``N`` and runs of whitespace collapsed, and no line number, so code that merely moved, or a
long line whose length changed, is not new. Fingerprints are counted as a multiset: a head
problem matched by one on the merge base is *inherited*, the rest are *new*.

``python -m gates lean``: exit 0 no new problem, 1 new problems, 2 bad input. In the receipt
(``python -m gates run``) it is a section of its own and does not change the exit code: the
lint session already keeps the tree ruff-clean.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import git

from gates import EXIT_GATE_FAILED, EXIT_OK, BadInput
from gates.run import refs

Key = tuple[str, str, str]
SHOWN = 30  # new problems kept in the manifest
_NUMBER = re.compile(r"\d+")


@dataclass
class Lean:
    status: str  # "pass" (no new problem), "fail" (new problems), "not_run"
    merge_base: str | None = None
    inherited: int = 0
    new: int = 0
    fixed: int = 0  # problems of the merge base that head no longer has
    problems: list[dict[str, Any]] = field(default_factory=list)  # the first SHOWN new ones
    reason: str = ""


def problems(worktree: Path) -> list[dict[str, Any]]:
    """ruff's JSON problems in a worktree (paths made relative to it)."""
    argv = [sys.executable, "-m", "ruff", "check", "--output-format", "json", "--no-cache"]
    try:
        out = subprocess.run(
            [*argv, "--exit-zero", "."], cwd=worktree, capture_output=True, text=True, timeout=600
        )
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


def normalise(message: str) -> str:
    return " ".join(_NUMBER.sub("N", message).split())


def key(p: dict[str, Any]) -> Key:
    return p["filename"], str(p.get("code")), normalise(str(p.get("message")))


def compare(
    base: list[dict[str, Any]], head: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], int, int]:
    """(new problems on head, inherited count, fixed count)."""
    left = Counter(key(p) for p in base)
    new = []
    for p in head:
        k = key(p)
        if left[k] > 0:
            left[k] -= 1
        else:
            new.append(p)
    inherited = len(head) - len(new)
    return new, inherited, len(base) - inherited


def _brief(p: dict[str, Any]) -> dict[str, Any]:
    loc = p.get("location") or {}
    return {
        "file": p["filename"],
        "row": loc.get("row"),
        "column": loc.get("column"),
        "code": p.get("code"),
        "message": p.get("message"),
    }


def check(repo: git.Repo, merge_base: str | None, head: refs.Side) -> Lean:
    """Lean of head against the merge base; ``not_run`` (with the reason) where it cannot run."""
    if merge_base is None:
        return Lean("not_run", reason="base and head have no merge base")
    try:
        base_tree = refs.ensure_worktree(repo, merge_base)
        head_tree = head.worktree or refs.ensure_worktree(repo, head.sha)
        new, inherited, fixed = compare(problems(base_tree), problems(head_tree))
    except BadInput as e:
        return Lean("not_run", merge_base, reason=str(e).removeprefix("lean: "))
    return Lean(
        "fail" if new else "pass",
        merge_base,
        inherited=inherited,
        new=len(new),
        fixed=fixed,
        problems=[_brief(p) for p in new[:SHOWN]],
    )


def as_json(lean: Lean) -> dict[str, Any]:
    return asdict(lean)


def lean_counts(lean: dict[str, Any]) -> str:
    """ "N inherited, M new (K fixed)", or why lean did not run."""
    if lean["status"] == "not_run":
        return f"not run: {lean['reason']}"
    fixed = f" ({lean['fixed']} fixed)" if lean.get("fixed") else ""
    return f"{lean['inherited']} inherited, {lean['new']} new{fixed}"


def lean_line(lean: dict[str, Any] | None) -> str:
    """The receipt's Lean line: ruff problems on head against the merge base."""
    if not lean:
        return ""
    if lean["status"] == "not_run":
        return f"➖ {lean_counts(lean)}"
    mark = "✅" if lean["status"] == "pass" else "❌"
    return (
        f"{mark} {lean_counts(lean)} — ruff problems on head against "
        f"the merge base `{(lean.get('merge_base') or '')[:10]}` (matched by rule, file and "
        "message, not by line)"
    )


def main(repo_path: str, base: str, head: str) -> int:
    repo = refs.open_repo(repo_path)
    b = refs.side(repo, "base", base)
    h = refs.side(repo, "head", head)
    mb = refs.merge_base(repo, b.sha, h.sha)
    if mb is None:
        raise BadInput(f"lean: {base} and {head} have no merge base")
    lean = check(repo, mb, h)
    if lean.status == "not_run":
        raise BadInput(f"lean: {lean.reason}")
    mark = "✅" if not lean.new else "❌"
    counts = lean_counts(as_json(lean))
    print(f"Lean: {mark} {counts} — head {h.sha[:10]} against merge base {mb[:10]} (ruff)")
    for p in lean.problems:
        print(f"  {p['file']}:{p['row']}:{p['column']}: {p['code']} {p['message']}")
    if lean.new > len(lean.problems):
        print(f"  … and {lean.new - len(lean.problems)} more")
    return EXIT_OK if not lean.new else EXIT_GATE_FAILED
