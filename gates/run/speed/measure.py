"""The block runner: a fresh base and a fresh head ``engine bench --lockstep`` per block.

In a block both processes load and warm up, then take turns: for each stream count of the
sweep, one timed run of each side, the order alternating (``base head``, then ``head base``)
so that neither side always runs first; ``repeats`` such rounds. Both are pinned to one
CPU with the same environment (single-threaded BLAS, no ``ENGINE_*`` from the shell), so
they meet the same core and the same seconds of the machine: a block is a *pair*, and its
drift drops out of the head/base ratio. Each block gives one value per side for each cell
(``estimate``), or with ``sample_per: repeat`` one per repeat (a pair of processes then gives
``repeats`` pairs, and ``blocks``/``add_blocks``/``max_blocks`` count pairs); after
``blocks`` the cells are judged (``stats``), and while a cell is inconclusive ``add_blocks``
more run, up to ``max_blocks`` and ``budget_s`` seconds.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from gates.plan.speed import SAMPLE_PER, SpeedSpec
from gates.run.execute import base_env, has_engine
from gates.run.results import Status
from gates.run.speed import cpus, estimate, schema, stats
from gates.run.speed.lockstep import SampleError, Worker
from gates.run.speed.results import Sample, SpeedCell, SpeedRun, Verdict
from gates.run.speed.schema import TimedRun

# the runner adds blocks while a cell is one of these (a small loss may yet be *slower*)
OPEN = (Verdict.INCONCLUSIVE, Verdict.SLOWER_SMALL)
ORDER = (("base", "head"), ("head", "base"))
SIDES = ("base", "head")


def bench_argv(model: Path, backend: str, spec: SpeedSpec) -> list[str]:
    return [
        sys.executable,
        "-m",
        "engine",
        "bench",
        "--lockstep",
        "--model",
        str(model),
        "--backend",
        backend,
        "--parallel",
        str(max(spec.parallel)),  # the warm-up's stream count
        "--prompt-tokens",
        str(spec.prompt_tokens),
        "--gen-tokens",
        str(spec.gen_tokens),
    ]


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _pair(
    workers: dict[str, Worker], order: tuple[str, str], n: int, spec: SpeedSpec
) -> list[TimedRun]:
    """One timed run of ``n`` streams on each side, the two taking turns of ``turn`` actions."""
    per_run = tuple(m for m in spec.metrics if m in estimate.PER_RUN)
    done: dict[str, TimedRun] = {}
    while len(done) < len(order):
        for side in order:
            if side in done:
                continue
            try:
                got = workers[side].unit(n, spec.turn, per_run)
            except schema.NotComparable as e:
                raise SampleError("not_comparable", f"{side}: {e}") from None
            if got is not None:
                done[side] = dataclasses.replace(got, side=side)
    return [done[side] for side in order]


def _turns(workers: dict[str, Worker], index: int, spec: SpeedSpec) -> list[TimedRun]:
    """The block's timed runs in the order they started, each marked with its side and
    its repeat."""
    ran = []
    for k in range(spec.repeats):
        for i, n in enumerate(spec.parallel):
            pair = _pair(workers, ORDER[(index + k + i) % 2], n, spec)
            ran += [dataclasses.replace(r, repeat=k) for r in pair]
    return ran


def override(spec: SpeedSpec, pairs: list[str]) -> SpeedSpec:
    """The section with ``KEY=VALUE`` pairs set (values read as YAML): only its own keys,
    each of its type (calibration: ``--speed``)."""
    keys = [f.name for f in dataclasses.fields(spec)]
    for pair in pairs:
        key, eq, raw = pair.partition("=")
        if not eq or key not in keys:
            raise ValueError(f"--speed {pair}: expected KEY=VALUE, KEY one of {', '.join(keys)}")
        old, value = getattr(spec, key), yaml.safe_load(raw)
        if isinstance(old, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(old, tuple) and isinstance(value, list):
            value = tuple(value)
        if type(value) is not type(old) or (key == "sample_per" and value not in SAMPLE_PER):
            raise ValueError(f"--speed {pair}: {key} must be a {type(old).__name__}, like {old!r}")
        spec = dataclasses.replace(spec, **{key: value})
    return spec


def run_block(index: int, start: Callable[[str], Worker], spec: SpeedSpec) -> list[Sample]:
    """One block: both sides' timed runs, and each cell's value per side; one sample, or
    (``sample_per: repeat``) one per repeat."""
    t0, load_before = time.monotonic(), _load()
    workers = {s: start(s) for s in SIDES}  # both load at once; loading is not timed
    try:
        version = 0
        for side, w in workers.items():
            try:
                version = w.wait_ready()
            except schema.NotComparable as e:
                raise SampleError("not_comparable", f"{side}: {e}") from None
            except SampleError as e:
                raise SampleError(e.status, f"{side}: {e.reason}") from None
        ran = _turns(workers, index, spec)
    finally:
        for w in workers.values():
            w.close()
    wall, load_after = round(time.monotonic() - t0, 2), _load()

    def values(runs: list[TimedRun]) -> dict[str, list[float]]:
        return {
            f"{m}@{n}": [
                estimate.value(
                    [r for r in runs if r.side == s and r.parallel == n], m, spec.quantile
                )
                for s in SIDES
            ]
            for m in spec.metrics
            for n in spec.parallel
        }

    groups = [[r for r in ran if r.repeat == k] for k in range(spec.repeats)]
    return [
        Sample(
            block=index,
            schema=version,
            values=values(runs),
            repeat=j if spec.per_repeat else None,
            wall_s=wall,
            load_before=load_before,
            load_after=load_after,
            runs=runs,
        )
        for j, runs in enumerate(groups if spec.per_repeat else [ran])
    ]


def judge(samples: list[Sample], spec: SpeedSpec, looks: int) -> list[SpeedCell]:
    cells = {}
    for m in spec.metrics:
        for n in spec.parallel:
            pairs = [s.values[f"{m}@{n}"] for s in samples]
            pairs = [p for p in pairs if not any(math.isnan(x) for x in p)]
            cells[(m, n)] = ([p[0] for p in pairs], [p[1] for p in pairs])
    return stats.verdicts(
        cells,
        {m: schema.METRICS[m].better for m in spec.metrics},
        alpha=spec.alpha,
        looks=looks,
        delta=spec.delta,
        min_effect=spec.min_effect,
    )


def max_looks(spec: SpeedSpec) -> int:
    extra = max(0, spec.max_blocks - spec.blocks)
    return 1 + (math.ceil(extra / spec.add_blocks) if spec.add_blocks > 0 else 0)


def _starter(
    sides: dict[str, Path],
    model: Path,
    backend: str,
    spec: SpeedSpec,
    cache: Path,
    plant: dict[str, str] | None,
    pythons: dict[str, str] | None,
    cpu: int | None,
) -> Callable[[str], Worker]:
    argv = bench_argv(model, backend, spec)
    envs = {s: base_env(sides[s], backend, {}, cache) for s in SIDES}
    if plant:
        envs["head"].update(plant)

    def start(side: str) -> Worker:
        python = (pythons or {}).get(side, argv[0])
        return Worker([python, *argv[1:]], sides[side], envs[side], cpu, spec.timeout)

    return start


def run_speed(
    sides: dict[str, Path],
    model: Path,
    backend: str,
    spec: SpeedSpec,
    cache: Path,
    log: Any = None,
    plant: dict[str, str] | None = None,
    pythons: dict[str, str] | None = None,
) -> SpeedRun:
    """The speed section on a CPU claimed for it (gates/run/speed/cpus.py), named in the result."""
    with cpus.claim(cache, log=log) as got:
        out = _run_speed(sides, model, backend, spec, cache, log, plant, pythons, got.cpu)
        out.cpu_claim = got.note
        return out


def _run_speed(
    sides: dict[str, Path],
    model: Path,
    backend: str,
    spec: SpeedSpec,
    cache: Path,
    log: Any,
    plant: dict[str, str] | None,
    pythons: dict[str, str] | None,
    cpu: int | None,
) -> SpeedRun:
    """Blocks until no cell is inconclusive or the budget is spent; a verdict per cell.

    ``plant`` (calibration only: ``gates.speed_calibrate``) adds environment variables to
    the head side; a real comparison never passes it. ``pythons``: a side's interpreter where
    it has its own environment (gates/run/envs.py; default: this one)."""
    t0 = time.monotonic()
    out = SpeedRun(Status.PASS, spec=spec, planted=dict(plant) if plant else None)
    for side in SIDES:
        if not has_engine(sides[side]):
            out.status, out.reason = Status.NOT_COMPARABLE, f"{side}: the commit has no engine/"
            return out
    out.cpu = cpu
    start = _starter(sides, model, backend, spec, cache, plant, pythons, out.cpu)
    out.max_looks = max_looks(spec)
    target, ran = spec.blocks, 0  # samples wanted; blocks run (one sample each, or more)
    while True:
        while len(out.samples) < target:
            spent = time.monotonic() - t0
            if ran and spent + spent / ran > spec.budget_s:
                out.stopped = "budget"  # the next block would end past it: judge what there is
                break
            try:
                out.samples += run_block(ran, start, spec)
            except SampleError as e:
                out.status, out.reason = Status(e.status), e.reason
                out.wall_s = round(time.monotonic() - t0, 1)
                return out
            ran += 1
            if log:
                got = len(out.samples)
                log(f"[gates] speed block {ran}: {got}/{target} ({time.monotonic() - t0:.0f}s)")
        out.looks += 1
        out.cells = judge(out.samples, spec, out.max_looks)
        spent, done = time.monotonic() - t0, len(out.samples)
        open_cells = [c for c in out.cells if c.verdict in OPEN]
        slower = any(c.verdict is Verdict.SLOWER for c in out.cells)  # failed: a look's
        if slower or not open_cells or done >= spec.max_blocks or out.looks >= out.max_looks:
            break  # verdict stands (its alpha is spent), so more blocks cannot undo it
        if spent + spent / ran > spec.budget_s:
            out.stopped = "budget"  # not even one more block fits
            break
        target = min(spec.max_blocks, done + spec.add_blocks)
    out.blocks, out.level = len(out.samples), spec.alpha / out.max_looks
    out.schema = out.samples[0].schema if out.samples else None
    out.wall_s = round(time.monotonic() - t0, 1)
    if any(c.verdict is Verdict.SLOWER for c in out.cells):
        out.status = Status.FAIL
    return out
