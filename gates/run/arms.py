"""Plan arms -> results: capability check, cache lookup, jobs, and arms that need another.

An arm whose drafter is ``oracle`` or ``noisy`` (the engine's test drafters) is fed the
replies of its *plain twin* (the same arm with drafter none) through
``--drafter-model REPLIES.jsonl``, so those arms run in a second phase, after the twins.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gates import HARNESS_VERSION
from gates.plan import prompts
from gates.plan.build import Arm
from gates.plan.request import PromptRequest
from gates.plan.rule import Sets
from gates.run import blas, refs, served, store
from gates.run import envs as envs_mod
from gates.run.capabilities import Capabilities
from gates.run.contract import (
    TRUTH_DRAFTERS,
    architecture_missing,
    missing,
    model_architectures,
    request_keys,
    writes_trace,
)
from gates.run.execute import ArmJob, Progress, base_env, run_all, stored_run
from gates.run.reply import ReplySummary
from gates.run.results import ArmResult, ArmRun, Status


def scratch(cache: Path, key: str) -> Path:
    """An arm's scratch folder, this process's own: two gate runs of one arm at once on
    one cache must not delete each other's files."""
    return cache / "runs" / f"{key[:20]}-{os.getpid()}"


def truth_of(arm: Arm) -> Arm | None:
    """The plain twin whose replies an oracle/noisy arm needs (None: needs none)."""
    cfg = arm.config
    if cfg.drafter not in TRUTH_DRAFTERS or cfg.drafter_model:
        return None
    return Arm(arm.side, cfg.replace(drafter="none").canonical())


def row_of(arm: Arm) -> ArmResult:
    """An arm's manifest row before it is prepared or run."""
    return ArmResult(id=arm.id, side=arm.side, label=arm.name, config=arm.config)


def finished(row: ArmResult, run: ArmRun) -> ArmResult:
    """The row with its run's outcome; the replies as summaries (the store keeps them)."""
    replies = [ReplySummary.of(x) for x in run.replies or []]
    return dataclasses.replace(
        row,
        status=run.status,
        reason=run.reason,
        wall_s=run.wall_s,
        metrics=run.metrics,
        argv=run.argv,
        stderr_tail="" if run.ok else run.stderr_tail,
        replies=replies,
        device=run.device,
    )


@dataclass
class ArmRunner:
    sides: dict[str, refs.Side]
    caps: dict[str, tuple[Capabilities | None, str]]
    sets: Sets
    models: dict[str, Path]
    fixtures: dict[str, str]
    st: store.Store
    cache: Path
    timeout: float
    workers: int
    devices: list[str] | None
    quiet: bool = False
    envs: dict[str, envs_mod.Env] = field(default_factory=dict)  # per side (gates/run/envs.py)
    executor: Any = None  # where arms run (gates/run/executors); None: here (execute.run_all)
    results: dict[Arm, ArmRun] = field(default_factory=dict)
    rows: dict[Arm, ArmResult] = field(default_factory=dict)
    ran: int = 0

    def run(self, arms: list[Arm]) -> None:
        for arm in arms:
            self.rows[arm] = row_of(arm)
        try:
            first = [a for a in arms if truth_of(a) is None]
            self._phase(first, "")
            second = [a for a in arms if truth_of(a) is not None]
            if second:
                self._phase(second, " (drafters fed their plain twin's replies)")
        finally:  # interrupted too: the arms that finished keep their outcome in their rows
            self._settle()

    def _settle(self) -> None:
        for arm, row in list(self.rows.items()):
            r = self.results.get(arm)
            if r is not None:
                self.rows[arm] = finished(row, r)

    def _mark(self, arm: Arm, **changes: Any) -> None:
        self.rows[arm] = dataclasses.replace(self.rows[arm], **changes)

    def _python(self, side: str) -> str:
        e = self.envs.get(side)
        return e.python if e is not None and e.python else sys.executable

    def _blocked(self, arm: Arm) -> str | None:
        c, why = self.caps[arm.side]
        if c is None:
            return f"{arm.side}: {why}"
        model = self.models.get(arm.config.model)
        lack = missing(c, arm.config) or (
            architecture_missing(c, model_architectures(model)) if model else None
        )
        return f"the {arm.side} engine has {lack}" if lack else None

    def _prepare(self, arm: Arm, pending: dict[str, list[Arm]], jobs: list[ArmJob]) -> None:
        """Settle an arm (not comparable, its twin did not run, cached) or queue its job."""
        reason = self._blocked(arm)
        if reason:
            self._mark(arm, status=Status.NOT_COMPARABLE, reason=reason)
            return
        cfg, worktree = arm.config, self.sides[arm.side].worktree
        assert worktree is not None
        keyed: dict[str, str] = {}  # what joins the config in its key (gates/run/store.py)
        extra = self._drafter_args(arm, keyed)
        if extra is None:
            return
        caps = self.caps[arm.side][0] or Capabilities()
        lines, dropped = self._requests(arm, caps)
        if dropped:
            self._mark(arm, dropped=dropped)
        data = prompts.encode(lines)
        if cfg.served:
            keyed["served_client"] = served.CLIENT_VERSION
        env = base_env(worktree, cfg.backend, cfg.flags, self.cache)
        if cfg.blas:
            core, why = self._blas_kernel(arm)
            if core is None:
                self._mark(arm, status=Status.NOT_COMPARABLE, reason=why)
                return
            env["OPENBLAS_CORETYPE"] = core
        key = self._key(arm, keyed, data, env)
        self._mark(arm, key=key)
        hit = stored_run(self.st, key)
        if hit is not None:
            self.results[arm] = hit
            self._mark(arm, cached=True)
            return
        if key not in pending:  # base and head with one engine tree share the run
            job = ArmJob(
                key=key,
                label=arm.id,
                worktree=worktree,
                config=cfg,
                model=self.models[cfg.model],
                requests=data,
                timeout=self.timeout,
                workdir=scratch(self.cache, key),
                env=env,
                extra_args=extra,
                trace=writes_trace(caps),
                runner=served.run_served if cfg.served else None,
                python=self._python(arm.side),
            )
            jobs.append(job)
        pending.setdefault(key, []).append(arm)

    def _blas_kernel(self, arm: Arm) -> tuple[str | None, str]:
        """The OPENBLAS_CORETYPE of a ``blas: row-variant`` arm (gates/run/blas.py)."""
        if arm.config.backend != "numpy":
            return None, "blas: row-variant is for the numpy backend"
        return blas.row_variant_kernel(self._python(arm.side))

    def _drafter_args(self, arm: Arm, keyed: dict[str, str]) -> list[str] | None:
        """``--drafter-model``: the matrix's drafter model, or (oracle, noisy) the plain
        twin's replies, whose key joins ``keyed``. None: the twin did not run, so the
        arm is settled without running."""
        cfg, twin = arm.config, truth_of(arm)
        if twin is None:
            if cfg.drafter_model and cfg.drafter not in TRUTH_DRAFTERS:
                return ["--drafter-model", str(self.models[cfg.drafter_model])]
            return []
        tr, twin_key = self.results.get(twin), self.rows[twin].key
        if tr is None or not tr.ok or twin_key is None:
            self._twin_failed(arm, twin, tr)
            return None
        truth = self.cache / "truth" / f"{twin_key}.jsonl"
        truth.parent.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps({"id": r.id, "ids": list(r.ids)}) for r in tr.replies or []]
        store.write_atomic(truth, "".join(line + "\n" for line in lines))
        keyed["drafter_truth"] = twin_key
        return ["--drafter-model", str(truth)]

    def _twin_failed(self, arm: Arm, twin: Arm, tr: ArmRun | None) -> None:
        row = self.rows[twin]
        why = row.reason or (tr.reason if tr else "") or "no result"
        if row.status == Status.NOT_COMPARABLE:
            self._mark(arm, status=Status.NOT_COMPARABLE, reason=f"its plain twin: {why}")
            return
        status = (
            Status.REFUSED if tr is not None and tr.status is Status.REFUSED else Status.CRASHED
        )
        self.results[arm] = ArmRun(status, reason=f"its plain twin did not run ({why})")

    def _requests(self, arm: Arm, caps: Capabilities) -> tuple[list[PromptRequest], dict[str, str]]:
        """The arm's request lines, and those dropped (id -> why): a request key its engine
        lacks (an older engine would ignore it and answer another request), or one its
        server cannot serve."""
        cfg, known = arm.config, request_keys(caps)
        lines, dropped = [], {}
        for r in prompts.requests_for(self.sets[cfg.prompts], cfg.max_tokens, cfg.resumed):
            unknown = sorted(set(r.keys) - known)
            why = served.unservable(r, caps.serve) if cfg.served else None
            if unknown:
                dropped[r.id] = f"the {arm.side} engine has no request key {unknown[0]}"
            elif why:
                dropped[r.id] = f"served: {why}"
            else:
                lines.append(r)
        return lines, dropped

    def _key(self, arm: Arm, keyed: dict[str, str], data: bytes, env: dict[str, str]) -> str:
        """The arm's result-store key: engine tree, config (with ``keyed``: the served
        client's version, the plain twin's key), requests, fixtures, machine and the
        environment that can change its bits."""
        cfg = arm.config
        key_env = {
            k: env[k]
            for k in sorted(env)
            if k.startswith("ENGINE_") or k in ("OMP_NUM_THREADS", "OPENBLAS_CORETYPE")
        }
        key_env.update(envs_mod.key_vars(self.envs.get(arm.side)))
        used = (f"model:{cfg.model}", f"prompts:{cfg.prompts}")
        used += (f"model:{cfg.drafter_model}",)
        fx = {k: v for k, v in self.fixtures.items() if k in used}
        tree = self.sides[arm.side].engine_tree or ""
        fp = self.executor.fingerprint(arm) if self.executor else store.fingerprint()
        key_cfg = {**cfg.to_json(), **keyed}
        return store.arm_key(tree, key_cfg, prompts.digest(data), fx, fp, key_env)

    def _phase(self, arms: list[Arm], what: str) -> None:
        pending: dict[str, list[Arm]] = {}
        jobs: list[ArmJob] = []
        for arm in arms:
            self._prepare(arm, pending, jobs)
        cached = sum(1 for a in arms if self.rows[a].cached)
        nc = sum(1 for a in arms if self.rows[a].status == Status.NOT_COMPARABLE)
        if not self.quiet:
            where = f"{len(self.devices)} GPU(s)" if self.devices else f"{self.workers} worker(s)"
            print(
                f"[gates] {len(arms)} arms{what}: {cached} cached, {nc} not comparable, "
                f"{len(jobs)} to run on {where}",
                file=sys.stderr,
                flush=True,
            )
        progress = None if self.quiet else Progress(len(jobs), 0)

        def done(job: ArmJob, run: ArmRun, cached: bool) -> None:
            if cached:  # another gate run on this cache ran it while we waited
                for a in pending[job.key]:
                    self._mark(a, cached=True)
            else:
                now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
                run = dataclasses.replace(run, harness=HARNESS_VERSION, finished_at=now)
                self.ran += 1
                if run.ok:
                    self.st.write(job.key, run.to_json())  # at once: an interrupted run keeps it
            for a in pending[job.key]:
                self.results[a] = run

        run_jobs = self.executor.run_all if self.executor else run_all
        run_jobs(jobs, self.workers, done, progress, self.devices, self.st)
