"""What an engine says it can run (``engine capabilities --json``, docs/contract.md), read
once into a frozen ``Capabilities``. A field the engine does not report is None (or empty),
never guessed: an engine of an older contract is read by the same type."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gates.jsontypes import JsonObject


def _names(v: Any) -> tuple[Any, ...] | None:
    """A list the engine reported, as a tuple; None where it reported no list."""
    return tuple(v) if isinstance(v, list) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class Serve:
    """``serve``: what every choice and chunk of ``engine serve`` carries (contract 3)."""

    choice_keys: tuple[str, ...] | None = None
    port_zero: bool = False
    request_keys: tuple[str, ...] | None = None  # the request fields the server reads

    @classmethod
    def from_json(cls, d: JsonObject) -> Serve:
        keys = _names(d.get("choice_keys"))
        return cls(keys, bool(d.get("port_zero")), _names(d.get("request_keys")))


@dataclass(frozen=True)
class Capabilities:
    contract: int | None = None  # the contract version (an engine without one runs nothing)
    backends: tuple[str, ...] | None = None
    kv: tuple[str, ...] | None = None
    drafters: tuple[str, ...] | None = None
    paging: bool = False
    serial: bool = False
    flags: tuple[str, ...] | None = None  # the command-line flags of `engine run`
    env_flags: tuple[str, ...] | None = None  # the ENGINE_* flags it reads
    request_keys: tuple[str, ...] | None = None
    serve: Serve | None = None
    backend_info: dict[str, dict[str, str]] = field(default_factory=dict)  # contract 4
    architectures: tuple[str, ...] | None = None  # what --model loads (contract 5)
    max_parallel: int | None = None  # limits.parallel (contract 5)

    def listed(self, key: str) -> tuple[Any, ...] | None:
        """One of its lists by the name capabilities gives it (backends, kv, drafters, ...)."""
        got = getattr(self, key)
        return got if isinstance(got, tuple) else None

    @classmethod
    def from_json(cls, d: JsonObject) -> Capabilities:
        serve = d.get("serve")
        info = d.get("backend_info")
        limits = d.get("limits")
        return cls(
            contract=_int(d.get("contract")),
            backends=_names(d.get("backends")),
            kv=_names(d.get("kv")),
            drafters=_names(d.get("drafters")),
            paging=bool(d.get("paging")),
            serial=bool(d.get("serial")),
            flags=_names(d.get("flags")),
            env_flags=_names(d.get("env_flags")),
            request_keys=_names(d.get("request_keys")),
            serve=None if not isinstance(serve, dict) else Serve.from_json(serve),
            backend_info={
                str(b): {str(k): str(v) for k, v in facts.items()}
                for b, facts in (info.items() if isinstance(info, dict) else ())
                if isinstance(facts, dict) and facts
            },
            architectures=_names(d.get("architectures")),
            max_parallel=_int(limits.get("parallel")) if isinstance(limits, dict) else None,
        )

    def to_json(self) -> JsonObject:
        """As capabilities writes it (the result store caches it): ``from_json`` reads it back."""
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in vars(self).items()}
        serve, top = out.pop("serve"), out.pop("max_parallel")
        if serve is not None:
            out["serve"] = {
                k: list(v) if isinstance(v, tuple) else v for k, v in vars(serve).items()
            }
        if top is not None:
            out["limits"] = {"parallel": top}
        return out
