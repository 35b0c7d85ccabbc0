"""The engine's command-line contract (docs/contract.md) as the gate runner reads it:
the flags an arm passes, the reply fields it keeps, and what an engine's capabilities say
it can run. ``gates`` never imports ``engine``; an engine of an older commit is read
through the same contract. The bench part (``bench --lockstep``, its schema and metrics)
is read in ``gates/run/speed/schema.py``."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from gates.plan.arm_config import ArmConfig
from gates.run.capabilities import Capabilities

REPLY_KEYS = (
    "id",
    "ids",
    "text",
    "token_sha",
    "finish_reason",
    "prompt_tokens",
    "margins",
    "min_margin",
    "drafted",
    "accepted",
    "error",
    "logit_hashes",
    "embedding",
)

# What a served arm needs in every choice and chunk of `engine serve` (contract 3).
SERVE_CHOICE_KEYS = ("token_ids", "margins", "logit_hashes")
TRUTH_DRAFTERS = ("oracle", "noisy")  # test drafters fed a plain run's replies by request id
# capabilities' per-backend provenance (contract 4): {backend: {fact: text}}
BACKEND_INFO = "backend_info"
# capabilities' "architectures" (contract 5): what --model loads; engines before it load this
ARCHITECTURES_SINCE = 5
BEFORE_ARCHITECTURES = ("Qwen3ForCausalLM",)


def engine_args(c: ArmConfig) -> list[str]:
    """Engine flags of an arm config; contract defaults are left out so old engines run."""
    args = ["--backend", str(c.backend)]
    if c.kv != "bf16":
        args += ["--kv", str(c.kv)]
    if c.parallel != 1:
        args += ["--parallel", str(c.parallel)]
    if c.paging == "on":
        args += ["--kv-pages", str(c.pages or 256)]
    elif c.paging != "off":  # a pool of this many pages
        args += ["--kv-pages", str(c.paging)]
    if c.drafter != "none":
        args += ["--drafter", str(c.drafter)]
        if c.draft_tokens:
            args += ["--draft-tokens", str(c.draft_tokens)]
    knobs: tuple[tuple[int | float | None, str], ...] = (
        (c.context, "--context"),
        (c.page_rows, "--page-rows"),
        (c.step_rows, "--step-rows"),
        (c.share, "--share"),
    )
    for value, flag in knobs:
        if value:
            args += [flag, str(value)]
    if c.serial:
        args.append("--serial")
    return args


# The request keys of contract 1; a later engine lists its own in ``request_keys``.
V1_REQUEST_KEYS = frozenset(
    [
        "id",
        "prompt",
        "prompt_ids",
        "messages",
        "max_tokens",
        "kind",
        "stop_ids",
        "temperature",
        "seed",
        "priority",
        "arrival",
        "draft",
        "cancel_after",
        "ignore_eos",
    ]
)


def request_keys(caps: Capabilities) -> frozenset[str]:
    keys = caps.request_keys
    return frozenset(keys) if keys is not None else V1_REQUEST_KEYS


def writes_trace(caps: Capabilities) -> bool:
    flags = caps.flags or ()
    return "--trace" in flags and "--virtual-clock" in flags


def missing(caps: Capabilities, c: ArmConfig) -> str | None:
    """Why an engine with ``caps`` cannot run config ``c`` (None: it can)."""

    def listed(key: str, value: Any) -> bool:
        return value in (caps.listed(key) or ())

    if caps.contract is None:
        return "capabilities has no contract version"
    if not listed("backends", c.backend):
        return f"no backend {c.backend}"
    if not listed("kv", c.kv):
        return f"no kv {c.kv}"
    if c.drafter != "none" and not listed("drafters", c.drafter):
        return f"no drafter {c.drafter}"
    if c.paging != "off" and not caps.paging:
        return "no paging"
    if c.serial and not caps.serial:
        return "no --serial"
    flags = caps.flags
    if flags is not None:
        for a in engine_args(c) + ["--metrics"]:
            if a.startswith("--") and a not in flags:
                return f"no flag {a}"
    for name in c.flags:
        if not listed("env_flags", name):
            return f"no engine flag {name}"
    return serve_missing(caps, c) if c.served else None


def serve_missing(caps: Capabilities, c: ArmConfig) -> str | None:
    """Why ``engine serve`` of an engine with ``caps`` cannot run served config ``c``."""
    serve = caps.serve
    if serve is None:
        return "no served API that returns token ids and their bits (contract 3: serve)"
    lack = [k for k in SERVE_CHOICE_KEYS if k not in (serve.choice_keys or ())]
    if lack:
        return f"a server that returns no {', '.join(lack)}"
    if not serve.port_zero:
        return "a server that cannot pick a free port (--port 0)"
    if c.drafter in TRUTH_DRAFTERS:
        return f"no served {c.drafter} drafter (the server names its requests itself)"
    return None


def backend_facts(
    caps: list[Capabilities | None], backends: list[str]
) -> dict[str, dict[str, str]]:
    """The provenance facts (GPU, driver, CUDA, cuBLAS, ...) that the engines report in
    capabilities' ``backend_info`` (contract 4) for the matrix's backends: per backend, the
    first side's that has them. An engine before contract 4 reports none."""
    out: dict[str, dict[str, str]] = {}
    for c in caps:
        for name in backends:
            facts = c.backend_info.get(name) if c is not None else None
            if name not in out and facts:
                out[name] = dict(facts)
    return out


@functools.lru_cache(maxsize=64)
def model_architectures(model_dir: Path) -> tuple[str, ...]:
    """A model directory's config.json "architectures" (none when it has none: not checked)."""
    try:
        archs = json.loads((Path(model_dir) / "config.json").read_text()).get("architectures")
    except (OSError, ValueError, AttributeError):
        return ()
    return tuple(a for a in archs if isinstance(a, str)) if isinstance(archs, list) else ()


def architecture_missing(caps: Capabilities, archs: tuple[str, ...]) -> str | None:
    """Why an engine with ``caps`` cannot load a model of ``archs`` (None: it can, the model
    names no architecture, or an engine of contract 5 or later lists none: then it is asked,
    and a refusal, exit 2, is judged as any refused arm is)."""
    known = caps.architectures
    if known is None and caps.contract is not None:
        known = BEFORE_ARCHITECTURES if caps.contract < ARCHITECTURES_SINCE else None
    if not archs or known is None or any(a in known for a in archs):
        return None
    return f"no architecture {archs[0]} (it loads {', '.join(map(str, known))})"
