"""``python -m gates bisect --good A --bad B``: the first commit between A and B where a gate fails.

Each commit C tried is a gate run of C (head) against A (base), so ``across_commits`` gates
compare with the good commit and ``within_commit`` gates judge C alone; the result store is
shared by every step, so A's arms run once and an engine tree seen before runs no arm again.
The search walks the first-parent path from A to B by halves (``git bisect run``, ``asv
find``). A commit whose gate cannot be judged (an arm crashed, not comparable) is skipped,
as ``git bisect skip`` does: when skips are left between the last holding and the first
failing commit the answer is the range, exit 3.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import git

from gates import EXIT_ARM_FAILED, EXIT_GATE_FAILED, EXIT_OK, BadInput
from gates.jsontypes import JsonObject
from gates.judge.kinds import KINDS
from gates.judge.results import GateResult, gates_of
from gates.plan.inputs import load_inputs
from gates.report.receipt.counts import arm_counts
from gates.report.receipt.table import md_table
from gates.run import refs, store
from gates.run.results import Status, arms_of

FAILS, HOLDS, SKIP = "fails", "holds", "skip"


@dataclass
class Step:
    sha: str
    subject: str
    verdict: str  # FAILS, HOLDS or SKIP
    why: str
    counts: dict[str, int]
    wall_s: float
    receipt: str


@dataclass(frozen=True)
class Result:
    """What a bisect found: the first failing commit (None: a range of ``candidates``, the
    others skipped), the last holding one, and every step tried."""

    good: str
    bad: str
    matrix: str
    gate: str | None
    commits: int
    first_failing: str | None
    candidates: list[str]
    last_holding: str
    steps: list[Step]
    wall_s: float

    def to_json(self) -> JsonObject:
        """The bisect receipt's JSON (its keys in this order)."""
        out: JsonObject = {f.name: getattr(self, f.name) for f in fields(self)}
        out["steps"] = [asdict(s) for s in self.steps]
        return out


@dataclass
class Bisect:
    repo: git.Repo
    good: str
    bad: str
    matrix: str
    gate: str | None
    work: Path  # where each step's receipt goes
    jobs: int | None = None

    def judge(self, sha: str) -> Step:
        """One gate run of ``sha`` against the good commit (no speed, no lean)."""
        from gates.pipeline import Options, run

        t0 = time.monotonic()
        out = self.work / sha[:12]
        opts = Options(
            base=self.good,
            head=sha,
            matrix=self.matrix,
            jobs=self.jobs,
            out=str(out),
            repo=str(refs.repo_root(self.repo)),
            speed=False,
            quiet=True,
            lean=False,
        )
        with contextlib.redirect_stdout(io.StringIO()):
            code = run(opts)
        found = sorted(out.glob("*.json"))
        if not found:
            raise BadInput(f"bisect: the gate run of {sha[:12]} wrote no receipt (exit {code})")
        man = json.loads(found[-1].read_text())
        verdict, why = self._verdict(code, man.get("verdict"), gates_of(man))
        return Step(
            sha=sha,
            subject=self.repo.commit(sha).summary,
            verdict=verdict,
            why=why,
            counts=arm_counts(arms_of(man)),
            wall_s=round(time.monotonic() - t0, 1),
            receipt=str(found[-1].with_suffix(".md")),
        )

    def _verdict(self, code: int, line: str | None, gates: list[GateResult]) -> tuple[str, str]:
        """FAILS, HOLDS or SKIP, and why, from a step's exit code, its receipt's verdict line
        (None where it has none) and its gates."""
        if self.gate is None:
            if code == EXIT_GATE_FAILED:
                return FAILS, "" if line is None else line
            if code == EXIT_OK:
                return HOLDS, ""
            return SKIP, f"exit {code}" if line is None else line
        g = next(g for g in gates if g.name == self.gate)
        if g.status == Status.FAIL:
            return FAILS, ""
        if g.status == Status.PASS:
            return HOLDS, ""
        return SKIP, f"the gate is {str(g.status).replace('_', ' ')}"


def first_parent_path(repo: git.Repo, good: str, bad: str) -> list[str]:
    """The commits after ``good`` up to ``bad``, oldest first, on bad's first-parent line."""
    try:
        repo.git.merge_base("--is-ancestor", good, bad)
    except git.GitCommandError:
        raise BadInput(
            f"bisect: --good {good[:12]} is not an ancestor of --bad {bad[:12]}"
        ) from None
    line = repo.git.rev_list("--first-parent", "--reverse", f"{good}..{bad}").split()
    if not line:
        raise BadInput("bisect: --good and --bad are the same commit: nothing to bisect")
    return line


def search(b: Bisect, path: list[str], log: Any) -> tuple[list[Step], int, int, set[int]]:
    """Halve the path. Returns (steps, lo, hi, skipped): path[hi] fails, path[lo] holds
    (lo = -1: the good commit), and ``skipped`` the indexes in between that could not be judged."""
    steps: list[Step] = []

    def try_(i: int) -> Step:
        s = b.judge(path[i] if i >= 0 else b.good)
        steps.append(s)
        log(f"[bisect] {s.sha[:10]} {s.verdict}{f' ({s.why})' if s.why else ''}")
        return s

    last = try_(len(path) - 1)
    if last.verdict != FAILS:
        what = "could not be judged: " + last.why if last.verdict == SKIP else "holds"
        raise BadInput(f"bisect: the gate on --bad {b.bad[:12]} {what}; nothing to bisect")
    first = try_(-1)
    if first.verdict != HOLDS:
        what = "could not be judged: " + first.why if first.verdict == SKIP else "already fails"
        raise BadInput(f"bisect: the gate on --good {b.good[:12]} {what}")
    lo, hi, skipped = -1, len(path) - 1, set()
    while True:
        inner = [i for i in range(lo + 1, hi) if i not in skipped]
        if not inner:
            break
        mid = inner[len(inner) // 2]
        s = try_(mid)
        if s.verdict == FAILS:
            hi = mid
        elif s.verdict == HOLDS:
            lo = mid
        else:
            skipped.add(mid)
    return steps, lo, hi, {i for i in skipped if lo < i < hi}


def main(
    repo_path: str,
    good: str,
    bad: str,
    matrix: str,
    gate: str | None,
    out: str | None,
    jobs: int | None,
    log: Any,
) -> int:
    t0 = time.monotonic()
    repo = refs.open_repo(repo_path)
    root = refs.repo_root(repo)
    m = load_inputs(root, matrix, KINDS).m
    names = [g.name for g in m.gates]
    if gate is not None and gate not in names:
        raise BadInput(f"bisect: --gate {gate!r}: no such gate in {matrix} ({', '.join(names)})")
    good_sha, bad_sha = refs.resolve(repo, good), refs.resolve(repo, bad)
    path = first_parent_path(repo, good_sha, bad_sha)
    stem = f"bisect-{good_sha[:10]}..{bad_sha[:10]}.{m.name}"
    work = refs.cache_root() / "bisect" / stem
    b = Bisect(repo, good_sha, bad_sha, matrix, gate, work, jobs)
    steps, lo, hi, skipped = search(b, path, log)
    found = [path[i] for i in sorted(skipped)] + [path[hi]]
    result = Result(
        good=good_sha,
        bad=bad_sha,
        matrix=m.name,
        gate=gate,
        commits=len(path),
        first_failing=found[0] if len(found) == 1 else None,
        candidates=found,
        last_holding=path[lo] if lo >= 0 else good_sha,
        steps=steps,
        wall_s=round(time.monotonic() - t0, 1),
    )
    out_dir = Path(out) if out else root / "receipts"
    out_dir.mkdir(parents=True, exist_ok=True)
    text = markdown(result)
    store.write_atomic(out_dir / f"{stem}.json", json.dumps(result.to_json(), indent=1) + "\n")
    store.write_atomic(out_dir / f"{stem}.md", text)
    print(text, end="")
    print(f"receipt: {out_dir / f'{stem}.md'}")
    return EXIT_OK if len(found) == 1 else EXIT_ARM_FAILED


def headline(r: Result) -> str:
    what = f"`{r.gate}`" if r.gate else "a gate"
    if r.first_failing:
        return f"`{r.first_failing[:10]}` is the first commit where {what} fails"
    ids = ", ".join(f"`{c[:10]}`" for c in r.candidates)
    return f"the first commit where {what} fails is one of {ids} (the others could not be judged)"


def markdown(r: Result) -> str:
    rows = []
    for i, s in enumerate(r.steps, 1):
        c = s.counts
        arms = f"{c['run']} run, {c['cached']} from cache"
        if c["shared"]:
            arms += f", {c['shared']} reused"
        if c["not_comparable"] or c["not_run"]:
            arms += f", {c['not_comparable'] + c['not_run']} not run"
        verdict = {FAILS: "❌ fails", HOLDS: "✅ holds", SKIP: "⚠️ skipped"}[s.verdict]
        why = f": {s.why}" if s.why else ""
        subject = s.subject if len(s.subject) <= 60 else s.subject[:59] + "…"
        rows.append([i, f"`{s.sha[:10]}`", subject, verdict + why, arms, f"{s.wall_s}s"])
    tried = len(r.steps)
    return (
        f"### Gates bisect: {headline(r)}\n\n"
        f"- good `{r.good[:10]}`, bad `{r.bad[:10]}`, matrix {r.matrix}: "
        f"{r.commits} commit{'s' * (r.commits != 1)} after good on bad's first-parent "
        f"line; {tried} gate runs (each against good), {r.wall_s}s\n"
        f"- last holding: `{r.last_holding[:10]}`\n\n"
        + md_table(rows, headers=["#", "commit", "subject", "verdict", "arms", "time"])
        + "\n"
    )
