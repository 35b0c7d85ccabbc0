"""Every manifest a run writes fits the versioned JSON schema (gates/report/receipt/schema/):
passing, failing, crashed and not comparable runs, with and without speed, and shards merged."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest

from gates.__main__ import main
from gates.report.receipt import schema
from gates.run import execute
from tests.gates.conftest import run_gates
from tests.gates.test_gates_receipt import crash


def _fits(man: dict) -> None:
    assert man["schema"] == schema.SCHEMA == "exact-gates/receipt/1"
    assert schema.problems(man) == []


def test_the_schema_is_a_valid_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(schema.schema())
    assert schema.schema()["$id"] == schema.SCHEMA


def test_manifests_of_every_outcome_fit(stub_repo, monkeypatch):
    speed = (stub_repo.root / "matrices" / "small.yaml").read_text()
    speed += "speed: {blocks: 3, max_blocks: 3, parallel: [1]}\n"
    (stub_repo.root / "matrices" / "speed.yaml").write_text(speed)
    stub_repo.commit("batch bug, and a speed matrix", BATCH_BUG=True)
    code, man, md = run_gates(stub_repo, matrix="matrices/speed.yaml")
    assert code == 1 and man["speed"]["cells"]
    cpu = man["speed"]["cpu"]  # the receipt names the CPU the speed section claimed
    assert f"on CPU {cpu} (claimed: free of " in md
    _fits(man)
    code, man, _ = run_gates(stub_repo, base="main~1", head="main~1")
    assert code == 0
    _fits(man)
    stub_repo.commit("caps fail", FAIL_CAPABILITIES=True)
    code, man, _ = run_gates(stub_repo)
    assert code == 3
    _fits(man)
    with monkeypatch.context() as mp:
        mp.setattr(execute, "run_arm", lambda job, *a, **k: crash(job))
        code, man, _ = run_gates(stub_repo, "--no-cache", base="main~2", head="main~1")
    assert code == 3
    _fits(man)


def test_merged_shards_fit(stub_repo, tmp_path):
    stub_repo.commit("leak", LEAK_PAGES=1)
    shards = tmp_path / "shards"
    for i in (1, 2):
        args = ["run", "--repo", str(stub_repo.root), "--base", "main~1", "--head", "main"]
        args += ["--matrix", "matrices/small.yaml", "--quiet", "--shard", f"{i}/2"]
        assert main([*args, "--out", str(shards)]) == 0
    out = tmp_path / "out"
    code = main(
        ["merge", "--repo", str(stub_repo.root), "--out", str(out)]
        + [str(p) for p in shards.glob("*.json")]
    )
    assert code == 1
    _fits(json.loads(next(out.glob("*.json")).read_text()))


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        (("exit_code",), 7, "exit_code"),
        (("gates", 0, "status"), "held", "gates/0/status"),
        (("head", "sha"), "HEAD", "head/sha"),
        (("schema",), "exact-gates/receipt/0", "schema"),
    ],
)
def test_a_broken_manifest_is_named_where_it_breaks(stub_repo, path, value, where):
    stub_repo.commit("same tree")
    _, man, _ = run_gates(stub_repo)
    bad = copy.deepcopy(man)
    target = bad
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    got = schema.problems(bad)
    assert len(got) == 1 and got[0].startswith(f"{where}: "), got
    del bad["verdict"]
    assert any("'verdict' is a required property" in p for p in schema.problems(bad))
