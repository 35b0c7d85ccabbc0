"""Calibrate the speed gates: false alarms of no-op comparisons, power against planted slowdowns.

    python -m gates.speed_calibrate --base main --noop --tries 20
    python -m gates.speed_calibrate --base main --noop --plant 0.05 --tries 20

``--noop`` compares ``--base`` with a commit of the same tree (a separate worktree, so
separate processes and paths; the commit object is made with ``git commit-tree`` and no
ref points at it). ``--plant F`` sets ``ENGINE_CALIBRATE_SLOWDOWN=F`` on the head side only
(each engine action busy-waits for F of its CPU time, engine/lanes/calibrate.py): this
script is the only place that sets it. Each try runs the speed part of ``--matrix`` once
(the same ABBA runner and verdicts as ``python -m gates run``) and appends one JSON line to
``--out``; the summary counts tries with a *slower* cell and cells that were slower.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from gates.judge.kinds import KINDS
from gates.run.results import Status
from gates.run.speed import measure
from gates.run.speed.results import SpeedRun, Verdict

DECODE = "decode_cpu_s_per_token"
SIDES = ("base", "head")


def noop_commit(repo, base_sha: str) -> str:  # type: ignore[no-untyped-def]
    """A commit with base's tree and base as parent: the same code, another worktree."""
    tree = repo.git.rev_parse(f"{base_sha}^{{tree}}")
    return repo.git.commit_tree(tree, "-p", base_sha, "-m", "gates: calibration no-op")


def summarize(paths: list[str]) -> str:
    """Tries, tries with a slower cell, slower cells, and the spread of the decode speeds."""
    lines = []
    for path in paths:
        recs = [json.loads(line) for line in Path(path).read_text().splitlines() if line]
        if not recs:
            lines.append(f"{path}: no tries")
            continue
        runs = [SpeedRun.from_json(r) for r in recs]
        slower = [r for r in runs if r.verdicts().get(Verdict.SLOWER)]
        n_cells = sum(len(r.cells) for r in runs)
        n_slow = sum(r.verdicts().get(Verdict.SLOWER, 0) for r in runs)
        speeds = sorted(c.speed for r in runs for c in r.cells if c.metric == DECODE)
        blocks = sorted(r.blocks for r in runs)
        walls = sorted(r.wall_s for r in runs)
        loads = sorted(
            x
            for r in runs
            for b in r.samples
            for x in (b.load_before, b.load_after)
            if x is not None
        )
        load = f"; load average {loads[0]:.1f}..{loads[-1]:.1f}" if loads else ""
        mid = f"{speeds[len(speeds) // 2]:.3f}" if speeds else "-"
        span = f"{speeds[0]:.3f}..{speeds[-1]:.3f} (median {mid})" if speeds else "-"
        lines.append(
            f"{path}: plant {recs[0].get('plant', '-')}: {len(slower)}/{len(runs)} tries "
            f"with a slower cell, {n_slow}/{n_cells} cells slower; decode CPU speed {span}; "
            f"blocks {blocks[0]}..{blocks[-1]}; {walls[0]:.0f}..{walls[-1]:.0f} s{load}"
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gates.speed_calibrate", description=__doc__)
    p.add_argument("--repo", default=".")
    p.add_argument("--matrix", default="matrices/default.yaml")
    p.add_argument("--base", default="HEAD")
    p.add_argument("--head", default=None, help="a ref; or --noop")
    p.add_argument("--noop", action="store_true", help="head = base's tree as another commit")
    p.add_argument("--plant", type=float, default=0.0, help="ENGINE_CALIBRATE_SLOWDOWN on head")
    p.add_argument("--tries", type=int, default=20)
    p.add_argument("--out", default=None, help="append one JSON line per try")
    p.add_argument(
        "--dirs",
        nargs=2,
        metavar=("BASE_DIR", "HEAD_DIR"),
        help="two engine trees (copies) instead of refs: no git needed",
    )
    p.add_argument(
        "--speed",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key of the matrix's speed section (YAML value), e.g. parallel=[1]",
    )
    p.add_argument("--summary", nargs="+", metavar="OUT", help="summarize --out files, run nothing")
    return p


def _sides(a: argparse.Namespace, p: argparse.ArgumentParser) -> tuple[Path, dict[str, Path]]:
    """The repository root and the two engine trees: --dirs, or worktrees of the refs."""
    if a.dirs:
        trees = {s: Path(d).resolve() for s, d in zip(SIDES, a.dirs, strict=True)}
        return Path(a.repo).resolve(), trees
    from gates.run import refs

    if bool(a.head) == a.noop:
        p.error("give exactly one of --head REF and --noop")
    repo = refs.open_repo(a.repo)
    base = refs.resolve(repo, a.base)
    head = noop_commit(repo, base) if a.noop else refs.resolve(repo, a.head)
    trees = {"base": refs.ensure_worktree(repo, base), "head": refs.ensure_worktree(repo, head)}
    return refs.repo_root(repo), trees


def _report(
    i: int, a: argparse.Namespace, got: SpeedRun, secs: float, sides: dict[str, Path]
) -> list[str]:
    slower = [f"{c.metric}@{c.parallel}" for c in got.cells if c.verdict is Verdict.SLOWER]
    counts = {str(v): n for v, n in sorted(got.verdicts().items())}
    print(
        f"try {i + 1}/{a.tries}: {got.status} blocks {got.blocks} {secs:.0f}s {counts} "
        f"slower: {slower}",
        flush=True,
    )
    if a.out:
        rec = {"base": str(sides["base"]), "head": str(sides["head"]), "noop": a.noop}
        rec.update(plant=a.plant, matrix=a.matrix, overrides=a.speed, tries=i, **got.to_json())
        with open(a.out, "a") as f:
            f.write(json.dumps(rec, default=str) + "\n")
    return slower


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    a = p.parse_args(argv)
    if a.summary:
        print(summarize(a.summary))
        return 0
    from gates.plan import matrix

    root, sides = _sides(a, p)
    m = matrix.load(root / a.matrix if not Path(a.matrix).is_absolute() else a.matrix, KINDS)
    if m.speed is None:
        p.error(f"{a.matrix} has no speed section")
    try:
        spec = measure.override(m.speed, a.speed)
    except ValueError as e:
        p.error(str(e))
    model = Path(m.axes["model"][0])
    model = model if model.is_absolute() else root / model
    cache = Path(os.environ.get("GATES_CACHE", Path.home() / ".cache" / "exact-gates"))
    plant = {"ENGINE_CALIBRATE_SLOWDOWN": str(a.plant)} if a.plant else None
    any_slower = cells_slower = cells_total = 0
    for i in range(a.tries):
        t0 = time.monotonic()
        got = measure.run_speed(sides, model, m.axes["backend"][0], spec, cache, plant=plant)
        if got.status not in (Status.PASS, Status.FAIL):
            print(f"try {i + 1}: {got.status}: {got.reason}", file=sys.stderr)
            return 3
        slower = _report(i, a, got, time.monotonic() - t0, sides)
        any_slower += bool(slower)
        cells_slower += len(slower)
        cells_total += len(got.cells)
    print(
        f"{a.tries} tries, plant {a.plant}: {any_slower} with a slower cell; "
        f"{cells_slower}/{cells_total} cells slower"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
