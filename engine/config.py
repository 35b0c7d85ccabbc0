"""EngineConfig: how one engine instance is laid out. Experimental flags come from ENGINE_*."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from engine.errors import InputError
from engine.kv.codec import KV_DTYPES

DRAFTERS = ("none", "mtp", "block", "oracle", "noisy")
MAX_PARALLEL = 64  # lanes (capabilities' limits.parallel)
MAX_DRAFT_TOKENS = 16


def env_flags(environ: dict[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if k.startswith("ENGINE_")}


@dataclass
class EngineConfig:
    parallel: int = 1
    context: int = 1024
    kv: str = "bf16"
    kv_pages: int = 0
    page_rows: int = 16
    step_rows: int = 64
    share: float = 1.0
    drafter: str = "none"
    drafter_model: str | None = None
    draft_tokens: int = 4
    serial: bool = False
    flags: dict[str, str] = field(default_factory=env_flags)

    @property
    def lanes(self) -> int:
        return 1 if self.serial else self.parallel

    def validate(self) -> EngineConfig:
        def positive(name: str, value: float) -> None:
            if not value > 0 or value == float("inf"):  # NaN and inf fail too
                raise InputError(f"--{name.replace('_', '-')}: must be a number > 0, got {value}")

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
