"""``python -m gates run``: refs -> worktrees -> arms (cached or run) -> gates -> receipt."""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git

from gates import EXIT_OK, BadInput
from gates.judge.checks import lean
from gates.judge.kinds import KINDS
from gates.plan import matrix
from gates.plan.inputs import Inputs, load_inputs, rel
from gates.report import accept
from gates.report.manifest import receipts_writable, report
from gates.run import contract, envs, executors, refs, shard, store, validate
from gates.run.arms import ArmRunner
from gates.run.capabilities import Capabilities
from gates.run.execute import GPU_BACKENDS, capabilities
from gates.run.info import RunInfo, SideFacts
from gates.run.results import Status
from gates.run.speed.measure import run_speed
from gates.run.speed.results import SpeedRun


@dataclass
class Options:
    base: str = "main"
    head: str = "HEAD"
    matrix: str = "matrices/quick.yaml"
    jobs: int | None = None
    out: str | None = None
    no_cache: bool = False
    repo: str = "."
    speed: bool = True
    quiet: bool = False
    shard: tuple[int, int] | None = None  # (i, n): run only shard i of n
    lean: bool = True  # new ruff problems against the merge base, as a receipt section
    accept: str | None = None  # a file of accepted slower speed cells (gates/report/accept.py)
    executor: str = "local"  # where arms run: local, or ray (gates/run/executors)
    address: str | None = None  # --executor ray: the cluster (None: a local Ray instance)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def workers(backend_set: set[str], jobs: int | None) -> tuple[int, list[str] | None]:
    """(pool size, GPU device list or None). On a CUDA backend each arm gets one GPU
    (CUDA_VISIBLE_DEVICES), ``jobs`` arms at once on each (default 1): an arm's bits do
    not depend on what else runs on its GPU, only its timing does."""
    if backend_set & set(GPU_BACKENDS):
        env = os.environ.get("CUDA_VISIBLE_DEVICES")
        devices = (
            [d.strip() for d in env.split(",") if d.strip()]
            if env
            else [str(i) for i in range(len(store.gpus()))]
        )
        if devices:
            slots = [d for _ in range(max(1, jobs or 1)) for d in devices]
            return len(slots), slots
    return max(1, jobs or os.cpu_count() or 1), None


def command_line(opts: Options, root: Path, mpath: Path, base: refs.Side, head: refs.Side) -> str:
    head_ref = refs.WORKTREE if head.ref == refs.WORKTREE else head.sha[:12]
    return (
        f"nox -s gates -- --base {base.sha[:12]} --head {head_ref} "
        f"--matrix {shlex.quote(rel(root, mpath))}"
    )


def resolve_sides(
    repo: git.Repo,
    opts: Options,
    st: store.Store,
    cache: Path,
    backends: list[str],
    executor: Any = None,
) -> tuple[dict[str, refs.Side], dict[str, tuple[Capabilities | None, str]], dict[str, envs.Env]]:
    """The resolve phase: refs -> sides with worktrees, each side's environment (gates/run/envs.py)
    and its engine's capabilities."""
    sides = {"base": refs.side(repo, "base", opts.base), "head": refs.side(repo, "head", opts.head)}
    side_envs = envs.resolve(repo, sides, backends)
    fp = executor.run_info().fingerprint if executor else store.fingerprint()
    caps: dict[str, tuple[Capabilities | None, str]] = {}
    for s in sides.values():
        env = side_envs[s.name]
        if s.engine_tree is None:
            caps[s.name] = (None, "the commit has no engine/")
            continue
        s.worktree = refs.ensure_worktree(repo, s.sha)
        if env.reason:
            caps[s.name] = (None, f"its own environment could not be made: {env.reason}")
            continue
        kv = envs.key_vars(env)
        ckey = store.arm_key(s.engine_tree, {"capabilities": True}, "", {}, fp, kv)
        cached = st.read(ckey, must_have="caps")
        if cached is not None:
            caps[s.name] = (Capabilities.from_json(cached["caps"]), "")
            continue
        if executor:
            got, why = executor.capabilities(s, env)
        else:
            got, why = capabilities(s.worktree, cache, python=env.python)
        caps[s.name] = (got, why)
        if got is not None:
            st.write(ckey, {"caps": got.to_json()})
    if executor:
        executor.bind(sides, side_envs)
    return sides, caps, side_envs


def run(opts: Options) -> int:
    t0 = time.monotonic()
    repo = refs.open_repo(opts.repo)
    root = refs.repo_root(repo)
    inp = load_inputs(root, opts.matrix, KINDS)
    m, the_plan = inp.m, inp.the_plan
    out_dir = Path(opts.out) if opts.out else root / "receipts"
    receipts_writable(out_dir)
    cache = refs.cache_root()
    st = store.Store(cache / "results", enabled=not opts.no_cache)
    arms = the_plan.arms if opts.shard is None else shard.select(the_plan.arms, *opts.shard)
    executor = executors.make(opts.executor, opts.address, repo, m.axes["backend"])
    sides, caps, side_envs = resolve_sides(repo, opts, st, cache, m.axes["backend"], executor)
    validate.against_capabilities(m, [c for c, _ in caps.values() if c is not None])
    n_workers, devices = workers(set(m.axes["backend"]), opts.jobs)
    runner = ArmRunner(
        sides=sides,
        caps=caps,
        sets=inp.sets,
        models=inp.models,
        fixtures=inp.fixtures,
        st=st,
        cache=cache,
        timeout=float(m.scalars.timeout),
        workers=n_workers,
        devices=devices,
        quiet=opts.quiet,
        envs=side_envs,
        executor=executor,
    )
    if not opts.quiet:
        part = "" if opts.shard is None else f" · shard {opts.shard[0]}/{opts.shard[1]}"
        log(f"[gates] {sides['base'].sha[:10]}..{sides['head'].sha[:10]} · matrix {m.name}{part}")
    opts, interrupted = _run_arms(runner, arms, opts, the_plan.notes)
    if st.corrupt:
        the_plan.notes.append(
            f"the result store had {len(st.corrupt)} unreadable entr"
            f"{'y' if len(st.corrupt) == 1 else 'ies'}: removed, and the arms run again"
        )
    info = extras(opts, repo, inp, sides, side_envs, cache, executor)
    facts = contract.backend_facts([c for c, _ in caps.values()], m.axes["backend"])
    machine = {**info.machine, "backends": facts}
    run_info = dataclasses.replace(info, machine=machine, workers=n_workers, devices=devices)
    if opts.shard is not None:
        path = shard.write(out_dir, opts.shard, inp, run_info, runner, arms, time.monotonic() - t0)
        print(shard.line(path, runner, arms))
        code = EXIT_OK
    else:
        rows = [runner.rows[a] for a in the_plan.arms]
        wall = time.monotonic() - t0
        code = report(inp, run_info, rows, runner.results, runner.ran, out_dir, wall)
    if interrupted is not None:  # its receipt is written: the interrupt goes on
        raise interrupted
    return code


def _run_arms(
    runner: ArmRunner, arms: list, opts: Options, notes: list[str]
) -> tuple[Options, KeyboardInterrupt | None]:
    """Run the arms; on an interrupt (Ctrl-C, SIGTERM) note it and go on to a receipt of
    what finished, without the speed and lean sections; the caller raises it again after."""
    try:
        runner.run(arms)
        return opts, None
    except KeyboardInterrupt as e:
        done = sum(1 for r in runner.results.values() if r.ok)
        notes.append(
            f"the arms left when the run was interrupted ({str(e) or 'Ctrl-C'}): {done} of"
            f" {len(arms)} had run cleanly, a gate with any other could not run; no speed or"
            " lean section"
        )
        return dataclasses.replace(opts, speed=False, lean=False), e


def extras(
    opts: Options,
    repo: git.Repo,
    inp: Inputs,
    sides: dict[str, refs.Side],
    side_envs: dict[str, envs.Env],
    cache: Path,
    executor: Any = None,
) -> RunInfo:
    """What a run records beside its arms: sides, machine, environments, and the speed and
    lean sections (run once per run: by shard 1 of a sharded one)."""
    first = opts.shard is None or opts.shard[0] == 1
    speed = None
    if inp.m.speed is not None and opts.speed and first:
        speed = _speed(inp.m, sides, inp.models, cache, opts.quiet, side_envs, executor).to_json()
    mb = refs.merge_base(repo, sides["base"].sha, sides["head"].sha)
    lean_result = lean.check(repo, mb, sides["head"]) if opts.lean and first else None
    where = executor.run_info() if executor else None
    return RunInfo(
        base=SideFacts.of(sides["base"]),
        head=SideFacts.of(sides["head"]),
        merge_base=mb,
        machine=where.machine if where else store.machine(),
        fingerprint=where.fingerprint if where else store.fingerprint(),
        speed=speed,
        lean=None if lean_result is None else lean_result.to_json(),
        environments=side_envs,
        command=command_line(opts, inp.root, inp.mpath, sides["base"], sides["head"]),
        accepted=accept.from_trailers(repo, mb, sides["head"].sha) + accept.load(opts.accept),
        executor=where.executor if where else None,
    )


def _speed(
    m: matrix.Matrix,
    sides: dict[str, refs.Side],
    models: dict[str, Path],
    cache: Path,
    quiet: bool,
    side_envs: dict[str, envs.Env],
    executor: Any = None,
) -> SpeedRun:
    """The speed part of the run."""
    spec = m.speed
    assert spec is not None
    missing_side = [s.name for s in sides.values() if s.worktree is None]
    if missing_side:
        why = f"{', '.join(missing_side)}: the commit has no engine/"
        return SpeedRun(Status.NOT_COMPARABLE, why, spec=spec)
    same_env = side_envs["base"].python == side_envs["head"].python
    if sides["base"].engine_tree == sides["head"].engine_tree and same_env:
        why = "base and head have the same engine/ tree and environment: nothing to time"
        return SpeedRun(Status.NOT_RUN, why, spec=spec)
    model = models[m.axes["model"][0]]
    backend = m.axes["backend"][0]
    if executor:
        return executor.speed(sides, model, backend, spec=spec)
    try:
        got = run_speed(
            {k: s.worktree for k, s in sides.items() if s.worktree},
            model,
            backend,
            spec,
            cache,
            None if quiet else log,
            pythons={k: e.python for k, e in side_envs.items() if e.python},
        )
    except OSError as e:
        got = SpeedRun(Status.COULD_NOT_RUN, str(e), spec=spec)
    return got


def open_repo_or_none(path: str) -> git.Repo | None:
    try:
        return refs.open_repo(path)
    except BadInput:
        return None
