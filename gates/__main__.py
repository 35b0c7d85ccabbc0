"""python -m gates run | merge | lean | show | selftest | clean | bisect"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gates import EXIT_BAD_INPUT, BadInput


def _run(a: argparse.Namespace) -> int:
    from gates.pipeline import Options, run

    return run(
        Options(
            base=a.base,
            head=a.head,
            matrix=a.matrix,
            jobs=a.jobs,
            out=a.out,
            no_cache=a.no_cache,
            repo=a.repo,
            speed=not a.no_speed,
            quiet=a.quiet,
            shard=a.shard,
            lean=not a.no_lean,
            accept=a.accept,
            executor=a.executor,
            address=a.address,
        )
    )


def _merge(a: argparse.Namespace) -> int:
    from gates.report.merge import main as merge_main

    return merge_main(a.manifests, a.repo, a.out)


def _jobs(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return n


def _shard_arg(text: str) -> tuple[int, int]:
    from gates.run.shard import parse

    try:
        return parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _show(a: argparse.Namespace) -> int:
    from gates.report.receipt import render
    from gates.report.view import Manifest
    from gates.run.refs import open_repo, repo_root

    path = Path(a.receipt) if a.receipt else None
    if path is None:
        folder = repo_root(open_repo(a.repo)) / "receipts"
        found = sorted(
            (p for p in folder.glob("*.json") if ".shard-" not in p.name),
            key=lambda p: p.stat().st_mtime,
        )
        if not found:
            raise BadInput(f"{folder}: no receipts yet; run `python -m gates run` first")
        path = found[-1]
    if path.suffix == ".md":
        path = path.with_suffix(".json")
    try:
        man = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise BadInput(f"{path}: not a receipt manifest: {e}") from None
    if not isinstance(man, dict) or "gates" not in man:
        raise BadInput(f"{path}: not a receipt manifest (a shard? join shards with `merge`)")
    print(
        render.summary(Manifest.parse(man)) if a.summary else render.markdown(Manifest.parse(man)),
        end="" if not a.summary else "\n",
    )
    return int(man.get("exit_code", 0))


def _clean(a: argparse.Namespace) -> int:
    from gates.pipeline import open_repo_or_none
    from gates.run.refs import cache_root, clean

    removed = clean(open_repo_or_none(a.repo), everything=not a.keep_results)
    if a.keep_results:
        print(f"removed {len(removed)} worktree(s); results kept in {cache_root()}")
    else:
        print(f"removed {len(removed) - 1 if removed else 0} worktree(s) and {cache_root()}")
    return 0


def _bisect(a: argparse.Namespace) -> int:
    from gates.bisect import main as bisect_main
    from gates.pipeline import log

    return bisect_main(a.repo, a.good, a.bad, a.matrix, a.gate, a.out, a.jobs, log)


def _lean(a: argparse.Namespace) -> int:
    from gates.judge.checks.lean import main as lean_main

    return lean_main(a.repo, a.base, a.head)


def _selftest(a: argparse.Namespace) -> int:
    if a.power:
        from gates.power.run import main as power_main

        return power_main(a.repo, matrix=a.matrix, only=a.only, jobs=a.jobs, ref=a.ref, out=a.out)
    from gates.selftest import main as selftest_main

    return selftest_main(
        a.repo,
        model=a.model,
        backend=a.backend,
        max_tokens=a.max_tokens,
        prompt_set=a.prompts,
        ref=a.ref,
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gates",
        description="Run gate matrices between two commits of the engine and write a receipt.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--repo", default=".", help="the repository (default: the one around the current folder)"
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    _run_parser(sub, common)
    _other_parsers(sub, common)
    _selftest_parser(sub, common)
    return p


Subparsers = argparse._SubParsersAction


def _run_parser(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    r = sub.add_parser("run", parents=[common], help="run a matrix between --base and --head")
    r.add_argument("--base", default="main", help="git ref (default: main)")
    r.add_argument(
        "--head",
        default="HEAD",
        help="git ref, or WORKTREE for the uncommitted tree (default: HEAD)",
    )
    r.add_argument(
        "--matrix",
        default="matrices/quick.yaml",
        help="matrix file, or a name under matrices/ (default: matrices/quick.yaml)",
    )
    r.add_argument(
        "--jobs",
        type=_jobs,
        default=None,
        help="arms at once (default: CPU count; on a CUDA backend: per GPU, default 1)",
    )
    r.add_argument("--out", default=None, help="receipt folder (default: receipts/)")
    r.add_argument("--no-cache", action="store_true", help="run every arm again")
    r.add_argument("--no-speed", action="store_true", help="skip the matrix's speed gates")
    r.add_argument(
        "--no-lean", action="store_true", help="skip the new ruff problems against the merge base"
    )
    r.add_argument("--quiet", action="store_true", help="no progress on stderr")
    r.add_argument(
        "--accept",
        default=None,
        metavar="FILE",
        help="accepted slower speed cells, JSON [{cell, by, via}] "
        "(python -m gates.report.github accept)",
    )
    r.add_argument(
        "--shard",
        type=_shard_arg,
        default=None,
        metavar="I/N",
        help="run only shard I of N of the arms and write a shard manifest (join with merge)",
    )
    r.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="where arms run: this machine (default) or Ray tasks (docs/ray.md; extra [ray])",
    )
    r.add_argument(
        "--address",
        default=None,
        help="--executor ray: the cluster (auto, ray://HOST:10001; default: a local Ray)",
    )
    r.set_defaults(fn=_run)


def _other_parsers(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    mg = sub.add_parser(
        "merge", parents=[common], help="join the shard manifests of one run into one receipt"
    )
    mg.add_argument("manifests", nargs="*", metavar="MANIFEST", help="shard manifests (.json)")
    mg.add_argument("--out", default=None, help="receipt folder (default: receipts/)")
    mg.set_defaults(fn=_merge)

    s = sub.add_parser(
        "show", parents=[common], help="print a receipt (default: the newest) from its manifest"
    )
    s.add_argument("receipt", nargs="?", help="a receipt .json or .md")
    s.add_argument("--summary", action="store_true", help="the short summary only")
    s.set_defaults(fn=_show)

    c = sub.add_parser("clean", parents=[common], help="remove the cached worktrees and results")
    c.add_argument("--keep-results", action="store_true", help="remove worktrees only")
    c.set_defaults(fn=_clean)

    ln = sub.add_parser(
        "lean", parents=[common], help="new ruff problems on --head against the merge base"
    )
    ln.add_argument("--base", default="main")
    ln.add_argument("--head", default="HEAD")
    ln.set_defaults(fn=_lean)

    b = sub.add_parser(
        "bisect",
        parents=[common],
        help="the first commit between --good and --bad where a gate fails",
    )
    b.add_argument("--good", required=True, help="a commit where the gates hold")
    b.add_argument("--bad", required=True, help="a later commit where the gate fails")
    b.add_argument("--gate", default=None, help="the gate's name (default: any gate fails)")
    b.add_argument("--matrix", default="matrices/quick.yaml")
    b.add_argument("--jobs", type=int, default=None, help="arms at once")
    b.add_argument("--out", default=None, help="receipt folder (default: receipts/)")
    b.set_defaults(fn=_bisect)


def _selftest_parser(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    t = sub.add_parser(
        "selftest",
        parents=[common],
        help="a positive and a negative control on the bundled model: can the "
        "harness still see a difference?",
    )
    t.add_argument("--model", default="fixtures/models/tiny-qwen3")
    t.add_argument("--backend", default="numpy")
    t.add_argument("--max-tokens", type=int, default=8)
    t.add_argument("--prompts", default="quick", help="prompt set (default: quick)")
    t.add_argument("--ref", default="HEAD", help="whose engine (default: HEAD; or WORKTREE)")
    t.add_argument(
        "--power",
        action="store_true",
        help="plant known bug classes (and no-op changes) into a clone of --ref and count "
        "what the gate matrix catches",
    )
    t.add_argument("--matrix", default="matrices/quick.yaml", help="--power: the gate matrix")
    t.add_argument("--only", default=None, help="--power: plant names, comma-separated")
    t.add_argument("--jobs", type=_jobs, default=None, help="--power: arms at once per gate run")
    t.add_argument("--out", default=None, help="--power: also write the Markdown table here")
    t.set_defaults(fn=_selftest)


def _glue_refs(argv: list[str]) -> list[str]:
    """``--head -x`` -> ``--head=-x``, so a ref that looks like an option gets a clear error."""
    out: list[str] = []
    it = iter(argv)
    for a in it:
        if a in ("--base", "--head", "--good", "--bad"):
            nxt = next(it, None)
            out.append(a if nxt is None else f"{a}={nxt}")
        else:
            out.append(a)
    return out


def main(argv: list[str] | None = None) -> int:
    from gates.run.procs import Terminated, own_children

    own_children()  # SIGTERM/SIGHUP unwind like Ctrl-C; no engine process outlives the runner
    try:
        args = parser().parse_args(_glue_refs(sys.argv[1:] if argv is None else argv))
    except SystemExit as e:  # argparse: usage errors are bad input too
        return int(e.code or 0)
    try:
        return args.fn(args)
    except BadInput as e:
        print(f"gates: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as e:
        print("\ngates: interrupted; finished arms are kept in the cache", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    finally:
        from gates.run.refs import release

        release()  # the worktrees this command used may be pruned by other runs now


if __name__ == "__main__":
    sys.exit(main())
