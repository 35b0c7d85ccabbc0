"""What a run records beside its arms, typed: the sides, the machine and its fingerprint,
the speed and lean sections, environments, the command, acceptances, where the arms ran,
workers and devices (and, for merged shards, the shards and their notes). The pipeline
builds it; a shard manifest writes it (``to_json``) and ``merge`` reads it back
(``from_json``); the report phase writes its fields into the manifest. The machine, the
executor's record and the speed and lean sections are the JSON each wrote, kept as it is."""

from __future__ import annotations

from dataclasses import dataclass, field

from gates.jsontypes import JsonObject
from gates.run import envs, refs


@dataclass(frozen=True)
class SideFacts:
    """A side (base or head) as the manifest records it."""

    sha: str = ""
    ref: str | None = None
    engine_tree: str | None = None
    snapshot_of: str | None = None
    subject: str | None = None
    worktree: str | None = None

    @classmethod
    def of(cls, s: refs.Side) -> SideFacts:
        worktree = str(s.worktree) if s.worktree else None
        return cls(s.sha, s.ref, s.engine_tree, s.snapshot_of, s.subject, worktree)

    @classmethod
    def from_json(cls, d: JsonObject) -> SideFacts:
        def opt(k: str) -> str | None:
            v = d.get(k)
            return None if v is None else str(v)

        return cls(str(d.get("sha", "")), **{k: opt(k) for k in SIDE_KEYS if k != "sha"})

    def to_json(self) -> JsonObject:
        return {k: getattr(self, k) for k in SIDE_KEYS}


SIDE_KEYS = ("ref", "sha", "engine_tree", "snapshot_of", "subject", "worktree")


@dataclass(frozen=True)
class ExecutorFacts:
    """Where an executor ran the arms: its machine (JSON as a node described it), the
    fingerprint of that, and its own record (``executor`` in the manifest's run facts)."""

    machine: JsonObject
    fingerprint: str
    executor: JsonObject


@dataclass(frozen=True)
class RunInfo:
    base: SideFacts
    head: SideFacts
    merge_base: str | None
    machine: JsonObject
    fingerprint: str
    command: str
    speed: JsonObject | None = None
    lean: JsonObject | None = None
    environments: dict[str, envs.Env] | None = None
    accepted: list[dict[str, str]] = field(default_factory=list)
    executor: JsonObject | None = None
    workers: int = 0
    devices: list[str] | None = None
    shards: list[JsonObject] | None = None  # merged shards: one record each
    notes: list[str] = field(default_factory=list)  # merged shards: their notes

    def to_json(self) -> JsonObject:
        """As a shard manifest's ``run`` (its keys in the order the run records them)."""
        out: JsonObject = {
            "base": self.base.to_json(),
            "head": self.head.to_json(),
            "merge_base": self.merge_base,
            "machine": self.machine,
            "fingerprint": self.fingerprint,
            "speed": self.speed,
            "lean": self.lean,
            "environments": None if self.environments is None else envs.to_json(self.environments),
            "command": self.command,
            "accepted": self.accepted,
        }
        if self.executor is not None:
            out["executor"] = self.executor
        out["workers"], out["devices"] = self.workers, self.devices
        if self.shards is not None:
            out["shards"] = self.shards
        if self.notes:
            out["notes"] = self.notes
        return out

    @classmethod
    def from_json(cls, d: JsonObject) -> RunInfo:
        """A shard manifest's ``run``."""
        env = d.get("environments")
        workers = d.get("workers")
        return cls(
            base=SideFacts.from_json(d["base"]),
            head=SideFacts.from_json(d["head"]),
            merge_base=d.get("merge_base"),
            machine=d["machine"],
            fingerprint=str(d["fingerprint"]),
            command=str(d.get("command", "")),
            speed=d.get("speed"),
            lean=d.get("lean"),
            environments=None
            if not isinstance(env, dict)
            else {k: envs.Env(**v) for k, v in env.items()},
            accepted=list(d.get("accepted") or []),
            executor=d.get("executor"),
            workers=workers if isinstance(workers, int) else 0,
            devices=d.get("devices"),
        )
