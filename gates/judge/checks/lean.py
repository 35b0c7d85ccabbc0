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
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import git

from gates import EXIT_GATE_FAILED, EXIT_OK, BadInput
from gates.jsontypes import JsonObject
from gates.run import refs

Key = tuple[str, str, str]
SHOWN = 30  # new problems kept in the manifest
_NUMBER = re.compile(r"\d+")


@dataclass(frozen=True)
class Problem:
    """One ruff problem: where (its file relative to the worktree), its rule and message."""

    file: str
    row: int | None
    column: int | None
    code: str | None
    message: str | None

    @classmethod
    def parse(cls, item: JsonObject, worktree: Path) -> Problem:
        """One item of ``ruff check --output-format json``, read."""
        file = str(item["filename"])
        with contextlib.suppress(ValueError):
            file = str(Path(file).resolve().relative_to(worktree.resolve()))
        loc = item.get("location") or {}
        return cls(file, loc.get("row"), loc.get("column"), item.get("code"), item.get("message"))

    @property
    def key(self) -> Key:
        """Its fingerprint: file, rule and the message without its numbers."""
        return self.file, str(self.code), normalise(str(self.message))


@dataclass(frozen=True)
class Lean:
    status: str  # "pass" (no new problem), "fail" (new problems), "not_run"
    merge_base: str | None = None
    inherited: int = 0
    new: int = 0
    fixed: int = 0  # problems of the merge base that head no longer has
    problems: tuple[Problem, ...] = ()  # the first SHOWN new ones
    reason: str = ""

    def to_json(self) -> JsonObject:
        return asdict(self) | {"problems": [asdict(p) for p in self.problems]}

    @classmethod
    def from_json(cls, d: JsonObject) -> Lean:
        """The manifest's ``lean`` section, as ``to_json`` wrote it."""
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["problems"] = tuple(Problem(**p) for p in d.get("problems") or [])
        return cls(**kw)


def problems(worktree: Path) -> list[Problem]:
    """ruff's problems in a worktree (paths made relative to it)."""
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
    return [Problem.parse(item, worktree) for item in json.loads(out.stdout or "[]")]


def normalise(message: str) -> str:
    return " ".join(_NUMBER.sub("N", message).split())


def compare(base: list[Problem], head: list[Problem]) -> tuple[list[Problem], int, int]:
    """(new problems on head, inherited count, fixed count)."""
    left = Counter(p.key for p in base)
    new = []
    for p in head:
        k = p.key
        if left[k] > 0:
            left[k] -= 1
        else:
            new.append(p)
    inherited = len(head) - len(new)
    return new, inherited, len(base) - inherited


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
        problems=tuple(new[:SHOWN]),
    )


def lean_of(man: JsonObject) -> Lean | None:
    """A manifest's lean section, typed (None where the run had none)."""
    d = man.get("lean")
    return Lean.from_json(d) if d else None


def lean_counts(lean: Lean) -> str:
    """ "N inherited, M new (K fixed)", or why lean did not run."""
    if lean.status == "not_run":
        return f"not run: {lean.reason}"
    fixed = f" ({lean.fixed} fixed)" if lean.fixed else ""
    return f"{lean.inherited} inherited, {lean.new} new{fixed}"


def lean_line(lean: Lean | None) -> str:
    """The receipt's Lean line: ruff problems on head against the merge base."""
    if lean is None:
        return ""
    if lean.status == "not_run":
        return f"➖ {lean_counts(lean)}"
    mark = "✅" if lean.status == "pass" else "❌"
    return (
        f"{mark} {lean_counts(lean)} — ruff problems on head against "
        f"the merge base `{(lean.merge_base or '')[:10]}` (matched by rule, file and "
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
    counts = lean_counts(lean)
    print(f"Lean: {mark} {counts} — head {h.sha[:10]} against merge base {mb[:10]} (ruff)")
    for p in lean.problems:
        print(f"  {p.file}:{p.row}:{p.column}: {p.code} {p.message}")
    if lean.new > len(lean.problems):
        print(f"  … and {lean.new - len(lean.problems)} more")
    return EXIT_OK if not lean.new else EXIT_GATE_FAILED
