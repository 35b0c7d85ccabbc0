"""An arm's config keeps its JSON bytes: the result store's keys hash them and the manifest
writes them, so a typed config must write exactly what the dicts did.

``arm_configs.json`` was written by the code before arm configs were typed (``python
tests/gates/test_arm_config_json.py`` writes it again): for every arm of every matrix in
matrices/, by its side and label, a hash (sha256, 12 digits) of each of: its canonical
JSON (the plan's identity of an arm, the shard groups), its config as the manifest
writes it, the manifest's row, the store key of that config, its engine flags and its
plain twin's canonical JSON. The test asserts the code of now reproduces them byte for
byte.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import pytest

from conftest import arm_config
from gates.judge.kinds import KINDS
from gates.plan.arm_config import ArmConfig
from gates.plan.inputs import load_inputs
from gates.run import store
from gates.run.arms import row_of, truth_of
from gates.run.contract import engine_args

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(__file__).with_name("arm_configs.json")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def arms_json(name: str) -> list[str]:
    """Each arm of matrix ``name`` as its config's JSON travels, one line an arm."""
    out = []
    for arm in load_inputs(REPO, name, KINDS).the_plan.arms:
        row = row_of(arm).to_json()
        twin = truth_of(arm)
        parts = {
            "config_json": arm.config_json,
            "manifest": json.dumps(row["config"]),
            "row": json.dumps(row, indent=1),
            "store_key": store.arm_key("tree", row["config"], "req", {}, "fp", {}),
            "engine_args": json.dumps(engine_args(arm.config)),
            "twin": twin.config_json if twin is not None else "",
        }
        out.append(
            f"{arm.side}: {arm.name} | " + " ".join(f"{k}={sha(v)}" for k, v in parts.items())
        )
    return out


def snapshot() -> dict[str, list[str]]:
    return {p.stem: arms_json(p.stem) for p in sorted((REPO / "matrices").glob("*.yaml"))}


def test_every_arm_config_writes_the_json_it_wrote_before() -> None:
    want = json.loads(SNAPSHOT.read_text())
    got = snapshot()
    assert sorted(got) == sorted(want) and all(want.values())
    for name in want:
        assert len(got[name]) == len(want[name]), name
        for g, w in zip(got[name], want[name], strict=True):
            assert g == w, name


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(snapshot(), indent=1) + "\n")
    print(f"wrote {SNAPSHOT}", file=sys.stderr)


def test_a_config_reads_back_as_it_was_written_and_refuses_what_it_would_not() -> None:
    """``from_json`` of ``to_json`` is the config again; a key missing, unknown or null
    (which ``to_json`` would not write back as read) is named, not dropped."""
    cfg = arm_config(drafter="block", drafter_model="d/blk", share=0.5, flags={"ENGINE_X": "1"})
    assert ArmConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg
    assert list(cfg.to_json()) == sorted(cfg.to_json()) and "served" not in cfg.to_json()
    assert json.loads(cfg.canonical()) == cfg.to_json()
    # the knobs no matrix of matrices/ sets: written as the dicts wrote them, when set
    knobs = {"context": 512, "page_rows": 16, "step_rows": 32, "draft_tokens": 3, "pages": 64}
    full = {**cfg.to_json(), **knobs, "served": "stream", "blas": "row-variant"}
    old_canonical = json.dumps(full, sort_keys=True, separators=(",", ":"))
    assert ArmConfig.from_json(full).canonical() == old_canonical
    d = cfg.to_json()
    for bad, why in (
        ({k: v for k, v in d.items() if k != "kv"}, "'kv' is missing"),
        ({**d, "colour": "red"}, "unknown field 'colour'"),
        ({**d, "share": None}, "'share' is null"),
        ({**d, "flags": []}, "flags: expected a mapping"),
        ([], "expected a mapping"),
    ):
        with pytest.raises(ValueError, match=why):
            ArmConfig.from_json(bad)  # type: ignore[arg-type]
    assert cfg.value("kv") == "bf16" and cfg.value("colour") is None


def test_a_ray_payload_carries_the_typed_config(tmp_path: Path) -> None:
    """What a worker is sent carries the typed config (Ray pickles it), unchanged through a
    pickle round trip, and the config's JSON reads back as the config."""
    import pickle

    from gates.run.execute import ArmJob
    from gates.run.executors.ship import Shipper

    (tmp_path / "model").mkdir()
    cfg = arm_config(served="plain", parallel=4)
    job = ArmJob("k", "arm", tmp_path, cfg, tmp_path / "model", b"", 1, tmp_path / "w")
    shipper = Shipper(tmp_path, put=len, _refs={"abc": "bundle"})
    payload = shipper.payload(job, "abc", None)
    assert payload.config == cfg and payload.served
    assert pickle.loads(pickle.dumps(payload)).config == cfg
    assert ArmConfig.from_json(json.loads(json.dumps(payload.config.to_json()))) == cfg


def test_a_point_holds_the_axes_and_a_config_takes_them() -> None:
    """A matrix point is the axes (and a rule's blas); an arm's config has a field of each."""
    from gates.plan.arm_config import AXIS_FIELDS
    from gates.plan.axes import AXES
    from gates.plan.point import Point

    assert [f.name for f in dataclasses.fields(Point)] == [*AXES, "blas"]
    assert AXIS_FIELDS == AXES
    p = Point("m", "numpy", "p", "bf16", 4, "on", "none", {"ENGINE_X": "1"})
    assert p.value("parallel") == 4 and p.replace(parallel=1).parallel == 1 and p.parallel == 4
    with pytest.raises(KeyError):
        p.value("blas")  # a config key, not an axis
