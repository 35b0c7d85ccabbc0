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

from gates import HARNESS_VERSION, prompts, refs, served, store
from gates import envs as envs_mod
from gates.contract import TRUTH_DRAFTERS, missing, request_keys, writes_trace
from gates.execute import ArmJob, Progress, base_env, run_all
from gates.plan import Arm, canonical
from gates.results import ArmRun


def scratch(cache: Path, key: str) -> Path:
    """An arm's scratch folder, this process's own: two gate runs of one arm at once on
    one cache must not delete each other's files."""
    return cache / "runs" / f"{key[:20]}-{os.getpid()}"


def truth_of(arm: Arm) -> Arm | None:
    """The plain twin whose replies an oracle/noisy arm needs (None: needs none)."""
    cfg = arm.config
    if cfg["drafter"] not in TRUTH_DRAFTERS or cfg.get("drafter_model"):
        return None
    return Arm(arm.side, canonical({**cfg, "drafter": "none"}))


@dataclass
class ArmRunner:
    sides: dict[str, refs.Side]
    caps: dict[str, tuple[dict | None, str]]
    sets: dict[str, list[dict[str, Any]]]
    models: dict[str, Path]
    fixtures: dict[str, str]
    st: store.Store
    cache: Path
    timeout: float
    workers: int
    devices: list[str] | None
    quiet: bool = False
    envs: dict[str, envs_mod.Env] = field(default_factory=dict)  # per side (gates/envs.py)
    results: dict[Arm, dict[str, Any]] = field(default_factory=dict)
    rows: dict[Arm, dict[str, Any]] = field(default_factory=dict)
    ran: int = 0

    def run(self, arms: list[Arm]) -> None:
        for arm in arms:
            self.rows[arm] = {
                "id": arm.id,
                "side": arm.side,
                "label": arm.name,
                "config": arm.config,
                "cached": False,
            }
        first = [a for a in arms if truth_of(a) is None]
        self._phase(first, "")
        second = [a for a in arms if truth_of(a) is not None]
        if second:
            self._phase(second, " (drafters fed their plain twin's replies)")
        for arm, row in self.rows.items():
            r = self.results.get(arm)
            if r is None:
                continue
            row.update(
                status=r.get("status", "crashed"),
                reason=r.get("reason", ""),
                wall_s=r.get("wall_s"),
                metrics=r.get("metrics"),
                argv=r.get("argv"),
                stderr_tail=r.get("stderr_tail", "") if r.get("status") != "ok" else "",
                replies=[
                    {
                        "id": x["id"],
                        "n": len(x.get("ids") or []),
                        "token_sha": x.get("token_sha"),
                        "finish_reason": x.get("finish_reason"),
                    }
                    for x in r.get("replies", [])
                ],
            )

    def _python(self, side: str) -> str:
        e = self.envs.get(side)
        return e.python if e is not None and e.python else sys.executable

    def _blocked(self, arm: Arm) -> str | None:
        c, why = self.caps[arm.side]
        if c is None:
            return f"{arm.side}: {why}"
        lack = missing(c, arm.config)
        return f"the {arm.side} engine has {lack}" if lack else None

    def _prepare(self, arm: Arm, pending: dict[str, list[Arm]], jobs: list[ArmJob]) -> None:
        row, cfg, side = self.rows[arm], arm.config, self.sides[arm.side]
        reason = self._blocked(arm)
        if reason:
            row.update(status="not_comparable", reason=reason)
            return
        assert side.worktree is not None
        extra: list[str] = []
        if cfg.get("drafter_model") and cfg["drafter"] not in TRUTH_DRAFTERS:
            extra = ["--drafter-model", str(self.models[cfg["drafter_model"]])]
        key_cfg = dict(cfg)
        twin = truth_of(arm)
        if twin is not None:
            tr = self.results.get(twin)
            if tr is None or tr.get("status") != "ok":
                why = self.rows[twin].get("reason") or (tr or {}).get("reason") or "no result"
                if self.rows[twin].get("status") == "not_comparable":
                    row.update(status="not_comparable", reason=f"its plain twin: {why}")
                    return
                status = "refused" if (tr or {}).get("status") == "refused" else "crashed"
                self.results[arm] = {
                    "status": status,
                    "wall_s": 0.0,
                    "stderr_tail": "",
                    "reason": f"its plain twin did not run ({why})",
                }
                return
            truth = self.cache / "truth" / f"{self.rows[twin]['key']}.jsonl"
            truth.parent.mkdir(parents=True, exist_ok=True)
            store.write_atomic(
                truth,
                "".join(
                    json.dumps({"id": r["id"], "ids": r.get("ids") or []}) + "\n"
                    for r in tr["replies"]
                ),
            )
            extra = ["--drafter-model", str(truth)]
            key_cfg["drafter_truth"] = self.rows[twin]["key"]
        caps = self.caps[arm.side][0] or {}
        lines, dropped = [], {}
        known = request_keys(caps)
        for r in prompts.requests_for(self.sets[cfg["prompts"]], cfg["max_tokens"], cfg["resumed"]):
            unknown = sorted(set(r) - known)
            why = served.unservable(r, caps.get("serve") or {}) if cfg.get("served") else None
            if unknown:  # an older engine would ignore the key and answer another request
                dropped[r["id"]] = f"the {arm.side} engine has no request key {unknown[0]}"
            elif why:
                dropped[r["id"]] = f"served: {why}"
            else:
                lines.append(r)
        if dropped:
            row["dropped"] = dropped
        data = prompts.encode(lines)
        if cfg.get("served"):
            key_cfg["served_client"] = served.CLIENT_VERSION
        env = base_env(side.worktree, cfg["backend"], cfg["flags"], self.cache)
        key_env = {
            k: env[k] for k in sorted(env) if k.startswith("ENGINE_") or k == "OMP_NUM_THREADS"
        }
        key_env.update(envs_mod.key_vars(self.envs.get(arm.side)))
        fx = {
            k: v
            for k, v in self.fixtures.items()
            if k
            in (
                f"model:{cfg['model']}",
                f"prompts:{cfg['prompts']}",
                f"model:{cfg.get('drafter_model')}",
            )
        }
        key = store.arm_key(
            side.engine_tree or "", key_cfg, prompts.digest(data), fx, store.fingerprint(), key_env
        )
        row["key"] = key
        hit = self.st.get(key, must_have="replies")
        if hit is not None and hit.get("status") == "ok":
            self.results[arm] = hit
            row["cached"] = True
            return
        if key not in pending:  # base and head with one engine tree share the run
            jobs.append(
                ArmJob(
                    key=key,
                    label=arm.id,
                    worktree=side.worktree,
                    config=cfg,
                    model=self.models[cfg["model"]],
                    requests=data,
                    timeout=self.timeout,
                    workdir=scratch(self.cache, key),
                    env=env,
                    extra_args=extra,
                    trace=writes_trace(caps),
                    runner=served.run_served if cfg.get("served") else None,
                    python=self._python(arm.side),
                )
            )
        pending.setdefault(key, []).append(arm)

    def _phase(self, arms: list[Arm], what: str) -> None:
        pending: dict[str, list[Arm]] = {}
        jobs: list[ArmJob] = []
        for arm in arms:
            self._prepare(arm, pending, jobs)
        cached = sum(1 for a in arms if self.rows[a]["cached"])
        nc = sum(1 for a in arms if self.rows[a].get("status") == "not_comparable")
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
                    self.rows[a]["cached"] = True
            else:
                now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
                run = dataclasses.replace(run, harness=HARNESS_VERSION, finished_at=now)
                self.ran += 1
                if run.ok:
                    self.st.put(job.key, run.to_json())  # at once: an interrupted run keeps it
            result = run.to_json()  # the rows and the checks still read the JSON form
            for a in pending[job.key]:
                self.results[a] = result

        run_all(jobs, self.workers, done, progress, self.devices, self.st)
