"""The ABBA runner: fresh ``engine bench --json`` processes of base and head, one at a time.

Blocks alternate ``base head head base`` and ``head base base head``, so a drift of the
machine (heat, other load) hits both sides alike. Every sample is a fresh process with
the same environment on both sides (single-threaded BLAS, no ``ENGINE_*`` from the
shell, the runner's CPU affinity); its bench does one untimed warm-up run. The load
average is recorded before and after each sample. After ``blocks`` blocks the cells are
judged (``stats``); while a cell is inconclusive, ``add_blocks`` more run, up to
``max_blocks`` and ``budget_s`` seconds.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from gates.execute import _run, base_env, has_engine, tail
from gates.speed import schema, stats

ORDER = (("base", "head", "head", "base"), ("head", "base", "base", "head"))


def bench_argv(model: Path, backend: str, spec: dict[str, Any]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "engine",
        "bench",
        "--json",
        "--model",
        str(model),
        "--backend",
        backend,
        "--parallel",
        ",".join(map(str, spec["parallel"])),
        "--prompt-tokens",
        str(spec["prompt_tokens"]),
        "--gen-tokens",
        str(spec["gen_tokens"]),
        "--repeats",
        str(spec["repeats"]),
    ]


class SampleError(Exception):
    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def sample(
    worktree: Path,
    argv: list[str],
    env: dict[str, str],
    spec: dict[str, Any],
) -> dict[str, Any]:
    """One fresh bench process: its rows by parallel, wall time and the load around it."""
    before, t0 = _load(), time.monotonic()
    code, out, err = _run(argv, worktree, env, spec["timeout"])
    wall, after = time.monotonic() - t0, _load()
    if code is None:
        raise SampleError("could_not_run", f"bench timed out after {spec['timeout']:.0f}s")
    if code != 0:
        raise SampleError(
            "not_comparable" if code == 2 else "could_not_run",
            f"engine has no bench --json (exit {code}: {tail(err, 300)})",
        )
    try:
        got = schema.parse(out, spec["metrics"], spec["parallel"])
    except schema.NotComparable as e:
        raise SampleError("not_comparable", str(e)) from None
    return {
        "rows": got["rows"],
        "schema": got["schema"],
        "wall_s": round(wall, 3),
        "load_before": before,
        "load_after": after,
        "process": got["process"],
    }


def judge(samples: list[dict[str, Any]], spec: dict[str, Any], looks: int) -> list[dict]:
    cells: dict[tuple[str, int], tuple[list[float], list[float]]] = {}
    for metric in spec["metrics"]:
        for n in spec["parallel"]:
            b = [s["rows"][n][metric] for s in samples if s["side"] == "base"]
            h = [s["rows"][n][metric] for s in samples if s["side"] == "head"]
            cells[(metric, n)] = (b, h)
    better = {m: schema.METRICS[m].better for m in spec["metrics"]}
    return stats.verdicts(
        cells,
        better,
        alpha=spec["alpha"],
        looks=looks,
        delta=spec["delta"],
        min_effect=spec["min_effect"],
    )


def max_looks(spec: dict[str, Any]) -> int:
    extra = max(0, spec["max_blocks"] - spec["blocks"])
    return 1 + (math.ceil(extra / spec["add_blocks"]) if spec["add_blocks"] > 0 else 0)


def run_speed(
    sides: dict[str, Path],
    model: Path,
    backend: str,
    spec: dict[str, Any],
    cache: Path,
    log: Any = None,
    plant: dict[str, str] | None = None,
    pythons: dict[str, str] | None = None,
) -> dict[str, Any]:
    """ABBA blocks until no cell is inconclusive or the budget is spent; verdict per cell.

    ``plant`` (calibration only: ``gates.speed.calibrate``) adds environment variables to
    the head side; a real comparison never passes it. ``pythons``: a side's interpreter where
    it has its own environment (gates/envs.py; default: this one)."""
    t0 = time.monotonic()
    for side in ("base", "head"):
        if not has_engine(sides[side]):
            return _result("not_comparable", f"{side}: the commit has no engine/", spec)
    argv = bench_argv(model, backend, spec)
    argvs = {s: [(pythons or {}).get(s, argv[0]), *argv[1:]] for s in ("base", "head")}
    envs = {s: base_env(sides[s], backend, {}, cache) for s in ("base", "head")}
    if plant:
        envs["head"].update(plant)
    looks = max_looks(spec)
    samples: list[dict[str, Any]] = []
    cells: list[dict[str, Any]] = []
    blocks, look = 0, 0
    target = spec["blocks"]
    while True:
        while blocks < target:
            spent = time.monotonic() - t0
            if blocks >= spec["blocks"] and spent + spent / blocks > spec["budget_s"]:
                break  # the next block would end past the budget: judge what there is
            for side in ORDER[blocks % 2]:
                try:
                    s = sample(sides[side], argvs[side], envs[side], spec)
                except SampleError as e:
                    # a bench that never worked on this side: not comparable; one that
                    # worked and then failed: could not run
                    first = not any(x["side"] == side for x in samples)
                    status = "not_comparable" if first else e.status
                    return _result(status, f"{side}: {e.reason}", spec, samples)
                s.update(side=side, block=blocks, index=len(samples))
                samples.append(s)
            blocks += 1
            if log:
                log(f"[gates] speed block {blocks}/{target} ({time.monotonic() - t0:.0f}s)")
        look += 1
        cells = judge(samples, spec, looks)
        open_cells = [c for c in cells if c["verdict"] == "inconclusive"]
        spent = time.monotonic() - t0
        if not open_cells or blocks >= spec["max_blocks"] or look >= looks:
            break
        if spent + spent / blocks > spec["budget_s"]:
            break  # not even one more block fits
        target = min(spec["max_blocks"], blocks + spec["add_blocks"])
    slower = [c for c in cells if c["verdict"] == "slower"]
    out = _result("fail" if slower else "pass", "", spec, samples)
    out.update(
        cells=cells,
        blocks=blocks,
        looks=look,
        max_looks=looks,
        level=spec["alpha"] / looks,
        wall_s=round(time.monotonic() - t0, 1),
        schema=samples[0]["schema"] if samples else None,
        planted=dict(plant) if plant else None,
    )
    return out


def _result(
    status: str, reason: str, spec: dict[str, Any], samples: list | None = None
) -> dict[str, Any]:
    return {
        "status": status,
        "reason": reason,
        "cells": [],
        "samples": samples or [],
        "spec": {k: v for k, v in spec.items()},
    }
