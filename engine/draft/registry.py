"""Drafters by name."""

from __future__ import annotations

from typing import Any

from engine.errors import InputError

_FACTORIES: dict[str, str] = {
    "oracle": "engine.draft.oracle:OracleDrafter",
    "noisy": "engine.draft.oracle:NoisyDrafter",
    "mtp": "engine.draft.mtp:MtpDrafter",
    "block": "engine.draft.block:BlockDrafter",
}


def available() -> list[str]:
    return sorted(_FACTORIES)


def make(cfg: Any, model: Any) -> Any:
    if cfg.drafter not in _FACTORIES:
        raise InputError(f"--drafter: '{cfg.drafter}' is not available in this engine")
    module_name, _, cls_name = _FACTORIES[cfg.drafter].partition(":")
    module = __import__(module_name, fromlist=[cls_name])
    return getattr(module, cls_name).from_config(cfg, model)
