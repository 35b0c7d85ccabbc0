"""The speed block runner (gates/run/speed/measure.py) on an injected measurement source.

`Worker` (one side's `engine bench --lockstep`) is replaced by `Scripted`, which answers
with costs made from its environment and a seeded generator: no clock, no CPU time and no
process decides a verdict here. One end-to-end run on the stub engine stays, on exact costs."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gates.plan.speed import SpeedSpec
from gates.run.results import Status
from gates.run.speed import measure, schema
from gates.run.speed.results import Verdict
from gates.run.speed.schema import TimedRun

STUB = Path(__file__).parent / "stub_engine"
METRICS = ["decode_cpu_s_per_token", "prefill_cpu_s_per_token"]


class Scripted:
    """A lockstep worker whose costs are 1 + ENGINE_CALIBRATE_SLOWDOWN (of its own
    environment) times a base cost; prompt steps get a seeded relative jitter."""

    starts = itertools.count()
    jitter = 0.0

    def __init__(
        self, argv: list[str], cwd: Path, env: dict[str, str], cpu: int | None, timeout: float
    ) -> None:
        self.cost = 1 + float(env.get("ENGINE_CALIBRATE_SLOWDOWN", "0"))
        self.rng = np.random.default_rng(next(Scripted.starts))  # starts are in a fixed order

    def wait_ready(self) -> int:
        return schema.Header.parse({"bench_schema": 2, "ready": True, "machine": {}}).version

    def unit(self, n: int, turn: int | None = None, metrics: tuple[str, ...] = ()) -> TimedRun:
        c = self.cost
        steps = [64e-4 * c * (1 + self.jitter * self.rng.uniform(-1, 1)) for _ in range(2)]
        acts = {"kind": ["short", "short", "round", "round", "round"]}
        acts.update(cpu_s=steps + [n * c * 1e-3] * 3, rows=[64, 64, n, n, n])
        acts.update(wall_s=acts["cpu_s"], tokens=[0, n, n, n, n])
        row = {"parallel": n, "done": True, "actions": acts}
        row |= {"decode_cpu_s_per_token": 1e-3 * c, "prefill_cpu_s_per_token": 1e-4 * c}
        return schema.TimedRun.parse(row, n, list(metrics))

    def close(self) -> None:
        pass


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> type[Scripted]:
    monkeypatch.setattr(Scripted, "starts", itertools.count())
    monkeypatch.setattr(measure, "Worker", Scripted)
    return Scripted


def _spec(**kw: Any) -> SpeedSpec:
    return SpeedSpec(**{"parallel": (1, 2), "metrics": tuple(METRICS), "budget_s": 1e9} | kw)


def test_a_planted_slowdown_fails_at_the_first_look(tmp_path, scripted, monkeypatch):
    """The plant on head only makes every decode cell slower at the first look, which ends
    the run there though the jittered prefill cells are still inconclusive."""
    monkeypatch.setattr(scripted, "jitter", 0.5)
    spec = _spec()
    plant = {"ENGINE_CALIBRATE_SLOWDOWN": "0.1"}
    sides = {"base": STUB, "head": STUB}
    got = measure.run_speed(sides, STUB, "numpy", spec, tmp_path, plant=plant)
    # red once with the stop on a slower cell taken out (36 blocks, 5 looks)
    assert got.status is Status.FAIL and got.blocks == spec.blocks and got.looks == 1
    verdicts = {(c.metric, c.verdict) for c in got.cells}
    assert verdicts == {(METRICS[0], Verdict.SLOWER), (METRICS[1], Verdict.INCONCLUSIVE)}
    assert all(math.isclose(c.speed, 1 / 1.1, rel_tol=1e-9) for c in got.cells[:2])
    assert got.planted == plant


def test_the_stub_engine_end_to_end_is_equivalent_to_itself(tmp_path):
    """Real `engine bench --lockstep` processes (the stub's exact costs): no cell moves."""
    spec = _spec(blocks=3, max_blocks=3)
    same = measure.run_speed({"base": STUB, "head": STUB}, STUB, "numpy", spec, tmp_path)
    assert same.status is Status.PASS and {c.verdict for c in same.cells} == {Verdict.EQUIVALENT}
    assert same.blocks == 3 and same.looks == 1
