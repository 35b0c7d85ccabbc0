"""EngineConfig: how one engine instance is laid out. Experimental flags come from ENGINE_*."""

from __future__ import annotations

import os
import typing
from dataclasses import Field, dataclass, field, fields
from typing import Any

from engine.errors import InputError
from engine.kv.codec import KV_DTYPES

DRAFTERS = ("none", "mtp", "block", "oracle", "noisy")
MAX_PARALLEL = 64  # lanes (capabilities' limits.parallel)
MAX_DRAFT_TOKENS = 16


def env_flags(environ: dict[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if k.startswith("ENGINE_")}


def knob(default: Any, help: str, choices: tuple[str, ...] | None = None) -> Any:
    """A field that is also a flag of the engine's commands: ``--kv-pages`` for ``kv_pages``,
    with this default, help text and choices (engine/cli/common.py add_engine_flags)."""
    return field(default=default, metadata={"help": help, "choices": choices})


@dataclass
class EngineConfig:
    """The one home of the engine's knobs and their defaults: every command line's engine
    flags are made from the fields built with ``knob``."""

    parallel: int = knob(1, "lanes (concurrent streams)")
    context: int = knob(1024, "rows per lane")
    kv: str = knob("bf16", "KV storage", KV_DTYPES)
    kv_pages: int = knob(0, "shared page pool (0: paging off)")
    page_rows: int = knob(16, "rows per KV page")
    step_rows: int = knob(64, "prompt rows per step")
    share: float = knob(1.0, "prompt share of decode time")
    drafter: str = knob("none", "speculative drafter", DRAFTERS)
    drafter_model: str | None = knob(None, "block drafter directory")
    draft_tokens: int = knob(4, "tokens drafted per round")
    serial: bool = False  # every request alone, in order: `engine run --serial` only
    flags: dict[str, str] = field(default_factory=env_flags)

    @property
    def lanes(self) -> int:
        return 1 if self.serial else self.parallel

    def validate(self) -> EngineConfig:
        def positive(name: str, value: float) -> None:
            if not value > 0 or value == float("inf"):  # NaN and inf fail too
                raise InputError(f"{flag_name(name)}: must be a number > 0, got {value}")

        for name in ("parallel", "context", "page_rows", "step_rows", "share", "draft_tokens"):
            positive(name, getattr(self, name))
        if self.parallel > MAX_PARALLEL:
            raise InputError(f"--parallel: at most {MAX_PARALLEL} lanes, got {self.parallel}")
        if self.kv not in KV_DTYPES:
            raise InputError(f"--kv: expected one of {', '.join(KV_DTYPES)}, got '{self.kv}'")
        if self.kv_pages < 0:
            raise InputError(f"--kv-pages: must be >= 0, got {self.kv_pages}")
        if self.drafter not in DRAFTERS:
            raise InputError(
                f"--drafter: expected one of {', '.join(DRAFTERS)}, got '{self.drafter}'"
            )
        if self.draft_tokens > MAX_DRAFT_TOKENS:
            raise InputError(f"--draft-tokens: at most {MAX_DRAFT_TOKENS}, got {self.draft_tokens}")
        return self


def flag_name(name: str) -> str:
    """The command-line flag of an EngineConfig field: ``kv_pages`` is ``--kv-pages``."""
    return "--" + name.replace("_", "-")


def knobs() -> list[Field]:
    """EngineConfig's fields that are command-line flags, in declaration order."""
    return [f for f in fields(EngineConfig) if "help" in f.metadata]


def knob_type(f: Field) -> type:
    """The type a knob's flag parses to (``str | None`` parses to ``str``)."""
    hint = typing.get_type_hints(EngineConfig)[f.name]
    given = [t for t in typing.get_args(hint) if t is not type(None)]
    return given[0] if given else hint
