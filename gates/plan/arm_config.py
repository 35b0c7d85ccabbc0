"""An arm's configuration, typed: the axis values of its matrix point, the matrix's scalars
(the engine's knobs), and what its rule varies (``serial``, ``resumed``, ``share``,
``served``, ``blas``).

The plan makes one per arm (``Plan.config``); it is JSON only where it is written or
hashed: an arm's canonical JSON (its identity, the shard groups, the store key) and the
manifest's row are ``to_json``, and what reads such JSON back (``Arm.config``, a manifest,
a Ray worker's payload) reads it through ``from_json``. ``to_json`` writes the keys the
config dicts always had, sorted, and leaves out the knobs not set (None), so those bytes
are what they were before the config was typed (tests/gates/test_arm_config_json.py).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from gates.jsontypes import JsonObject

AXIS_FIELDS = ("model", "backend", "prompts", "kv", "parallel", "paging", "drafter", "flags")
# Always written; the rest only when set (not None).
REQUIRED = (*AXIS_FIELDS, "max_tokens", "serial", "resumed")


@dataclass(frozen=True)
class ArmConfig:
    model: str
    backend: str
    prompts: str
    kv: str
    parallel: int
    paging: str | int  # on, off, or a pool of this many pages
    drafter: str
    flags: dict[str, str] = field(default_factory=dict)  # ENGINE_* -> value ({} = unset)
    max_tokens: int = 16
    serial: bool = False  # one request at a time (parallel 1)
    resumed: bool = False  # each resumable request continues its first turn
    pages: int | None = None
    context: int | None = None
    page_rows: int | None = None
    step_rows: int | None = None
    draft_tokens: int | None = None
    share: float | None = None
    drafter_model: str | None = None  # the drafter's model directory (matrix drafter_models)
    served: str | None = None  # through `engine serve`: stream or plain
    blas: str | None = None  # row-variant: a BLAS kernel whose bits follow row counts

    def value(self, axis: str) -> Any:
        """The value of an axis (or another key) by its name, as a rule's ``where`` names it;
        None for a key the config has no field for."""
        return getattr(self, axis, None) if axis in FIELDS else None

    def replace(self, **changes: Any) -> ArmConfig:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> JsonObject:
        """The config as JSON: its keys sorted, those not set (None) left out."""
        out = {k: getattr(self, k) for k in sorted(FIELDS)}
        out["flags"] = dict(self.flags)
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_json(cls, d: JsonObject) -> ArmConfig:
        """A config as ``to_json`` wrote it; ValueError naming a key missing, unknown or
        null (it would not be written back as it was read)."""
        if not isinstance(d, dict):
            raise ValueError(f"arm config: expected a mapping, got {d!r}")
        for k in REQUIRED:
            if k not in d:
                raise ValueError(f"arm config: field '{k}' is missing")
        for k, v in d.items():
            if k not in FIELDS:
                raise ValueError(f"arm config: unknown field '{k}'")
            if v is None:
                raise ValueError(f"arm config: field '{k}' is null")
        if not isinstance(d["flags"], dict):
            raise ValueError(f"arm config: flags: expected a mapping, got {d['flags']!r}")
        return cls(**{**d, "flags": dict(d["flags"])})

    def canonical(self) -> str:
        """The canonical JSON of the config: an arm's identity, hashed into keys and groups."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))


FIELDS = frozenset(f.name for f in dataclasses.fields(ArmConfig))
