"""``sample_per: repeat`` (a pair of values per repeat, not per block) and ``--speed`` overrides
of gates.speed_calibrate, on an injected lockstep worker: no clock, no process."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from gates.judge.kinds import KINDS
from gates.plan import matrix
from gates.plan.speed import SpeedSpec
from gates.run.speed import measure, schema
from gates.run.speed.schema import TimedRun

ROOT = Path(__file__).resolve().parents[2]
STUB = Path(__file__).parent / "stub_engine"
DECODE = "decode_cpu_s_per_token"


class Counting:
    """A lockstep worker whose k-th timed run costs (1 + plant) * (1 + k / 100) per token:
    each repeat of a block costs a known, different amount."""

    starts = itertools.count()

    def __init__(
        self, argv: list[str], cwd: Path, env: dict[str, str], cpu: int | None, timeout: float
    ) -> None:
        next(Counting.starts)
        self.cost = 1 + float(env.get("ENGINE_CALIBRATE_SLOWDOWN", "0"))
        self.runs = 0

    def wait_ready(self) -> int:
        return schema.Header.parse({"bench_schema": 2, "ready": True, "machine": {}}).version

    def unit(self, n: int, turn: int | None = None, metrics: tuple[str, ...] = ()) -> TimedRun:
        c = 1e-3 * self.cost * (1 + self.runs / 100)
        self.runs += 1
        acts = {"kind": ["short", "round", "round"], "cpu_s": [1e-3, c, c], "rows": [4, n, n]}
        acts.update(wall_s=acts["cpu_s"], tokens=[0, n, n])
        return schema.TimedRun.parse(
            {"parallel": n, "done": True, "actions": acts, DECODE: c}, n, []
        )

    def close(self) -> None:
        pass


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> type[Counting]:
    monkeypatch.setattr(Counting, "starts", itertools.count())
    monkeypatch.setattr(measure, "Worker", Counting)
    return Counting


def _spec(**kw: Any) -> SpeedSpec:
    return SpeedSpec(**{"parallel": (1,), "metrics": (DECODE,), "budget_s": 1e9, "repeats": 4} | kw)


def test_each_repeat_is_a_sample_of_its_own(tmp_path, counting):
    """Three blocks of four repeats: six processes, twelve samples, each repeat's values its
    own runs' (pooled repeats would give every sample of a block one value: red)."""
    spec = _spec(sample_per="repeat", blocks=12, add_blocks=0, max_blocks=12)
    plant = {"ENGINE_CALIBRATE_SLOWDOWN": "0.02"}
    got = measure.run_speed(
        {"base": STUB, "head": STUB}, STUB, "numpy", spec, tmp_path, plant=plant
    )
    assert next(counting.starts) == 6  # 3 blocks, a base and a head process each
    assert got.blocks == 12 and [s.block for s in got.samples] == [0] * 4 + [1] * 4 + [2] * 4
    assert [s.repeat for s in got.samples] == [0, 1, 2, 3] * 3
    for s in got.samples:
        base, head = s.values[f"{DECODE}@1"]
        k = s.repeat
        assert k is not None
        assert base == pytest.approx(1e-3 * (1 + k / 100))
        assert head == pytest.approx(1.02e-3 * (1 + k / 100))
        assert len(s.runs) == 2 and {r.side for r in s.runs} == {"base", "head"}
    (cell,) = got.cells
    assert cell.speed == pytest.approx(1 / 1.02)


def test_by_default_a_block_is_one_sample(tmp_path, counting):
    spec = _spec(blocks=3, add_blocks=0, max_blocks=3)
    got = measure.run_speed({"base": STUB, "head": STUB}, STUB, "numpy", spec, tmp_path)
    assert next(counting.starts) == 6 and got.blocks == 3
    assert all("repeat" not in s.to_json() and len(s.runs) == 8 for s in got.samples)


def test_overrides_are_typed_and_name_the_key():
    spec = _spec()
    got = measure.override(spec, ["parallel=[1]", "min_effect=0", "sample_per=repeat", "blocks=20"])
    assert (got.parallel, got.min_effect, got.sample_per) == ((1,), 0.0, "repeat")
    assert got.blocks == 20 and isinstance(got.min_effect, float) and spec.blocks == 12
    for bad, says in [
        ("blockz=3", "KEY one of"),
        ("blocks", "KEY=VALUE"),
        ("blocks=many", "blocks must be a int"),
        ("sample_per=run", "sample_per must be"),
    ]:
        with pytest.raises(ValueError, match=says):
            measure.override(spec, [bad])


def speed_matrix(tmp_path: Path, **speed: Any) -> Path:
    """quick.yaml with its speed section's keys replaced by `speed`."""
    raw = yaml.safe_load((ROOT / "matrices" / "quick.yaml").read_text())
    raw["speed"] = {k: v for k, v in raw["speed"].items() if k != "sample_per"} | speed
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("value", ["repeat", "block"])
def test_a_matrix_may_ask_for_a_pair_per_repeat(tmp_path: Path, value: str) -> None:
    assert matrix.load(speed_matrix(tmp_path, sample_per=value), KINDS).speed.sample_per == value


def test_a_matrix_without_sample_per_keeps_a_pair_per_block(tmp_path: Path) -> None:
    assert matrix.load(speed_matrix(tmp_path), KINDS).speed.sample_per == "block"


@pytest.mark.parametrize("value", ["blocks", "1", 1])
def test_sample_per_other_than_block_or_repeat_is_refused(tmp_path: Path, value: object) -> None:
    with pytest.raises(matrix.BadInput, match=r"m\.yaml: speed\.sample_per: expected"):
        matrix.load(speed_matrix(tmp_path, sample_per=value), KINDS)
