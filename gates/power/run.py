"""The power check's harness: clone, plant, run the gate matrix per plant, tabulate.

For each plant a commit is made on top of the clean commit in a temporary clone, and
``python -m gates run --repo CLONE --base CLEAN --head PLANTED --no-speed`` runs as a
subprocess with the shared results cache (so the clean side's arms run once).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from gates import EXIT_ARM_FAILED, EXIT_BAD_INPUT, EXIT_GATE_FAILED, EXIT_OK, BadInput
from gates.jsontypes import JsonObject
from gates.judge.results import gates_of
from gates.power import plants as catalog
from gates.power.plants import Plant
from gates.run import refs
from gates.run.results import Status
from gates.run.speed.results import speed_of

PLANT_TIMEOUT_S = 1800
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "gates-power",
    "GIT_AUTHOR_EMAIL": "gates-power@localhost",
    "GIT_COMMITTER_NAME": "gates-power",
    "GIT_COMMITTER_EMAIL": "gates-power@localhost",
}


@dataclass
class Outcome:
    plant: Plant
    verdict: str  # caught | caught (an arm crashed) | MISSED | clean | FALSE ALARM | ...
    gates: list[str] = field(default_factory=list)
    seconds: float = 0.0
    code: int | None = None  # the gate run's exit code (None: it did not run)
    detail: str = ""

    @property
    def bug(self) -> bool:
        return not self.plant.noop

    @property
    def applied(self) -> bool:
        return not self.verdict.startswith("does not apply")


def verdict_for(noop: bool, code: int) -> str:
    """A gate run's exit code -> the plant's verdict."""
    if code == EXIT_BAD_INPUT or code not in (EXIT_OK, EXIT_GATE_FAILED, EXIT_ARM_FAILED):
        return "harness error"
    if noop:
        return "clean" if code == EXIT_OK else "FALSE ALARM"
    if code == EXIT_GATE_FAILED:
        return "caught"
    if code == EXIT_ARM_FAILED:
        return "caught (an arm crashed)"
    return "MISSED"


def failed_gates(manifest: JsonObject) -> list[str]:
    gates = gates_of(manifest) if manifest.get("gates") else []
    names = [g.name for g in gates if g.status == Status.FAIL]
    sp = speed_of(manifest)
    if sp and sp.status == Status.FAIL:
        names.append("speed")
    if not names:
        names = [f"{g.name} (could not run)" for g in gates if g.status == Status.COULD_NOT_RUN]
    return names


def exit_code(outcomes: list[Outcome]) -> int:
    """0 only if every bug is caught, no no-op raised an alarm and every plant applied."""
    ok = all(
        o.verdict in (("clean",) if o.plant.noop else ("caught", "caught (an arm crashed)"))
        for o in outcomes
    )
    return EXIT_OK if ok and outcomes else EXIT_GATE_FAILED


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(outcomes: list[Outcome], header: str = "") -> str:
    """The Markdown report: a table of plants, then the totals."""
    lines = [header, ""] if header else []
    lines += [
        "| class | what was planted | verdict | gates that failed | seconds |",
        "| --- | --- | --- | --- | ---: |",
    ]
    for o in outcomes:
        icon = {"caught": "✅", "clean": "✅", "MISSED": "❌", "FALSE ALARM": "❌"}.get(
            o.verdict, "✅" if o.verdict.startswith("caught") else "⚠️"
        )
        gates = ", ".join(o.gates) or (o.detail if o.detail else "—")
        lines.append(
            f"| `{o.plant.name}` | {_cell(o.plant.what)} | {icon} {o.verdict} | "
            f"{_cell(gates)} | {o.seconds:.0f} |"
        )
    bugs = [o for o in outcomes if o.bug and o.applied]
    caught = [o for o in bugs if o.verdict.startswith("caught")]
    noops = [o for o in outcomes if o.plant.noop and o.applied]
    alarms = [o for o in noops if o.verdict == "FALSE ALARM"]
    lines += [
        "",
        f"caught {len(caught)} of {len(bugs)} bug classes; {len(alarms)} false alarm"
        f"{'s' * (len(alarms) != 1)} over {len(noops)} no-op change{'s' * (len(noops) != 1)}",
    ]
    skipped = [o.plant.name for o in outcomes if not o.applied]
    if skipped:
        lines.append(f"did not apply (anchor not found): {', '.join(skipped)}")
    errors = [o.plant.name for o in outcomes if o.verdict == "harness error"]
    if errors:
        lines.append(f"harness errors: {', '.join(errors)}")
    return "\n".join(lines) + "\n"


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **_GIT_ENV}
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def make_commits(clone: Path, clean: str, chosen: list[Plant]) -> dict[str, tuple[str | None, str]]:
    """Plant name -> (planted commit sha, or None and why it does not apply)."""
    out: dict[str, tuple[str | None, str]] = {}
    for p in chosen:
        _git(clone, "checkout", "--quiet", "--force", "--detach", clean)
        problems = catalog.anchor_problems(p, clone)
        if problems:
            out[p.name] = (None, "; ".join(problems))
            continue
        files = catalog.apply(p, clone)
        _git(clone, "add", "--", *files)
        _git(clone, "commit", "--quiet", "--no-verify", "-m", f"power plant: {p.name}\n\n{p.what}")
        out[p.name] = (_git(clone, "rev-parse", "HEAD"), "")
    _git(clone, "checkout", "--quiet", "--force", "--detach", clean)
    return out


def run_one(
    clone: Path, clean: str, planted: str, matrix: str, jobs: int | None, out_dir: Path
) -> tuple[int, list[str], str]:
    """One gate run: (exit code, failing gate names, a tail of its output on trouble)."""
    cmd = [sys.executable, "-m", "gates", "run", "--repo", str(clone), "--base", clean]
    cmd += ["--head", planted, "--matrix", matrix, "--no-speed", "--no-lean"]
    cmd += ["--quiet", "--out", str(out_dir)]
    if jobs:
        cmd += ["--jobs", str(jobs)]
    here = Path(__file__).resolve().parents[2]  # this gate runner, not the clone's copy
    env = {**os.environ, "PYTHONPATH": str(here)}
    try:
        done = subprocess.run(
            cmd, cwd=here, env=env, capture_output=True, text=True, timeout=PLANT_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return -1, [], f"the gate run took over {PLANT_TIMEOUT_S}s"
    tail = (done.stdout + done.stderr).strip()[-400:]
    found = sorted(out_dir.glob("*.json"))
    if not found:
        return done.returncode, [], tail
    try:
        failed = failed_gates(json.loads(found[-1].read_text()))
    except (OSError, ValueError) as e:  # JSONDecodeError, or a gate record it cannot read
        return done.returncode, [], f"manifest unreadable: {e}"
    return done.returncode, failed, tail


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(
    repo_path: str,
    matrix: str = "matrices/quick.yaml",
    only: str | None = None,
    jobs: int | None = None,
    ref: str = "HEAD",
    out: str | None = None,
) -> int:
    t0 = time.monotonic()
    try:
        chosen = catalog.select(only)
    except ValueError as e:
        raise BadInput(f"selftest --power: {e}") from None
    repo = refs.open_repo(repo_path)
    root = refs.repo_root(repo)
    if ref == refs.WORKTREE:
        raise BadInput("selftest --power clones a commit: commit your changes, or give --ref")
    clean = refs.resolve(repo, ref)
    dirty = bool(repo.git.status("--porcelain", "--untracked-files=no"))
    header = (
        f"Power check: {len(chosen)} plants on a clone of {clean[:10]} ({ref}), matrix {matrix}"
        + (" — uncommitted changes in your tree are NOT included" if dirty else "")
    )
    _log(f"[power] {header}")
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="gates-power-") as tmp:
        clone = Path(tmp) / "repo"
        subprocess.run(
            ["git", "clone", "--quiet", "--no-checkout", str(root), str(clone)],
            check=True,
            capture_output=True,
        )
        commits = make_commits(clone, clean, chosen)
        try:
            for i, p in enumerate(chosen, 1):
                sha, why = commits[p.name]
                if sha is None:
                    o = Outcome(p, "does not apply (anchor not found)", detail=why)
                else:
                    t = time.monotonic()
                    code, names, tail = run_one(
                        clone, clean, sha, matrix, jobs, Path(tmp) / "receipts" / p.name
                    )
                    v = verdict_for(p.noop, code)
                    o = Outcome(p, v, names, time.monotonic() - t, code)
                    if v == "harness error":
                        o.detail = f"exit {code}: {tail}"
                outcomes.append(o)
                extra = f" ({', '.join(o.gates)})" if o.gates else ""
                extra += f" — {o.detail}" if o.detail and not o.gates else ""
                _log(f"[power] {i}/{len(chosen)} {p.name}: {o.verdict}{extra} {o.seconds:.0f}s")
        finally:
            refs.clean(refs.open_repo(clone), everything=False)
    text = render(outcomes, header) + f"\n({time.monotonic() - t0:.0f}s in all)\n"
    print(text, end="")
    if out:
        Path(out).write_text(text)
    return exit_code(outcomes)
