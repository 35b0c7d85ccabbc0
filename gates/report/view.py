"""The manifest, typed: what the receipt, the verdict and the acceptances read of a run's
JSON record. Built once by ``Manifest.parse`` where the manifest's JSON is read (``gates
show``, a receipt on disk) or has just been written (the report phase); inside, the receipt
reads its fields, never the JSON. The JSON itself is what the report phase wrote and what
``render.write`` dumps: this view only reads it (a field absent from an older or partial
manifest reads as its default)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gates.jsontypes import JsonObject
from gates.judge.checks.lean import Lean, lean_of
from gates.judge.results import GateResult, gates_of
from gates.run.envs import Env
from gates.run.info import SideFacts
from gates.run.results import ArmResult, arms_of
from gates.run.speed.results import SpeedRun, speed_of

T = TypeVar("T")


# parse's readers of one field of the JSON it reads (an absent one reads as empty)
def _str(v: object) -> str | None:
    return None if v is None else str(v)


def _strs(v: object) -> tuple[str, ...]:
    return tuple(str(x) for x in v) if isinstance(v, list | tuple) else ()


def _obj(v: object) -> Mapping[str, Any]:
    return v if isinstance(v, dict) else {}


def _fields(cls: type[T], d: Mapping[str, Any]) -> T:
    """A flat dataclass from the keys of ``d`` it names (the others are left)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True)
class Machine:
    """Where the run ran: what the receipt's machine line names."""

    cpu: str | None = None
    cores: int | None = None
    python: str | None = None
    gpus: tuple[str, ...] = ()
    packages: dict[str, str] = field(default_factory=dict)
    backends: dict[str, dict[str, str]] = field(default_factory=dict)
    executor: str | None = None


@dataclass(frozen=True)
class MatrixFacts:
    """The manifest's ``matrix``: which matrix ran, over what, how many arms."""

    name: str = ""
    path: str = ""
    columns: str | None = None
    backend: tuple[str, ...] = ()
    model: tuple[str, ...] = ()
    prompts: tuple[str, ...] = ()
    workers: int | None = None


@dataclass(frozen=True)
class Acceptance:
    """An accepted slower speed cell: who accepted it, how, and whether it matched one."""

    cell: str
    by: str
    via: str
    applied: bool = False


@dataclass(frozen=True)
class Manifest:
    """A run's manifest, typed: sides, machine and run facts, arms, gates, speed, lean,
    environments, acceptances and the verdict (None before the report phase sets it)."""

    base: SideFacts
    head: SideFacts
    matrix: MatrixFacts
    machine: Machine = field(default_factory=Machine)
    merge_base: str | None = None
    fingerprint: str | None = None
    harness_version: str | None = None
    command: str | None = None
    wall_s: float = 0.0
    gates: tuple[GateResult, ...] = ()
    arms: tuple[ArmResult, ...] = ()
    speed: SpeedRun | None = None
    lean: Lean | None = None
    environments: dict[str, Env] | None = None
    notes: tuple[str, ...] = ()
    bad_values: tuple[str, ...] = ()
    accepted: tuple[Acceptance, ...] = ()
    verdict: str | None = None
    exit_code: int | None = None

    @classmethod
    def parse(cls, d: JsonObject) -> Manifest:
        """The manifest's JSON (as written to disk, or the report phase's about to be)."""
        mc, mx = _obj(d.get("machine")), _obj(d.get("matrix"))
        envs = d.get("environments")
        wall = d.get("wall_s")
        code = d.get("exit_code")
        return cls(
            base=SideFacts.from_json(dict(_obj(d.get("base")))),
            head=SideFacts.from_json(dict(_obj(d.get("head")))),
            matrix=MatrixFacts(
                name=str(mx.get("name", "")),
                path=str(mx.get("path", "")),
                columns=_str(mx.get("columns")),
                backend=_strs(mx.get("backend")),
                model=_strs(mx.get("model")),
                prompts=_strs(mx.get("prompts")),
                workers=mx.get("workers"),
            ),
            machine=Machine(
                cpu=_str(mc.get("cpu")),
                cores=mc.get("cores"),
                python=_str(mc.get("python")),
                gpus=_strs(mc.get("gpus")),
                packages=dict(_obj(mc.get("packages"))),
                backends={k: dict(v) for k, v in _obj(mc.get("backends")).items()},
                executor=_str(mc.get("executor")),
            ),
            merge_base=_str(d.get("merge_base")),
            fingerprint=_str(d.get("fingerprint")),
            harness_version=_str(d.get("harness_version")),
            command=_str(d.get("command")),
            wall_s=float(wall) if isinstance(wall, int | float) else 0.0,
            gates=tuple(gates_of(d)) if "gates" in d else (),
            arms=tuple(arms_of(d)) if "arms" in d else (),
            speed=speed_of(d),
            lean=lean_of(d),
            environments=None
            if not isinstance(envs, dict)
            else {k: _fields(Env, _obj(v)) for k, v in envs.items()},
            notes=_strs(d.get("notes")),
            bad_values=_strs(d.get("bad_values")),
            accepted=tuple(
                Acceptance(str(a["cell"]), str(a["by"]), str(a["via"]), bool(a.get("applied")))
                for a in d.get("accepted") or []
            ),
            verdict=_str(d.get("verdict")),
            exit_code=code if isinstance(code, int) else None,
        )
